"""Audio on which Whisper invents text: a clip of real speech, a long stretch of music-like tones, and
another clip (tests/test_hallucination.py and bench/hallucination.py). Over such a stretch Whisper
base writes what closes the videos it was trained on ("Thanks for watching!", "Don't forget to
subscribe to my channel!") or repeats the speech before it."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import EvalItem

BEAT_S = 0.6  # a note every 0.6 s (100 a minute)
MAJOR_SCALE = (0, 2, 4, 5, 7, 9, 11, 12)  # semitones above A3


def tones(seconds: float, db: float, seed: int = 0) -> np.ndarray:
    """Music-like: a random melody of decaying notes (a sine and two harmonics, on a major scale from
    A3) over a 110 Hz drone, peaking at ``db`` dBFS."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    out = 0.3 * np.sin(2 * np.pi * 110 * t)
    for k in range(int(np.ceil(seconds / BEAT_S))):
        f = 220 * 2 ** (MAJOR_SCALE[rng.integers(len(MAJOR_SCALE))] / 12)
        a, b = int(k * BEAT_S * SAMPLE_RATE), min(n, int((k + 1) * BEAT_S * SAMPLE_RATE))
        tt = t[a:b] - k * BEAT_S
        out[a:b] += np.exp(-3 * tt) * (np.sin(2 * np.pi * f * tt) + 0.5 * np.sin(4 * np.pi * f * tt) + 0.25 * np.sin(6 * np.pi * f * tt))
    return (out / np.abs(out).max() * 10 ** (db / 20)).astype(np.float32)


@dataclass(frozen=True)
class MusicGap:
    """Speech, tones, speech: the samples, the two clips' references, and where the tones are (s)."""

    audio: np.ndarray
    reference: str
    gap: tuple[float, float]

    def inside(self, starts: list[float], margin: float = 0.5) -> int:
        """How many of these word starts fall over the tones (``margin`` inside them)."""
        return sum(1 for s in starts if self.gap[0] + margin < float(s) < self.gap[1] - margin)


def music_gap(first: EvalItem, seconds: float, second: EvalItem, db: float = -30.0, seed: int = 0) -> MusicGap:
    a, b = load_audio(first.path), load_audio(second.path)
    start = len(a) / SAMPLE_RATE
    return MusicGap(np.concatenate([a, tones(seconds, db, seed), b]), f"{first.reference} {second.reference}",
                    (start, start + seconds))
