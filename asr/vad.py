"""Voice activity detection (silero-vad) and cutting long audio into <=30 s chunks at pauses."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

# Importing silero_vad calls torch.set_num_threads(1) for the whole process; keep the caller's setting.
_threads = torch.get_num_threads()
from silero_vad import get_speech_timestamps, load_silero_vad  # noqa: E402

torch.set_num_threads(_threads)
del _threads

from asr.audio import SAMPLE_RATE

WHISPER_WINDOW_S = 30.0


@dataclass(frozen=True)
class Chunk:
    """A window of the input, in samples, that Whisper decodes in one go."""

    start: int
    end: int

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def duration_s(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE


class VoiceActivityDetector:
    """Finds speech with silero-vad (weights shipped in its PyPI package)."""

    def __init__(self, threshold: float = 0.5, min_silence_ms: int = 300, speech_pad_ms: int = 200):
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"VAD threshold must be between 0 and 1, got {threshold}")
        self.model = load_silero_vad(onnx=False)
        self.threshold = threshold
        self.min_silence_ms = min_silence_ms
        self.speech_pad_ms = speech_pad_ms

    def speech_spans(
        self, audio: np.ndarray, max_span_s: float = WHISPER_WINDOW_S, progress: Callable[[float], None] | None = None
    ) -> list[tuple[int, int]]:
        """Speech regions as (start, end) sample indices; none longer than ``max_span_s``.

        silero splits an over-long region at its longest inner pause (or, lacking
        one, at the limit), so every span fits one Whisper window.
        """
        pad = self.speech_pad_ms / 1000
        spans = get_speech_timestamps(
            torch.from_numpy(audio),
            self.model,
            threshold=self.threshold,
            sampling_rate=SAMPLE_RATE,
            min_silence_duration_ms=self.min_silence_ms,
            speech_pad_ms=self.speech_pad_ms,
            max_speech_duration_s=max_span_s - 2 * pad - 0.1,
            progress_tracking_callback=(lambda pct: progress(pct / 100)) if progress else None,
        )
        return [(int(s["start"]), int(s["end"])) for s in spans]


def merge_spans(spans: list[tuple[int, int]], max_chunk_s: float = WHISPER_WINDOW_S) -> list[Chunk]:
    """Group consecutive speech spans into chunks no longer than ``max_chunk_s``.

    Chunks only ever end at a span's end and start at a span's start, so every
    cut falls in a pause the VAD found (or inside a span silero already split):
    no word is decoded twice or lost between chunks.
    """
    limit = int(max_chunk_s * SAMPLE_RATE)
    chunks: list[Chunk] = []
    for start, end in spans:
        if chunks and end - chunks[-1].start <= limit:
            chunks[-1] = Chunk(chunks[-1].start, end)
        else:
            chunks.append(Chunk(start, min(end, start + limit)))
    return chunks
