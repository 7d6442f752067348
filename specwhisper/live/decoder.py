"""One re-decode of the live buffer: the encoder over the buffer, the language (detected once), the
prompt of confirmed text, the exact speculative decode with the previous hypothesis as the draft
(``specwhisper.speculative.hypothesis``), the loop guard and the word alignment.

Consecutive hypotheses are nearly the same, so the previous one drafts the next for the exact
speculative decoder (``specwhisper.asr.decoding.speculative``): every re-decode is token-identical to
plain greedy decoding of the same buffer and prompt, at a fraction of the target passes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from specwhisper.asr.decoding.quality import QualityRules, is_stock_phrase, repetitive
from specwhisper.asr.decoding.greedy import Decoder, GreedyDecoder
from specwhisper.asr.decoding.language import detect_language
from specwhisper.asr.decoding.segments import tokens_to_segments
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder, WhisperDrafter
from specwhisper.asr.engine import AsrEngine
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.hardware.device import synchronize
from specwhisper.hardware.memory import trim_heap
from specwhisper.results.stats import DecodeStats
from specwhisper.results.transcript import Segment
from specwhisper.speculative.hypothesis import HypothesisDrafter

ENCODERS = ("window", "audio")
# A near-perfect draft wants long drafts: the draft length starts at 8 and grows to 24 while every
# drafted token is accepted. Measured on 25 s of clips in 1 s pieces (26 re-decodes, loaded 2-core
# CPU), decoder time over plain: 4..12 (the offline default) 1.47x, 8..24 1.50-1.52x, 24..48 1.51x,
# 32..64 1.49x, fixed 64 1.40x: the passes a re-decode needs are set by where the hypotheses differ,
# not by the draft length. With a perfect draft (the same buffer again) 8..24 gives 2.3x, 64 3.1x.
LIVE_LOOKAHEAD = Lookahead(initial=8, maximum=24)
# A re-decode that loops ("sense with the only sense with the only ...") runs to Whisper's 448-token
# limit: 399 tokens, 3-4 s of decoding where a sound one takes 0.3-0.7 s (seen on 3 of 40 re-decodes of
# 40 s of clips with the buffer-only encoder). Speech runs at 2-6 text tokens per second (the eval
# clips: 3.3) plus two timestamps per segment: a re-decode may write ``LOOP_TOKENS_BASE`` +
# ``LOOP_TOKENS_PER_S`` per second of buffer; one that needs more, or whose text fails the fallback's
# repetition check (``quality.repetitive``: openai-whisper's threshold, or a loop at its end), is not
# a hypothesis (it confirms nothing and drafts nothing).
# Plain and speculative decoding stop at the same token, so the cap keeps them token-identical.
LOOP_TOKENS_BASE = 16
LOOP_TOKENS_PER_S = 8.0
LOOP_COMPRESSION_RATIO = 2.4

class WhisperHypothesisDrafter(HypothesisDrafter, WhisperDrafter):
    """The previous-hypothesis drafter with the Whisper decoder's hooks (no model pass of its own)."""


@dataclass
class LiveDecode:
    """One re-decode: its buffer, prompt and output tokens, for checks and benchmarks (the encoder
    output is only kept here for the observer's call)."""

    buffer_start: float
    buffer_seconds: float
    prompt: list[int]
    tokens: list[int]
    encoder_out: torch.Tensor
    stats: DecodeStats
    segments: list[Segment]
    max_len: int = 448  # the decoder's length limit (prompt and tokens) for this buffer (``token_cap``)
    looped: bool = False  # hit the token cap or too repetitive: not used as a hypothesis
    # the cross-attention K/V projection, made once for the decode and the alignment (part of the
    # decoder's cost: ``stats.decoder_seconds`` is the decode after it)
    cross_seconds: float = 0.0


def token_cap(seconds: float) -> int:
    """The most tokens a re-decode of ``seconds`` of buffer may write (``LOOP_TOKENS_PER_S``)."""
    return LOOP_TOKENS_BASE + int(LOOP_TOKENS_PER_S * seconds)



class LiveDecoder:
    """Decodes the live buffer, update after update: ``decode(audio, offset, context, previous)``."""

    def __init__(self, engine: AsrEngine, task: str, encoder: str = "audio", speculative: bool = True,
                 language: str | None = None, silence: QualityRules | None = None, vad_threshold: float = 0.5,
                 suppress_tokens: str | None = None):
        self.engine = engine
        # openai-whisper's no-speech rule, as offline decoding applies it to a chunk: Whisper's no-speech
        # probability over its threshold and, where the VAD hears speech in the buffer, an unlikely text too
        self.silence = silence or QualityRules()
        self.vad_threshold = vad_threshold
        self.task = task
        self.encoder = encoder
        self.language = language  # None: detected on the first decode, then kept
        sp = engine.special
        self.drafter = WhisperHypothesisDrafter(sp.timestamp_begin)
        rules = engine.suppressing(engine.rules, suppress_tokens)  # ``suppress_tokens``: offline's, None: the engine's
        self.decoder: Decoder = (SpeculativeDecoder(engine.runtime, sp, rules, self.drafter, LIVE_LOOKAHEAD)
                                 if speculative else GreedyDecoder(engine.runtime, sp, rules))
        self.stats = DecodeStats()

    @torch.inference_mode()
    def decode(self, audio: np.ndarray, offset: float, context: list[int], previous: list[int],
               window: bool = False, language_floor: float = 0.0, keep_floor: float = 0.0) -> LiveDecode | None:
        """Decode ``audio`` (the buffer, starting at ``offset`` s) after ``context`` (tokens of confirmed
        text), drafting from ``previous`` (the last hypothesis, buffer-relative timestamps); ``window``:
        the encoder over the whole 30 s window, whatever ``encoder`` says. Without a language, it is
        detected here, and kept when its probability reaches ``keep_floor`` (else this decode alone is in
        it); None (nothing decoded, no language kept) when the detection is less likely than ``language_floor``."""
        eng = self.engine
        seconds = len(audio) / SAMPLE_RATE
        t = time.perf_counter()
        feats = eng.features(audio, [Chunk(0, len(audio))])
        enc = eng.encoder.encode(feats) if window or self.encoder == "window" else eng.encoder.encode_audio_part(feats)
        trim_heap()
        synchronize(eng.device)
        self.stats.encoder_seconds += time.perf_counter() - t
        language = self.language
        if language is None and eng.special.multilingual:
            language, probability = detect_language(eng.runtime, eng.special, enc)
            if probability < language_floor:
                return None
            if probability >= keep_floor:
                self.language = language
        prompt = eng.special.prompt(language, self.task, timestamps=True, context=context)
        t = time.perf_counter()
        with eng.runtime.sharing_cross_kv(enc):  # the decode and the alignment attend to the same frames
            cross_seconds = time.perf_counter() - t
            self.stats.decoder_seconds += cross_seconds
            decode = self._decode_and_align(audio, enc, prompt, offset, seconds, previous)
        decode.cross_seconds = cross_seconds
        return decode

    def _decode_and_align(self, audio: np.ndarray, enc: torch.Tensor, prompt: list[int], offset: float, seconds: float,
                          previous: list[int]) -> LiveDecode:
        eng = self.engine
        self.drafter.set_source(previous)
        max_len = self.decoder.max_len = min(eng.runtime.max_len, len(prompt) + token_cap(seconds))
        out = self.decoder.decode(enc, prompt)
        seq = out.sequences[0]
        self.stats.merge(out.stats)
        segments = tokens_to_segments(seq.tokens, eng.special, eng.bundle.tokenizer, offset, seconds,
                                      drop_unfinished=seq.hit_max_length)
        text = "".join(s.text for s in segments)
        if seq.hit_max_length or repetitive(text, LOOP_COMPRESSION_RATIO):
            return LiveDecode(offset, seconds, prompt, list(seq.tokens), enc, out.stats, [], max_len, looped=True)
        stock = is_stock_phrase(text)
        silent = self.silence.is_silence
        if silent(seq, stock=stock) or (silent(seq, False, stock) and not eng.vad.speech_spans(audio, threshold=self.vad_threshold)):
            segments = []  # offline's rule: the VAD hears none and Whisper says no speech (silence read "you"), or a stock phrase
        t = time.perf_counter()
        eng.aligner.align(enc, [segments], [offset], [seconds], self.language, self.task)
        self.stats.alignment_seconds += time.perf_counter() - t
        return LiveDecode(offset, seconds, prompt, list(seq.tokens), enc, out.stats, segments, max_len)
