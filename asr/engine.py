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
    ):
        self.bundle = bundle or load_whisper(model, cache_dir=cache_dir, device=device)
        self.device = device
        self.special = SpecialTokens.from_tokenizer(self.bundle.tokenizer, self.bundle.generation_config)
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
        self.aligner = WordAligner(self.runtime, self.special, self.bundle.tokenizer, gc.alignment_heads)
        self.decoder: Decoder = (decoder_factory or plain_decoder)(self)

    @property
    def model_name(self) -> str:
        return self.bundle.name

    def features(self, audio: np.ndarray, chunks: list[Chunk]) -> torch.Tensor:
        pieces = [audio[c.start : c.end] for c in chunks]
        fe = self.bundle.feature_extractor
        feats = fe(pieces, sampling_rate=SAMPLE_RATE, return_tensors="pt").input_features
        return feats.to(self.device, dtype=self.bundle.model.dtype)

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
        t0 = time.perf_counter()
        spans = self.vad.speech_spans(audio, opts.max_chunk_s, progress=lambda f: report("vad", f))
        chunks = merge_spans(spans, opts.max_chunk_s)
        vad_seconds = time.perf_counter() - t0
        stats = DecodeStats()
        if not chunks:
            return AsrResult([], opts.language, None, stats, [], vad_seconds)

        language, lang_prob = opts.language, None
        prompt: list[int] | None = None
        segments: list[Segment] = []
        report("transcribe", 0.0)
        for i in range(0, len(chunks), opts.batch_size):
            batch = chunks[i : i + opts.batch_size]
            t = time.perf_counter()
            feats = self.features(audio, batch)
            enc = self.runtime.encode(feats)
            stats.encoder_seconds += time.perf_counter() - t
            if language is None:  # detected once per file, on its first chunk
                language, lang_prob = detect_language(self.runtime, self.special, enc)
            if prompt is None:
                prompt = self.special.prompt(language, opts.task, timestamps=True)
            out = decoder.decode(enc, prompt, features=feats)
            stats.merge(out.stats)
            per_chunk = [
                []
                if seq.no_speech_prob > NO_SPEECH_THRESHOLD and seq.avg_logprob < LOGPROB_THRESHOLD
                else tokens_to_segments(seq.tokens, self.special, self.bundle.tokenizer, chunk.start_s, chunk.duration_s)
                for chunk, seq in zip(batch, out.sequences)
            ]
            if opts.word_timestamps:
                t = time.perf_counter()
                offsets = [c.start_s for c in batch]
                self.aligner.align(enc, per_chunk, offsets, [c.duration_s for c in batch], language, opts.task)
                stats.alignment_seconds += time.perf_counter() - t
            segments.extend(s for segs in per_chunk for s in segs)
            report("transcribe", min(1.0, (i + len(batch)) / len(chunks)))
        return AsrResult(segments, language, lang_prob, stats, chunks, vad_seconds)


def plain_decoder(engine: AsrEngine) -> Decoder:
    return GreedyDecoder(engine.runtime, engine.special, engine.rules)
