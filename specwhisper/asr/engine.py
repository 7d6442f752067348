"""The ASR engine: a loaded Whisper model, VAD chunking and a (speculative or plain) decoder."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from specwhisper.asr.decoding.alignment import WordAligner
from specwhisper.asr.batch_memory import fit_batch_size
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.audio.chunking import Chunk, Span, frame_levels, join_heard, join_spans, plan_chunks, to_decode
from specwhisper.audio.clips import clip_spans, clips_left_out
from specwhisper.asr.decoding.greedy import CapturedChoices, Decoder, GreedyDecoder, SamplingDecoder
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.decoding.suppress import numeral_tokens, suppressed_tokens
from specwhisper.hardware.device import resolve_device, resolve_dtype, synchronize
from specwhisper.asr.features import LogMel
from specwhisper.asr.options import SAMPLING, DecodeOptions
from specwhisper.asr.decoding.fallback import (POOL_BATCHES, FallbackPool, Failing, decode_with_fallback, first_attempts,
                                               kept)
from specwhisper.asr.decoding.quality import Attempt
from specwhisper.hardware.memory import release_gpu_library_pages, release_torch_import_pages, trim_heap
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime
from specwhisper.asr.runtime.encoder import EncoderRuntime
from specwhisper.asr.weights.loader import WhisperBundle, load_whisper
from specwhisper.asr import hallucination, redecode
from specwhisper.asr.languages import chunk_languages, file_detections, file_languages
from specwhisper.asr.redecode import Standing
from specwhisper.asr.scheduling import FileResults, FinalSegments, Item, WorkQueues
from specwhisper.asr.decoding.segments import TIME_PRECISION, dated, stitch, tokens_to_segments
from specwhisper.results.language import LanguageDetection
from specwhisper.results.stats import DecodeStats, share_stats
from specwhisper.results.transcript import Segment
from specwhisper.audio.vad import FILTER_SETTINGS, VoiceActivityDetector

Progress = Callable[[str, float], None]
DETECT_PREFIX_S = 120.0  # detect_language plans a long file's first two minutes first, then twice as many, ...
log = logging.getLogger(__name__)


@dataclass
class AsrResult:
    segments: list[Segment]
    language: str | None
    language_probability: float | None
    stats: DecodeStats
    chunks: list[Chunk] = field(default_factory=list)  # every window decoded, re-decoded stretches included
    vad_seconds: float = 0.0


DecoderFactory = Callable[["AsrEngine"], Decoder]


@dataclass
class FirstPass:
    """A batch after its first decode: its encoder output and its chunks' attempts so far (``failing``,
    which the fallback's samples extend), its counters and each chunk's file length in seconds (for
    the hallucination rules)."""

    batch: list[Item]
    prompt: list[int]
    language: str | None
    chunks: list[Chunk]
    failing: Failing
    stats: DecodeStats
    file_ends: list[float]


@dataclass
class Replayed:
    """A batch an interrupted run finished, as its journal recorded it (``ChunkCheckpoint.replay``)."""

    batch: list[Item]
    prompt: list[int]
    language: str | None
    per_chunk: list[list[Segment]]
    again: list[list[tuple[Chunk, Standing | None]]]
    attempts: list[Attempt]
    stats: DecodeStats


class AsrEngine:
    """Loads the target model once; transcribes 16 kHz waveforms."""

    def __init__(
        self,
        model: str = "base",
        cache_dir: Path | None = None,
        device: str = "cpu",
        decoder_factory: DecoderFactory | None = None,
        bundle: WhisperBundle | None = None,
        dtype: str = "auto",
        suppress_tokens: str = "-1",
        suppress_numerals: bool = False,
        token: str | None = None,
    ):
        """``suppress_tokens`` and ``suppress_numerals``: the tokens never written (``decoding.suppress``);
        ``token``: the Hugging Face token a gated or private hub model needs (default: the hub's own, $HF_TOKEN)."""
        device = resolve_device(device)
        if device == "cpu":
            release_gpu_library_pages()  # a CUDA build of torch: 279 MB resident for nothing (specwhisper.hardware.memory)
        self.bundle = bundle or load_whisper(model, cache_dir=cache_dir, device=device, dtype=resolve_dtype(dtype, device),
                                             token=token)
        self.device = device
        self.special = SpecialTokens.from_tokenizer(self.bundle.tokenizer, self.bundle.generation_config,
                                                    self.bundle.model.config.vocab_size)
        self.log_mel = LogMel(self.bundle.feature_extractor, device)
        self.encoder = EncoderRuntime(self.bundle.model.model.encoder)
        self.runtime = WhisperDecoderRuntime(self.bundle.model)
        gc = self.bundle.generation_config
        # the numerals' tokens (0.5 s to find) are found once, and added to every call's set
        self.numerals = numeral_tokens(self.bundle.tokenizer, self.special.eot) if suppress_numerals else []
        self.suppressed = suppressed_tokens(suppress_tokens, list(gc.suppress_tokens or []), self.runtime.vocab_size,
                                            self.numerals)
        self.rules = WhisperLogitRules(self.special, self.runtime.vocab_size, self.suppressed,
                                       list(gc.begin_suppress_tokens or []), timestamps=True)
        self.vad = VoiceActivityDetector(device=device)
        self.aligner = WordAligner(self.runtime, self.special, self.bundle.tokenizer, getattr(gc, "alignment_heads", None))
        self.decoder: Decoder = (decoder_factory or plain_decoder)(self)
        self.draws = CapturedChoices(self.runtime.device)  # the fallback samplers' (``_sampler``)
        # the temperature fallback's later temperatures sampled ahead, and the failing chunks of several
        # batches sampled together (``sample_again``, ``FallbackPool``): the same attempts, fewer decoder
        # steps, more rows' work; for a GPU, where a step costs about the same at any row count
        self.fallback_ahead = str(device).startswith("cuda")
        self.fallback_pool = POOL_BATCHES  # with ``fallback_ahead``: the most batches sampled together
        if device == "cpu":
            release_torch_import_pages()  # pages only the import and the loading ran (specwhisper.hardware.memory)

    @property
    def model_name(self) -> str:
        return self.bundle.name

    def features(self, audio: np.ndarray, chunks: list[Chunk], zero_pad: list[bool] | None = None) -> torch.Tensor:
        """Whisper's input for ``chunks`` of ``audio``: openai's padding, or zero-padded log-mel where
        ``zero_pad`` says so (``specwhisper.asr.features``)."""
        return self._features([c.samples(audio) for c in chunks], zero_pad)

    def _features(self, pieces: list[np.ndarray], zero_pad: list[bool] | None = None) -> torch.Tensor:
        zero_pad = zero_pad if zero_pad is not None else [False] * len(pieces)
        return self.log_mel(pieces, zero_pad).to(self.bundle.model.dtype)

    def encode(self, pieces: list[np.ndarray], zero_pad: list[bool] | None = None) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Log-mel features and encoder output of audio pieces (one row each), and the seconds it took."""
        t = time.perf_counter()
        feats = self._features(pieces, zero_pad)
        enc = self.encoder.encode(feats)
        trim_heap()  # the encoder's temporaries (specwhisper.hardware.memory): 75-120 MB kept otherwise, measured
        synchronize(self.device)  # else the decoder's first token read waits for the encoder, and is charged for it
        return feats, enc, time.perf_counter() - t

    def _plan(self, audio: np.ndarray, opts: DecodeOptions, progress: Callable[[float], None]) -> tuple[list[Chunk], float]:
        """The file's chunks to decode (all of it, cut in the VAD's pauses, but a piece of a pause under a
        second: specwhisper.audio.chunking; with ``vad_filter`` its speech alone, joined; with ``clips``
        each clip's, planned as a file of its own) and the VAD's seconds."""
        t0 = time.perf_counter()
        if opts.clips is None:
            return self._plan_piece(audio, opts, progress), time.perf_counter() - t0
        spans = clip_spans(opts.clips, len(audio))
        if note := clips_left_out(opts.clips, len(audio)):
            log.warning(f"clip_timestamps: {note}")
        total = sum(b - a for a, b in spans)
        chunks, done = [], 0
        for a, b in spans:
            report = (lambda f, done=done, n=b - a: progress((done + f * n) / total))
            chunks += [c.shifted(a) for c in self._plan_piece(audio[a:b], opts, report)]
            done += b - a
        return chunks, time.perf_counter() - t0

    def decoded_spans(self, audio: np.ndarray, opts: DecodeOptions, progress: Callable[[float], None] | None = None
                      ) -> list[Span]:
        """The stretches of ``audio`` (in samples) a transcription with ``opts`` hears: a joined chunk's
        speech spans (``vad_filter``), any other chunk whole."""
        chunks, _ = self._plan(audio, opts, progress or (lambda f: None))
        return [span for c in chunks for span in (c.voiced if c.joined else ((c.start, c.end),))]

    def _plan_piece(self, audio: np.ndarray, opts: DecodeOptions, progress: Callable[[float], None]) -> list[Chunk]:
        settings = dict(FILTER_SETTINGS) if opts.vad_filter else {}
        if opts.vad_min_silence_ms is not None:
            settings["min_silence_ms"] = opts.vad_min_silence_ms
        if opts.vad_speech_pad_ms is not None:
            settings["speech_pad_ms"] = opts.vad_speech_pad_ms
        spans = self.vad.speech_spans(audio, opts.max_span_s, progress=progress, threshold=opts.vad_threshold, **settings)
        trim_heap()
        if opts.vad_filter:
            chunks = join_spans(spans, opts.max_chunk_s)
        else:
            levels = frame_levels(audio)
            heard = self.vad.rehear(audio, spans, opts.max_span_s, threshold=opts.vad_threshold, **settings)
            spans = join_heard(spans, heard, levels, opts.max_chunk_s)
            chunks = to_decode(plan_chunks(spans, len(audio), opts.max_chunk_s, levels), opts.max_chunk_s)
        return chunks

    def decode_windows(self, encoder_out: torch.Tensor, features: torch.Tensor, prompt: list[int], opts: DecodeOptions
                       ) -> list[Attempt]:
        """One decode of each row of ``encoder_out`` (of the log-mel windows ``features``, on the model's device)
        after ``prompt``, as openai-whisper's ``decode`` (tokens after its SOT sequence are its ``prefix``, which
        sampling starts after): greedy (speculative where a drafter runs) or ``opts.beam_size`` beams at
        temperature 0, else ``best_of`` samples, at ``opts.quality``'s first temperature alone. Each row's attempt."""
        quality = replace(opts.quality, temperatures=opts.quality.temperatures[:1])
        decoder = self.decoder.with_rules(self.call_rules(self.decoder.rules, opts).with_prompt_lead()).with_cap(opts.max_new_tokens)
        return decode_with_fallback(self._first_decoder(opts, decoder), lambda: self._sampler(decoder), encoder_out,
                                    prompt, features, quality, self.text_of, DecodeStats())

    def call_rules(self, rules: WhisperLogitRules, opts: DecodeOptions) -> WhisperLogitRules:
        """``rules`` as a call's options set them: the tokens suppressed, the penalties on repetition, the
        first token's limits."""
        return (self.suppressing(rules, opts.suppress_tokens).with_penalties(opts.repetition_penalty, opts.no_repeat_ngram_size)
                .with_start(opts.suppress_blank, opts.max_initial_timestamp))

    def suppressing(self, rules: WhisperLogitRules, spec: str | None) -> WhisperLogitRules:
        """``rules`` with the tokens a call's ``suppress_tokens`` ``spec`` names never written (and the
        numerals, when the model loaded with ``suppress_numerals``); None: ``rules`` as they are."""
        if spec is None:
            return rules
        gc = self.bundle.generation_config
        return rules.with_suppressed(suppressed_tokens(spec, list(gc.suppress_tokens or []), self.runtime.vocab_size,
                                                       self.numerals))

    def _first_decoder(self, opts: DecodeOptions, decoder: Decoder) -> Decoder:
        if opts.beam_size is None:
            return decoder
        from specwhisper.asr.decoding.beam import BeamSearchDecoder

        return BeamSearchDecoder(self.runtime, self.special, decoder.rules, opts.beam_size, opts.patience,
                                 opts.quality.length_penalty, opts.quality.length_exponent).with_cap(decoder.max_new_tokens)

    def _sampler(self, decoder: Decoder | None = None) -> SamplingDecoder:
        """A sampler for the fallback with the rules and token cap of ``decoder`` (the run's; None: the
        engine's), with the engine's captured draws (captured once, not per decode)."""
        decoder = decoder or self.decoder
        return SamplingDecoder(self.runtime, self.special, decoder.rules, choices=self.draws).with_cap(decoder.max_new_tokens)

    def text_of(self, tokens: list[int]) -> str:
        """The text of decoded ``tokens`` (timestamp and special tokens left out)."""
        return self.bundle.tokenizer.decode([t for t in tokens if t < self.special.eot])

    def context_of(self, text: str | None) -> list[int]:
        """The tokens of a prompt's ``text`` (a space before it, as openai-whisper encodes it); none for none."""
        return self.bundle.tokenizer.encode(" " + text.strip(), add_special_tokens=False) if text and text.strip() else []

    def check(self, opts: DecodeOptions) -> None:
        """The checks of ``opts`` that need the model (``DecodeOptions.validate``'s, the prefix's length)."""
        opts.validate(self.special)
        self.lead_of(opts)

    def lead_of(self, opts: DecodeOptions) -> tuple[int, ...]:
        """The tokens a file's first chunk is forced to start with: <|0.00|> (with timestamps) and the
        prefix's text, as faster-whisper's ``prefix``; none without one."""
        text = self.context_of(opts.prefix)
        if len(text) > self.special.MAX_CONTEXT:
            raise ValueError(f"prefix is {len(text)} tokens long; at most {self.special.MAX_CONTEXT} fit")
        return tuple(([] if opts.without_timestamps else [self.special.timestamp_begin]) + text) if text else ()

    def _finish(self, first: FirstPass, attempts: list[Attempt], opts: DecodeOptions
                ) -> tuple[list[list[Segment]], list[list[tuple[Chunk, Standing | None]]]]:
        """A batch's results from the attempt kept per chunk: each chunk's segments (absolute times; none
        when Whisper finds no speech) and the stretches of each chunk to decode again
        (``redecode.skipped``, and ``hallucination.screen``'s with its option; none unless
        ``opts.redecodes``); the alignment time is added to the batch's stats."""
        chunks, enc, language = first.chunks, first.failing.encoder_out, first.language
        lead = self.special.lead(first.prompt)  # a forced prefix starts the text
        per_chunk: list[list[Segment]] = []
        open_text: list[int] = []  # chunks whose one segment is a capped decode's unfinished text
        for chunk, a in zip(chunks, attempts):
            heard = redecode.vad_speech(chunk)
            if (opts.quality.is_silence(a.seq, vad_speech=heard, stock=a.stock, unheard_stretch=chunk.depth > 0 and not heard)
                    or redecode.unheard(chunk, a.passed)):
                per_chunk.append([])
                continue
            # a joined chunk's times are placed in the file below; a decode without timestamps has no
            # unfinished segment to leave for a re-decode. A decode stopped at max_new_tokens leaves its
            # unfinished text for a re-decode too, unless nothing before it is finished: then that text is
            # the chunk's one segment (``open_text``), as openai-whisper and faster-whisper keep it.
            cut = (a.seq.hit_max_length or a.seq.capped) and not opts.without_timestamps
            segs = tokens_to_segments(lead + a.seq.tokens, self.special, self.bundle.tokenizer, _offset(chunk), chunk.duration_s,
                                      drop_unfinished=cut)
            if cut and a.seq.capped and not segs:
                segs = tokens_to_segments(lead + a.seq.tokens, self.special, self.bundle.tokenizer, _offset(chunk),
                                          chunk.duration_s)
                open_text += [len(per_chunk)] if segs else []  # none: a cap that left no text (--max-new-tokens 1)
            facts = dict(seek=chunk.start // 160, temperature=a.temperature, avg_logprob=a.seq.avg_logprob,
                         compression_ratio=a.compression_ratio, no_speech_prob=a.seq.no_speech_prob, language=language)
            per_chunk.append([replace(seg, **facts) for seg in segs])
        offsets, durations = [_offset(c) for c in chunks], [c.duration_s for c in chunks]
        if open_text and opts.redecodes:
            self._end_open_text(first, attempts, per_chunk, open_text, durations)
        if opts.needs_words:
            t = time.perf_counter()
            self.aligner.align(enc, per_chunk, offsets, durations, language, opts.task,
                               punctuations=(opts.prepend_punctuations, opts.append_punctuations))
            first.stats.alignment_seconds += time.perf_counter() - t
        again: list[list[tuple[Chunk, Standing | None]]] = []
        for k, chunk in enumerate(chunks):
            if chunk.joined:  # --vad-filter (no hallucination threshold with it: validate)
                _place(chunk, per_chunk[k])
            view, extra = chunk, []
            if opts.hallucination_silence_threshold is not None and per_chunk[k]:
                per_chunk[k], view, extra = hallucination.screen(chunk, per_chunk[k], opts.hallucination_silence_threshold,
                                                                 first.file_ends[k])
                if not attempts[k].passed:  # text in reserve only from a decode that passed the checks
                    extra = [(c, None) for c, _ in extra]
            # the very segments kept: a thin one is replaced by identity
            if opts.redecodes:
                again.append(redecode.skipped(view, per_chunk[k]) + extra)
            else:  # --vad-filter with timestamps seeks on in the joined speech, as faster-whisper's does
                again.append(redecode.joined_rest(chunk, per_chunk[k]) if chunk.joined and not opts.without_timestamps else [])
        return per_chunk, again

    def _end_open_text(self, first: FirstPass, attempts: list[Attempt], per_chunk: list[list[Segment]],
                       open_text: list[int], durations: list[float]) -> None:
        """The one segment of each chunk in ``open_text`` (a decode stopped at max_new_tokens before any
        segment was finished) ended where Whisper would close it (``Decoder.closing_timestamp``), so that
        the rest of the chunk is decoded again (``redecode.skipped``) where openai-whisper and faster-whisper
        seek past the window, and its words aligned in the audio up to there (``durations``): the alignment
        spreads a text over all the audio it is given (LibriSpeech 2412-153948's first 10 tokens: " I" from
        2.2 s to 10.2 s; Whisper closes the text at 2.52 s). Measured (base, 36 s of three clips with pauses,
        WER 0.013 uncapped): at 10 tokens a window, WER 0.47-0.48 where skipping past the window gave 0.81;
        at 20, 0.31-0.33 where it gave 0.58-0.62 (a chunk is decoded again twice at most)."""
        for k in open_text:
            (seg,) = per_chunk[k]
            chunk = first.chunks[k]
            closing = self.decoder.closing_timestamp(first.failing.encoder_out[k : k + 1], first.prompt,
                                                     attempts[k].seq.tokens, int(chunk.duration_s / TIME_PRECISION))
            seg.end = max(seg.start, _offset(chunk) + closing * TIME_PRECISION)
            durations[k] = seg.end - _offset(chunk)

    def transcribe(
        self,
        audio: np.ndarray,
        options: DecodeOptions | None = None,
        progress: Progress | None = None,
        decoder: Decoder | None = None,
        journal=None,
        on_final: Callable[[list[Segment]], None] | None = None,
    ) -> AsrResult:
        """Transcribe a 16 kHz waveform; ``decoder`` overrides the engine's own (tests, benchmarks);
        ``on_final``: ``transcribe_many``'s, for the one file."""
        show = None if on_final is None else (lambda i, segments: on_final(segments))
        return self.transcribe_many([audio], options, progress, decoder, journal, on_final=show)[0]

    def detect_language(self, audio: np.ndarray, options: DecodeOptions | None = None,
                        progress: Progress | None = None) -> LanguageDetection:
        """A 16 kHz waveform's language as ``transcribe_many`` finds it when ``language`` is not given,
        on the same windows (the options' VAD settings and clips plan the chunks), with every language's
        probability; a ValueError when there is nothing to decode (no clip within the audio). Progress:
        "vad".

        A long file is planned on its first ``DETECT_PREFIX_S`` seconds, then twice as many, ... so that
        its detection does not run the VAD over all of it: the chunks that end two chunk lengths before
        the prefix does are the whole plan's (the VAD hears from a file's start, and a chunk's bounds depend
        on the speech next to it only), and the detection on them is final once it is sure, or has heard
        ``language_detection_segments`` chunks with speech (``file_detections`` goes through them in order)."""
        opts = options or DecodeOptions()
        opts.validate(self.special)
        report = progress or (lambda stage, frac: None)
        encoded: dict[Item, tuple[torch.Tensor, torch.Tensor]] = {}  # kept from one prefix to the next
        margin = 2 * int(opts.max_chunk_s * SAMPLE_RATE)
        n = int(DETECT_PREFIX_S * SAMPLE_RATE)
        while True:
            whole = opts.clips is not None or n >= len(audio)
            if whole:
                plan = self._plan(audio, opts, lambda f: report("vad", f))[0]
            else:
                plan = [c for c in self._plan(audio[:n], opts, lambda f: None)[0] if c.end <= n - margin]
            found = file_detections(self, [audio], [plan], 1, encoded, [DecodeStats()], opts)[0]
            heard = sum(c.speech for c in plan)
            if whole or (found is not None and found.speech
                         and (found.probability >= opts.language_threshold or heard >= opts.language_detection_segments)):
                break
            n *= 2
        if found is None:
            raise ValueError(f"clip_timestamps: no clip is within the {len(audio) / SAMPLE_RATE:.1f} s of audio: "
                             "no language to detect")
        report("vad", 1.0)
        return found

    def transcribe_many(
        self,
        audios: list[np.ndarray],
        options: DecodeOptions | None = None,
        progress: Progress | None = None,
        decoder: Decoder | None = None,
        journal=None,
        on_final: Callable[[int, list[Segment]], None] | None = None,
    ) -> list[AsrResult]:
        """Transcribe several 16 kHz waveforms with their chunks batched together.

        Each file is cut into chunks covering all of it (specwhisper.audio.chunking; with ``vad_filter``
        its speech alone, joined) and gets its language from its first chunk with VAD speech (with
        ``multilingual`` each chunk gets its own: ``languages.chunk_languages``, the chunks of each language in queues of
        their own); then chunks of all files that share a prompt (language, task,
        initial prompt) are decoded in batches of ``batch_size`` (``specwhisper.asr.scheduling``); the
        stretches a decode skipped are queued again (``specwhisper.asr.redecode``). With ``condition_on_previous_text`` each file's chunks decode
        one at a time in order, each after the text of the one before (openai/whisper's way).
        Per-file stats: exact token counts and VAD time; a shared batch's encoder/decoder/alignment
        time and pass counts are split by each file's rows (encoder) or generated tokens (decoder,
        alignment). ``journal`` (specwhisper.pipeline.checkpoint) replays the batches an interrupted
        run finished and records the ones decoded; progress is the share of the audio to decode that is
        decoded (stretches queued again add to both), never reported lower than before. ``on_final(file,
        segments)`` gets each file's segments in order as they become final (``scheduling.FinalSegments``),
        the chunks then decoded in the files' order."""
        decoder = decoder or self.decoder
        opts = options or DecodeOptions()
        opts.validate(self.special)
        lead = self.lead_of(opts)
        decoder = decoder.with_rules(self.call_rules(decoder.rules, opts)).with_cap(opts.max_new_tokens)
        # what the device's memory holds (one warning line when it is less), before any work
        rows = fit_batch_size(opts.batch_size, self.runtime)
        report = progress or (lambda stage, frac: None)
        n = len(audios)
        plans: list[list[Chunk]] = []
        vad_seconds: list[float] = []
        for i, audio in enumerate(audios):
            found, seconds = self._plan(audio, opts, lambda f, i=i: report("vad", (i + f) / n))
            plans.append(found)
            vad_seconds.append(seconds)
        stats = [DecodeStats() for _ in audios]
        encoded: dict[Item, tuple[torch.Tensor, torch.Tensor]] = {}  # rows kept from language detection
        if opts.multilingual:  # every chunk's own, detected as the work queues need it
            languages: list[tuple[str | None, float | None]] = [(opts.language, None)] * n
        else:
            languages = file_languages(self, audios, plans, opts, rows, encoded, stats)
        initial = self.context_of(opts.prompt_text)

        def prompt_of(language: str | None, context: list[int], item: Item) -> tuple[int, ...]:
            """The prompt of ``item``'s decode; a file's first chunk's ends with the prefix it starts with."""
            first = lead and item[1] is plans[item[0]][0]
            return tuple(self.special.prompt(language, opts.task, timestamps=not opts.without_timestamps,
                                             context=context)) + (lead if first else ())

        latest = [opts.language] * n  # multilingual: each file's language so far
        conditioning = opts.condition_on_previous_text
        work = WorkQueues(1 if conditioning else rows,
                          key=lambda item, language: item[0] if conditioning else prompt_of(language, initial, item),
                          detect=lambda items: chunk_languages(self, audios, plans, items, opts, encoded, stats, latest),
                          in_order=conditioning or on_final is not None)
        for i in range(n):
            for c in plans[i]:
                work.wait((i, c)) if opts.multilingual else work.add((i, c), languages[i][0])
        # conditioning: the hotwords are carried before every chunk's text, the initial prompt before the first's
        files = (FileResults(n, self.context_of(opts.initial_prompt), True, self.context_of(opts.hotwords),
                             opts.prompt_reset_on_temperature) if conditioning else FileResults(n, initial, False))
        speech = [_speech_seconds(plan) for plan in plans]
        final = None if on_final is None else FinalSegments(n, self.bundle.tokenizer, speech, on_final)
        # samples of audio to decode (the whole file, but what --vad-filter drops between windows), decoded
        total, done, shown = sum(c.end - c.start for plan in plans for c in plan) or 1, 0, 0.0
        report("transcribe", 0.0)

        def take(batch: list[Item], language: str | None, per_chunk, again, attempts, batch_stats: DecodeStats,
                 replayed: bool) -> None:
            """A batch's results into the files' (its stretches to decode again into the work queues)."""
            nonlocal total, done, shown
            for item, segs, skipped, a in zip(batch, per_chunk, again, attempts):
                items = files.take(item, segs, skipped, a)
                work.again(items, language)
                stats[item[0]].redecoded_chunks += len(items)
                total += sum(c.end - c.start for _, c in items)
            share_stats(batch_stats, [i for i, _ in batch], [len(a.seq.tokens) for a in attempts], stats)
            done += sum(c.end - c.start for _, c in batch)
            shown = max(shown, done / total)  # a stretch queued again adds work: the bar waits, never goes back
            report("resume" if replayed else "transcribe", shown)

        # the fallback's samples of several batches in one stream on a GPU; a conditioned file's next
        # chunk follows the text of the one before, so its batches finish one by one
        pool = FallbackPool(lambda: self._sampler(decoder), opts.quality, self.text_of, rows, ahead=self.fallback_ahead,
                            most_batches=self.fallback_pool if self.fallback_ahead and not conditioning else 1,
                            report=lambda: report(SAMPLING, shown))
        waiting: list[FirstPass | Replayed] = []

        def finish(holding: list[Item] | None = None) -> None:
            """The pool's batches sampled again where they failed, then finished in the order they came
            (a replayed one as it was recorded); ``holding``: a batch taken from the queues, not begun."""
            shares = iter(pool.sample(waiting[0].prompt))
            trim_heap()  # the samples' caches are freed
            for w in waiting:
                if isinstance(w, Replayed):
                    take(w.batch, w.language, w.per_chunk, w.again, w.attempts, w.stats, replayed=True)
                    continue
                w.stats.merge(next(shares))
                attempts = kept(w.failing.history, opts.quality)
                per_chunk, again = self._finish(w, attempts, opts)
                if journal:
                    journal.record(w.batch, w.prompt, per_chunk, again, attempts, w.stats)
                take(w.batch, w.language, per_chunk, again, attempts, w.stats, replayed=False)
            waiting.clear()
            if final is not None:
                final.update(files, work.pending() + (holding or []))

        while (batch := work.next_batch()) is not None or waiting:
            if batch is None:
                finish()  # its batches may queue stretches again
                continue
            language = work.language_of[batch[0]]
            prompt = list(prompt_of(language, files.context(batch[0][0]), batch[0]))
            if waiting and prompt != waiting[0].prompt:  # one stream samples after one prompt
                finish(holding=batch)
            recorded = journal.replay(batch, prompt) if journal else None
            if recorded:  # an interrupted run's batch
                for item in batch:
                    encoded.pop(item, None)
                waiting.append(Replayed(batch, prompt, language, *recorded))
                pool.hold(waiting[-1].attempts)
            else:
                waiting.append(self._first_pass(audios, batch, prompt, language, opts, decoder, encoded, stats))
                pool.add(waiting[-1].failing)
            if pool.full:
                finish()
        results = []
        for i in range(n):
            segments = stitch(files.segments[i], files.redecoded, self.bundle.tokenizer)
            segments = dated(segments, speech[i])
            if final is not None:
                final.finish(i, segments)
            language, probability = _main_language(segments) if opts.multilingual else languages[i]
            results.append(AsrResult(segments, language, probability, stats[i], sorted(files.decoded[i], key=lambda c: c.start),
                                     vad_seconds[i]))
        return results

    def _first_pass(self, audios: list[np.ndarray], batch: list[Item], prompt: list[int], language: str | None,
                    opts: DecodeOptions, decoder: Decoder, encoded: dict[Item, tuple[torch.Tensor, torch.Tensor]],
                    stats: list[DecodeStats]) -> FirstPass:
        """The batch's first decode (``first_attempts``) on its encoder rows: those kept from language
        detection, the rest encoded now."""
        self.encode_items(audios, batch, encoded, stats)
        kept_rows = [encoded.pop(item) for item in batch]
        feats, enc = torch.cat([f for f, _ in kept_rows]), torch.cat([e for _, e in kept_rows])
        chunks = [c for _, c in batch]
        batch_stats = DecodeStats()
        history = first_attempts(self._first_decoder(opts, decoder), enc, prompt, feats, opts.quality, self.text_of, batch_stats)
        trim_heap()  # the batch's cache is freed: keep the heap from holding it (specwhisper.hardware.memory)
        failing = Failing(enc, history, [c.duration_s for c in chunks], [c.key for c in chunks])
        return FirstPass(batch, prompt, language, chunks, failing, batch_stats,
                         [len(audios[i]) / SAMPLE_RATE for i, _ in batch])

    def encode_items(
        self,
        audios: list[np.ndarray],
        items: list[Item],
        encoded: dict[Item, tuple[torch.Tensor, torch.Tensor]],
        stats: list[DecodeStats],
    ) -> None:
        """Features and encoder output of the (file, chunk) items not kept yet, kept in ``encoded``."""
        todo = [item for item in items if item not in encoded]
        if todo:
            feats, enc, seconds = self.encode(*_pieces(audios, todo))
            for j, (i, c) in enumerate(todo):
                encoded[(i, c)] = (feats[j : j + 1], enc[j : j + 1])
                stats[i].encoder_seconds += seconds / len(todo)


def _pieces(audios: list[np.ndarray], items: list[Item]) -> tuple[list[np.ndarray], list[bool]]:
    """The audio of (file, chunk) items and, for each, whether its log-mel is zero-padded: a planned
    chunk that is its whole file (a file that fits one window) is, as faster-whisper pads it; a chunk of
    a longer file, a joined chunk and a re-decoded stretch keep openai's padding (``specwhisper.asr.features``)."""
    pieces = [c.samples(audios[i]) for i, c in items]
    whole = [not c.joined and c.depth == 0 and c.start == 0 and c.end == len(audios[i]) for i, c in items]
    return pieces, whole


def _speech_seconds(plan: list[Chunk]) -> list[tuple[float, float]]:
    """A file's VAD speech (seconds, apart and in order) from its planned chunks' spans."""
    merged: list[list[int]] = []
    for s, e in sorted(v for c in plan for v in c.voiced):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return [(s / SAMPLE_RATE, e / SAMPLE_RATE) for s, e in merged]


def _offset(chunk: Chunk) -> float:
    """Where a chunk's decoded times start in the file; a joined chunk's are placed by ``_place``."""
    return 0.0 if chunk.joined else chunk.start_s


def _place(chunk: Chunk, segments: list[Segment]) -> None:
    """A joined chunk's segment and word times (seconds into its joined audio) as times of the file."""
    for seg in segments:
        seg.start, seg.end = chunk.time_at(seg.start), chunk.time_at(seg.end, end=True)
        for w in seg.words:
            w.start, w.end = chunk.time_at(w.start), chunk.time_at(w.end, end=True)


def _main_language(segments: list[Segment]) -> tuple[str | None, None]:
    """The language of most of a multilingual transcript's speech time (no one probability holds for it)."""
    seconds: dict[str | None, float] = {}
    for s in segments:
        seconds[s.language] = seconds.get(s.language, 0.0) + max(s.end - s.start, 0.01)
    return (max(seconds, key=seconds.__getitem__) if seconds else None), None


def plain_decoder(engine: AsrEngine) -> Decoder:
    return GreedyDecoder(engine.runtime, engine.special, engine.rules)
