"""A noise floor under built audio (tests/test_hallucination.py and bench/noise.py): the files built
from the public clips pause in digital silence, where real recordings have a room, a hiss or a hum.
Pink noise (power falling as 1/f) is the usual stand-in for such a floor."""

from __future__ import annotations

import numpy as np

SPEECH_FLOOR_DBFS = -80.0  # samples above this are counted in the speech's level


def pink_noise(n: int, seed: int = 0) -> np.ndarray:
    """``n`` samples of pink noise at unit RMS, a function of ``seed``."""
    spectrum = np.fft.rfft(np.random.default_rng(seed).standard_normal(n))
    k = np.arange(len(spectrum), dtype=np.float64)
    k[0] = 1.0
    noise = np.fft.irfft(spectrum / np.sqrt(k), n)
    return (noise / np.sqrt(np.mean(noise**2))).astype(np.float32)


def speech_level(audio: np.ndarray) -> float:
    """The RMS of the samples above ``SPEECH_FLOOR_DBFS`` (the pauses of a built file are digital silence)."""
    loud = audio[np.abs(audio) > 10 ** (SPEECH_FLOOR_DBFS / 20)]
    return float(np.sqrt(np.mean(loud.astype(np.float64) ** 2))) if len(loud) else 0.0


def with_noise(audio: np.ndarray, snr_db: float, seed: int = 0) -> np.ndarray:
    """``audio`` with pink noise ``snr_db`` below its ``speech_level``."""
    level = speech_level(audio)
    return (audio + pink_noise(len(audio), seed) * np.float32(level * 10 ** (-snr_db / 20))).astype(np.float32)
