"""Audio loading: any container/codec in, 16 kHz mono float32 out."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

SAMPLE_RATE = 16000
DEFAULT_MAX_SECONDS = 12 * 3600  # refuse to load more than this unless told otherwise
MIN_SOURCE_RATE = 1000


class AudioError(ValueError):
    """The input cannot be used as audio. The message is one line, meant for users."""


def _to_mono_16k(audio: np.ndarray, rate: int, name: str) -> np.ndarray:
    if rate < MIN_SOURCE_RATE:
        raise AudioError(f"{name}: sample rate {rate} Hz is too low to hold speech")
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if rate != SAMPLE_RATE and audio.size:
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return audio


def _check(audio: np.ndarray, name: str) -> np.ndarray:
    if audio.size == 0:
        raise AudioError(f"{name}: the audio is empty (0 samples)")
    if not np.isfinite(audio).all():
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    return audio


def _ffmpeg_decode(path: str, name: str, max_seconds: float) -> np.ndarray:
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioError(f"{name}: not a format soundfile reads, and ffmpeg is not installed to decode it")
    cmd = [ffmpeg, "-nostdin", "-v", "error", "-i", path, "-t", str(max_seconds + 1), "-vn", "-f", "f32le",
           "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
    proc = subprocess.run(cmd, capture_output=True)
    if proc.returncode != 0:
        detail = proc.stderr.decode(errors="replace").strip().splitlines()
        reason = detail[-1] if detail else "unknown error"
        raise AudioError(f"{name}: not a readable audio file ({reason})")
    return np.frombuffer(proc.stdout, dtype=np.float32).copy()


def load_audio(path: str | os.PathLike, max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
    """Decode ``path`` to 16 kHz mono float32.

    soundfile handles wav/flac/ogg/mp3 in-process; everything else (m4a, video
    containers, odd codecs) goes through ffmpeg.
    """
    name = str(path)
    p = Path(path)
    if not p.exists():
        raise AudioError(f"{name}: file not found")
    if p.is_dir():
        raise AudioError(f"{name}: is a directory, not an audio file")
    if p.stat().st_size == 0:
        raise AudioError(f"{name}: the file is empty (0 bytes)")
    try:
        info = sf.info(name)
    except (sf.LibsndfileError, RuntimeError, TypeError):
        info = None
    if info is not None:
        if info.frames == 0:
            raise AudioError(f"{name}: the audio is empty (0 samples)")
        if info.duration > max_seconds:
            raise AudioError(f"{name}: {info.duration:.0f} s of audio is over the limit of {max_seconds:.0f} s")
        try:
            data, rate = sf.read(name, dtype="float32", always_2d=True)
        except (sf.LibsndfileError, RuntimeError) as exc:
            raise AudioError(f"{name}: corrupt audio ({str(exc).splitlines()[0]})") from exc
        audio = _to_mono_16k(data, rate, name)
    else:
        audio = _ffmpeg_decode(name, name, max_seconds)
    if audio.size > max_seconds * SAMPLE_RATE:
        raise AudioError(f"{name}: audio is over the limit of {max_seconds:.0f} s")
    return _check(audio, name)


def load_audio_bytes(data: bytes, name: str = "upload", max_seconds: float = DEFAULT_MAX_SECONDS) -> np.ndarray:
    """Decode audio held in memory (uploads, endpoint requests)."""
    if not data:
        raise AudioError(f"{name}: the upload is empty (0 bytes)")
    with tempfile.NamedTemporaryFile(suffix=".audio") as tmp:
        tmp.write(data)
        tmp.flush()
        return load_audio(tmp.name, max_seconds=max_seconds)


def from_array(audio: np.ndarray, rate: int, name: str = "array") -> np.ndarray:
    """Downmix/resample an in-memory array (e.g. a microphone recording)."""
    audio = np.asarray(audio)
    if np.issubdtype(audio.dtype, np.integer):
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max)
    return _check(_to_mono_16k(audio, rate, name), name)
