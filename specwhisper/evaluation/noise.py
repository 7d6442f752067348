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


def room_response(rt60_s: float, sample_rate: int = 16000, seed: int = 0) -> np.ndarray:
    """A room's impulse response, the usual synthetic one: the direct sound, then from 5 ms on a tail of
    white noise decaying by 60 dB in ``rt60_s`` seconds, its energy that of the direct sound (a talker a
    metre or two from the microphone in a meeting room), a function of ``seed``."""
    n = int(rt60_s * sample_rate)
    t = np.arange(n) / sample_rate
    tail = np.random.default_rng(seed).standard_normal(n) * 10 ** (-3 * t / rt60_s)
    tail[: int(0.005 * sample_rate)] = 0.0
    tail /= np.sqrt(np.sum(tail**2))
    tail[0] = 1.0
    return tail.astype(np.float32)


def in_room(audio: np.ndarray, rt60_s: float, sample_rate: int = 16000, seed: int = 0) -> np.ndarray:
    """``audio`` as a microphone in a room hears it (``room_response``), at its own ``speech_level``."""
    from scipy.signal import fftconvolve

    wet = fftconvolve(audio.astype(np.float64), room_response(rt60_s, sample_rate, seed))[: len(audio)]
    level = speech_level(audio)
    return (wet * (level / max(speech_level(wet.astype(np.float32)), 1e-12))).astype(np.float32)
