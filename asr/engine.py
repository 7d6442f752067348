"""The ASR engine: a loaded Whisper model, VAD chunking and a (speculative or plain) decoder."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import torch

from asr.alignment import WordAligner
from asr.audio import SAMPLE_RATE
from asr.decoding import Decoder, GreedyDecoder, SpecialTokens, WhisperLogitRules, detect_language
from asr.device import resolve_device, resolve_dtype
from asr.memory import trim_heap
from asr.model import WhisperDecoderRuntime
from asr.models import WhisperBundle, load_whisper
from asr.segments import tokens_to_segments
from asr.types import DecodeStats, Segment
from asr.vad import Chunk, VoiceActivityDetector, merge_spans

Progress = Callable[[str, float], None]
TASKS = ("transcribe", "translate")
# openai/whisper's silence test: a chunk is dropped as non-speech when both hold.
NO_SPEECH_THRESHOLD = 0.6
LOGPROB_THRESHOLD = -1.0


@dataclass
class DecodeOptions:
    language: str | None = None  # None: detect
    task: str = "transcribe"
    batch_size: int = 8
    vad_threshold: float = 0.5
    max_chunk_s: float = 30.0
    word_timestamps: bool = False

    def validate(self, special: SpecialTokens) -> None:
        if self.task not in TASKS:
            raise ValueError(f"task must be one of {', '.join(TASKS)}, got '{self.task}'")
        if self.batch_size < 1:
            raise ValueError(f"batch size must be >= 1, got {self.batch_size}")
        if not 1.0 <= self.max_chunk_s <= 30.0:
            raise ValueError(f"chunk length must be between 1 and 30 s, got {self.max_chunk_s}")
        if self.language is not None:
            if special.multilingual and self.language not in special.languages:
                raise ValueError(f"unknown language code '{self.language}'")
            if not special.multilingual and self.language != "en":
                raise ValueError(f"this model is English-only; cannot use language '{self.language}'")
        if self.task == "translate" and not special.multilingual:
            raise ValueError("this model is English-only and cannot translate")


@dataclass
class AsrResult:
    segments: list[Segment]
    language: str | None
    language_probability: float | None
    stats: DecodeStats
    chunks: list[Chunk] = field(default_factory=list)
    vad_seconds: float = 0.0


DecoderFactory = Callable[["AsrEngine"], Decoder]


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
    ):
        device = resolve_device(device)
        self.bundle = bundle or load_whisper(model, cache_dir=cache_dir, device=device, dtype=resolve_dtype(dtype, device))
        self.device = device
        self.special = SpecialTokens.from_tokenizer(self.bundle.tokenizer, self.bundle.generation_config,
                                                    self.bundle.model.config.vocab_size)
        self.runtime = WhisperDecoderRuntime(self.bundle.model)
        gc = self.bundle.generation_config
        self.rules = WhisperLogitRules(
            self.special,
            self.runtime.vocab_size,
            list(gc.suppress_tokens or []),
            list(gc.begin_suppress_tokens or []),
            timestamps=True,
        )
        self.vad = VoiceActivityDetector()
        self.aligner = WordAligner(self.runtime, self.special, self.bundle.tokenizer, getattr(gc, "alignment_heads", None))
        self.decoder: Decoder = (decoder_factory or plain_decoder)(self)

    @property
    def model_name(self) -> str:
        return self.bundle.name

    def features(self, audio: np.ndarray, chunks: list[Chunk]) -> torch.Tensor:
        return self._features([audio[c.start : c.end] for c in chunks])

    def _features(self, pieces: list[np.ndarray]) -> torch.Tensor:
        fe = self.bundle.feature_extractor
        feats = fe(pieces, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        return feats.to(self.device, dtype=self.bundle.model.dtype)

    def _encode(self, pieces: list[np.ndarray]) -> tuple[torch.Tensor, torch.Tensor, float]:
        """Log-mel features and encoder output of audio pieces (one row each), and the seconds it took."""
        t = time.perf_counter()
        feats = self._features(pieces)
        enc = self.runtime.encode(feats)
        trim_heap()  # the encoder's temporaries (asr.memory): 75-120 MB kept otherwise, measured
        return feats, enc, time.perf_counter() - t

    def _speech_chunks(self, audio: np.ndarray, opts: DecodeOptions, progress: Callable[[float], None]) -> tuple[list[Chunk], float]:
        t0 = time.perf_counter()
        spans = self.vad.speech_spans(audio, opts.max_chunk_s, progress=progress)
        trim_heap()
        return merge_spans(spans, opts.max_chunk_s), time.perf_counter() - t0

    def _decode_batch(
        self,
        enc: torch.Tensor,
        feats: torch.Tensor,
        prompt: list[int],
        chunks: list[Chunk],
        language: str | None,
        opts: DecodeOptions,
        decoder: Decoder,
        stats: DecodeStats,
    ) -> tuple[list[list[Segment]], list[int]]:
        """Decode one batch of chunks (row i of ``enc`` is ``chunks[i]``, all after the same ``prompt``).

        Returns the segments of each chunk (absolute times) and the tokens each row generated;
        the decode's counters and the alignment time are added to ``stats``.
        """
        out = decoder.decode(enc, prompt, features=feats)
        trim_heap()  # the batch's cache is freed: keep the heap from holding it (asr.memory)
        stats.merge(out.stats)
        per_chunk = [
            []
            if seq.no_speech_prob > NO_SPEECH_THRESHOLD and seq.avg_logprob < LOGPROB_THRESHOLD
            else tokens_to_segments(seq.tokens, self.special, self.bundle.tokenizer, chunk.start_s, chunk.duration_s)
            for chunk, seq in zip(chunks, out.sequences)
        ]
        if opts.word_timestamps:
            t = time.perf_counter()
            offsets = [c.start_s for c in chunks]
            self.aligner.align(enc, per_chunk, offsets, [c.duration_s for c in chunks], language, opts.task)
            stats.alignment_seconds += time.perf_counter() - t
        return per_chunk, [len(seq.tokens) for seq in out.sequences]

    def transcribe(
        self,
        audio: np.ndarray,
        options: DecodeOptions | None = None,
        progress: Progress | None = None,
        decoder: Decoder | None = None,
    ) -> AsrResult:
        """Transcribe a 16 kHz waveform; ``decoder`` overrides the engine's own (tests, benchmarks)."""
        decoder = decoder or self.decoder
        opts = options or DecodeOptions()
        opts.validate(self.special)
        report = progress or (lambda stage, frac: None)
        chunks, vad_seconds = self._speech_chunks(audio, opts, lambda f: report("vad", f))
        stats = DecodeStats()
        if not chunks:
            return AsrResult([], opts.language, None, stats, [], vad_seconds)

        language, lang_prob = opts.language, None
        prompt: list[int] | None = None
        segments: list[Segment] = []
        report("transcribe", 0.0)
        for i in range(0, len(chunks), opts.batch_size):
            batch = chunks[i : i + opts.batch_size]
            feats, enc, seconds = self._encode([audio[c.start : c.end] for c in batch])
            stats.encoder_seconds += seconds
            if language is None:  # detected once per file, on its first chunk
                language, lang_prob = detect_language(self.runtime, self.special, enc)
            if prompt is None:
                prompt = self.special.prompt(language, opts.task, timestamps=True)
            per_chunk, _ = self._decode_batch(enc, feats, prompt, batch, language, opts, decoder, stats)
            segments.extend(s for segs in per_chunk for s in segs)
            report("transcribe", min(1.0, (i + len(batch)) / len(chunks)))
        return AsrResult(segments, language, lang_prob, stats, chunks, vad_seconds)

    def transcribe_many(
        self,
        audios: list[np.ndarray],
        options: DecodeOptions | None = None,
        progress: Progress | None = None,
        decoder: Decoder | None = None,
    ) -> list[AsrResult]:
        """Transcribe several 16 kHz waveforms with their chunks batched together.

        Each file is cut by VAD and gets its language from its own first chunk (as in
        ``transcribe``); then chunks of all files that share a prompt (language, task) are decoded
        in batches of ``batch_size``. Per-file stats: exact token counts and VAD time; a shared
        batch's encoder/decoder/alignment time and pass counts are split by each file's rows
        (encoder) or generated tokens (decoder, alignment).
        """
        decoder = decoder or self.decoder
        opts = options or DecodeOptions()
        opts.validate(self.special)
        report = progress or (lambda stage, frac: None)
        n = len(audios)
        chunks: list[list[Chunk]] = []
        vad_seconds: list[float] = []
        for i, audio in enumerate(audios):
            found, seconds = self._speech_chunks(audio, opts, lambda f, i=i: report("vad", (i + f) / n))
            chunks.append(found)
            vad_seconds.append(seconds)
        stats = [DecodeStats() for _ in audios]
        languages: list[tuple[str | None, float | None]] = [(opts.language, None)] * n
        # Encoder rows kept from language detection, reused when their chunk is decoded.
        encoded: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]] = {}
        if opts.language is None:
            firsts = [i for i in range(n) if chunks[i]]
            for b in range(0, len(firsts), opts.batch_size):
                rows = firsts[b : b + opts.batch_size]
                first = [chunks[i][0] for i in rows]
                feats, enc, seconds = self._encode([audios[i][c.start : c.end] for i, c in zip(rows, first)])
                for j, i in enumerate(rows):
                    languages[i] = detect_language(self.runtime, self.special, enc[j : j + 1])
                    encoded[(i, 0)] = (feats[j : j + 1], enc[j : j + 1])
                    stats[i].encoder_seconds += seconds / len(rows)

        # Work items grouped by prompt, in file and chunk order within a group.
        groups: dict[tuple[int, ...], list[tuple[int, int]]] = {}
        for i in range(n):
            if chunks[i]:
                prompt = self.special.prompt(languages[i][0], opts.task, timestamps=True)
                groups.setdefault(tuple(prompt), []).extend((i, k) for k in range(len(chunks[i])))
        per_file: list[dict[int, list[Segment]]] = [{} for _ in audios]
        total, done = sum(len(c) for c in chunks), 0
        report("transcribe", 0.0)
        for prompt, items in groups.items():
            language = languages[items[0][0]][0]
            for b in range(0, len(items), opts.batch_size):
                batch = items[b : b + opts.batch_size]
                feats, enc = self._gather(audios, chunks, batch, encoded, stats)
                batch_stats = DecodeStats()
                per_chunk, generated = self._decode_batch(
                    enc, feats, list(prompt), [chunks[i][k] for i, k in batch], language, opts, decoder, batch_stats
                )
                for (i, k), segs in zip(batch, per_chunk):
                    per_file[i][k] = segs
                _share_stats(batch_stats, [i for i, _ in batch], generated, stats)
                done += len(batch)
                report("transcribe", done / total)
        return [
            AsrResult(
                [s for k in sorted(per_file[i]) for s in per_file[i][k]],
                languages[i][0],
                languages[i][1],
                stats[i],
                chunks[i],
                vad_seconds[i],
            )
            for i in range(n)
        ]

    def _gather(
        self,
        audios: list[np.ndarray],
        chunks: list[list[Chunk]],
        batch: list[tuple[int, int]],
        encoded: dict[tuple[int, int], tuple[torch.Tensor, torch.Tensor]],
        stats: list[DecodeStats],
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Features and encoder output of a batch of (file, chunk) items, encoding the ones not kept yet."""
        todo = [item for item in batch if item not in encoded]
        if todo:
            feats, enc, seconds = self._encode([audios[i][chunks[i][k].start : chunks[i][k].end] for i, k in todo])
            for j, (i, k) in enumerate(todo):
                encoded[(i, k)] = (feats[j : j + 1], enc[j : j + 1])
                stats[i].encoder_seconds += seconds / len(todo)
        rows = [encoded.pop(item) for item in batch]
        return torch.cat([f for f, _ in rows]), torch.cat([e for _, e in rows])


def _share_stats(batch: DecodeStats, files: list[int], generated: list[int], into: list[DecodeStats]) -> None:
    """Split a shared batch's counters over its files by their generated tokens (rows when none)."""
    weights: dict[int, float] = {}
    for i, g in zip(files, generated):
        weights[i] = weights.get(i, 0.0) + g + 1  # +1: end of text, so a silent row still counts
    total = sum(weights.values())
    for i, w in weights.items():
        share = w / total
        into[i].generated_tokens += sum(g for f, g in zip(files, generated) if f == i)
        into[i].target_passes += round(batch.target_passes * share)
        into[i].drafted_tokens += round(batch.drafted_tokens * share)
        into[i].accepted_tokens += round(batch.accepted_tokens * share)
        into[i].decoder_seconds += batch.decoder_seconds * share
        into[i].alignment_seconds += batch.alignment_seconds * share


def plain_decoder(engine: AsrEngine) -> Decoder:
    return GreedyDecoder(engine.runtime, engine.special, engine.rules)
