"""Audio loading: any container/codec in, 16 kHz mono float32 out."""

from __future__ import annotations

import io
import logging
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import soundfile as sf
import soxr

from specwhisper.audio.probe import header_seconds, probe_duration, soundfile_info, wav_header_seconds
from specwhisper.messages import one_line, printable

log = logging.getLogger(__name__)

SAMPLE_RATE = 16000
DEFAULT_MAX_SECONDS = 12 * 3600  # refuse to load more than this unless told otherwise
MIN_SOURCE_RATE = 1000
READ_BLOCK_FRAMES = 1152 * 256  # whole mp3 frames: libsndfile gives the samples of a single whole-file read
MAX_CHANNELS = 64  # an in-memory array with more rows or columns than this is not channels (``_samples_first``)
UNKNOWN_LENGTH_S = 600  # first buffer for a file that does not say how long it is


class AudioError(ValueError):
    """The input cannot be used as audio. The message is one line, meant for users."""


class AudioTooLong(AudioError):
    """The input holds (or claims) more audio than the limit it was read under."""


def _check_rate(rate: int, name: str) -> None:
    if rate < MIN_SOURCE_RATE:
        raise AudioError(f"{name}: sample rate {rate} Hz is too low to hold speech")


def _to_mono_16k(audio: np.ndarray, rate: int, name: str) -> np.ndarray:
    _check_rate(rate, name)
    if audio.ndim == 2:
        audio = audio.mean(axis=1)
    audio = np.ascontiguousarray(audio, dtype=np.float32)
    if rate != SAMPLE_RATE and audio.size:
        audio = soxr.resample(audio, rate, SAMPLE_RATE, quality="HQ").astype(np.float32)
    return audio


def _check(audio: np.ndarray, name: str) -> np.ndarray:
    if audio.size == 0:
        raise AudioError(f"{name}: the audio is empty (0 samples)")
    step = 1 << 20  # a block at a time: no temporary the size of the audio
    if not all(np.isfinite(audio[i : i + step]).all() for i in range(0, audio.size, step)):
        raise AudioError(f"{name}: the audio holds NaN or infinite samples")
    return audio


def over_limit(name: str, max_seconds: float, seconds: float | None = None) -> AudioTooLong:
    """The error for audio past ``max_seconds`` (``seconds``: what the file claims, when known)."""
    claim = f"{seconds:.0f} s of audio is" if seconds is not None else "the audio is"
    return AudioTooLong(f"{name}: {claim} over the limit of {max_seconds:.0f} s")


class _Samples:
    """16 kHz output, written in place into one buffer sized by the file's claimed length and grown
    (once, to the limit) when the file holds more; never more than ``limit`` + 1 samples."""

    def __init__(self, claimed_s: float | None, max_seconds: float):
        self.limit = int(max_seconds * SAMPLE_RATE)
        expected = int((claimed_s if claimed_s is not None else UNKNOWN_LENGTH_S) * SAMPLE_RATE) + SAMPLE_RATE
        self.buf = np.empty(min(self.limit + 1, max(expected, 1)), dtype=np.float32)
        self.n = 0

    @property
    def over(self) -> bool:
        return self.n > self.limit

    def free(self) -> np.ndarray:
        """The unwritten rest of the buffer (empty once past the limit)."""
        if self.n == self.buf.size and self.buf.size <= self.limit:
            grown = np.empty(self.limit + 1, dtype=np.float32)  # untouched pages cost no memory
            grown[: self.n] = self.buf[: self.n]
            self.buf = grown
        return self.buf[self.n :]

    def add(self, block: np.ndarray) -> None:
        while block.size and not self.over:
            room = self.free()
            take = min(room.size, block.size)
            room[:take] = block[:take]
            self.n += take
            block = block[take:]

    def audio(self) -> np.ndarray:
        return self.buf[: self.n]


def _ffmpeg_reason(stderr, path: str) -> str:
    """ffmpeg's last line, without the path it names (the message names the input)."""
    stderr.seek(0, os.SEEK_END)
    stderr.seek(max(0, stderr.tell() - 4096))
    detail = stderr.read().decode(errors="replace").strip().splitlines()
    return detail[-1].removeprefix(f"{path}: ") if detail else "unknown error"


def _ffmpeg_decode(path: str, name: str, max_seconds: float, claimed_s: float | None) -> np.ndarray:
    """Decode through ffmpeg into the buffer as it streams out; stop (and kill ffmpeg) one sample
    past the limit, whatever the container claimed."""
    cmd = [_ffmpeg(name), "-nostdin", "-v", "error", "-i", path, "-t", str(max_seconds + 1), "-vn", "-f", "f32le",
           "-ac", "1", "-ar", str(SAMPLE_RATE), "-"]
    out = _Samples(claimed_s, max_seconds)
    with tempfile.TemporaryFile() as stderr:  # a file, not a pipe: a chatty ffmpeg never blocks
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=stderr)
        try:
            nbytes = 0  # ffmpeg's writes need not end on a whole sample
            while out.free().size:
                with memoryview(out.buf).cast("B") as raw:
                    got = proc.stdout.readinto(raw[nbytes:])
                if not got:
                    break
                nbytes += got
                out.n = nbytes // 4
        finally:
            if out.over:
                proc.kill()
            proc.stdout.close()
            code = proc.wait()
        if out.over:
            raise over_limit(name, max_seconds)
        if code != 0:
            raise _ffmpeg_failure(stderr, path, name)
    return out.audio()


def _ffmpeg(name: str) -> str:
    """ffmpeg's path, or the AudioError of a file only it could decode."""
    ffmpeg = shutil.which("ffmpeg")
    if ffmpeg is None:
        raise AudioError(f"{name}: not a format soundfile reads, and ffmpeg is not installed to decode it")
    return ffmpeg


def _ffmpeg_failure(stderr, path: str, name: str) -> AudioError:
    """The one-line error of an ffmpeg decode that failed (``stderr``: its stderr file)."""
    reason = _ffmpeg_reason(stderr, path)
    if "does not contain any stream" in reason:  # "-vn" left nothing: a video without sound, or subtitles
        return AudioError(f"{name}: the file has no audio stream")
    return AudioError(f"{name}: not a readable audio file ({reason})")


def _soundfile_decode(path: str, name: str, info, max_seconds: float, claimed_s: float | None) -> np.ndarray:
    """Read block by block, downmix and resample as a stream into the buffer (the same samples as
    reading the whole file at once: blocks are whole mp3 frames, and soxr streams exactly)."""
    _check_rate(info.samplerate, name)
    out = _Samples(claimed_s, max_seconds)
    stream = None if info.samplerate == SAMPLE_RATE else soxr.ResampleStream(
        info.samplerate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
    try:
        with sf.SoundFile(path) as f:
            while not out.over:
                block = f.read(READ_BLOCK_FRAMES, dtype="float32", always_2d=True)
                mono = np.ascontiguousarray(block.mean(axis=1), dtype=np.float32)
                last = len(block) < READ_BLOCK_FRAMES
                out.add(stream.resample_chunk(mono, last=last) if stream is not None else mono)
                if last:
                    break
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise _Corrupt(f"{name}: corrupt audio ({one_line(exc)})") from exc
    if out.over:
        raise over_limit(name, max_seconds)
    return out.audio()


def check_length(path: str | os.PathLike, max_seconds: float, name: str | None = None) -> float | None:
    """Refuse, without decoding it, a file that is missing or empty or whose header or container claims
    more than ``max_seconds`` of audio (errors name it ``name``); the seconds it claims, None when it does
    not say. What it holds is checked while decoding."""
    name = name or printable(str(path))
    _check_file(Path(path), name)
    claimed = probe_duration(path)
    if claimed is not None and claimed > max_seconds:
        raise over_limit(name, max_seconds, claimed)
    return claimed


def load_audio(path: str | os.PathLike, max_seconds: float = DEFAULT_MAX_SECONDS, name: str | None = None,
               channels: bool = False) -> np.ndarray:
    """Decode ``path`` to 16 kHz mono float32, in memory bounded by ``max_seconds`` (errors name it ``name``);
    ``channels``: one row per channel instead (``channels x samples``, a mono file one row; more than
    ``MAX_SPLIT_CHANNELS`` is an AudioError).

    A file whose header or container claims more than ``max_seconds`` is refused before any of it
    is decoded; one that claims less and holds more is refused one sample past the limit. soundfile
    handles wav/flac/ogg/mp3 in-process; everything else (m4a, video containers, odd codecs) goes
    through ffmpeg.
    """
    path = str(path)
    name = name or printable(path)
    _check_file(Path(path), name)
    info = soundfile_info(path)
    if info is not None:
        if info.frames == 0:
            raise AudioError(f"{name}: the audio is empty (0 samples)")
        claimed = header_seconds(path, info)
        if claimed is not None and claimed > max_seconds:
            raise over_limit(name, max_seconds, claimed)
        try:
            audio = (_soundfile_channels(path, name, info, max_seconds) if channels else
                     _soundfile_decode(path, name, info, max_seconds, claimed))
        except _Corrupt as exc:
            audio = _recovered(path, name, max_seconds, claimed, channels, exc)
        # a WAV's own header: libsndfile's length of a cut-off WAV is what is there
        said = wav_header_seconds(path) if info.format.startswith("WAV") else claimed
        held = audio.shape[-1] / SAMPLE_RATE
        if said is not None and said - held > max(1.0, 0.02 * said):
            log.warning(f"{name}: its header says {said:.1f} s of audio, the file holds {held:.1f} s (cut short?): "
                        "transcribing what is there")
    else:
        claimed = probe_duration(path)
        if claimed is not None and claimed > max_seconds:
            raise over_limit(name, max_seconds, claimed)
        audio = (_ffmpeg_channels if channels else _ffmpeg_decode)(path, name, max_seconds, claimed)
    return _check(audio, name)


def _ffmpeg_channels(path: str, name: str, max_seconds: float, claimed_s: float | None) -> np.ndarray:
    """``_ffmpeg_decode`` keeping the channels apart: through a temporary 16 kHz wav, read as soundfile's."""
    ffmpeg = _ffmpeg(name)
    with tempfile.TemporaryDirectory(prefix="specwhisper-channels.") as folder:
        wav = os.path.join(folder, "channels.wav")
        cmd = [ffmpeg, "-nostdin", "-v", "error", "-i", path, "-t", str(max_seconds + 1), "-vn", "-c:a", "pcm_f32le",
               "-ar", str(SAMPLE_RATE), "-rf64", "auto", "-f", "wav", wav]
        with tempfile.TemporaryFile() as stderr:
            if subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=stderr).returncode != 0:
                raise _ffmpeg_failure(stderr, path, name)
        info = soundfile_info(wav)
        if info is None or info.frames == 0:
            raise AudioError(f"{name}: the audio is empty (0 samples)")
        return _soundfile_channels(wav, name, info, max_seconds)


MAX_SPLIT_CHANNELS = 8  # load_audio(channels=True): a call or an interview has 2; 5.1 film sound is not speakers


class _Corrupt(AudioError):
    """libsndfile stopped at a frame it could not decode."""


def _recovered(path: str, name: str, max_seconds: float, claimed_s: float | None, channels: bool, exc: _Corrupt) -> np.ndarray:
    """What ffmpeg decodes of a file libsndfile stopped on: the frames before the damage (a FLAC download cut
    a third of the way lost sync in libsndfile's first block of 18 s, all of it; ffmpeg kept its 3.4 s), or
    ``exc`` when that is nothing."""
    try:
        audio = (_ffmpeg_channels if channels else _ffmpeg_decode)(path, name, max_seconds, claimed_s)
    except AudioTooLong:
        raise
    except AudioError:
        raise exc from None
    if audio.shape[-1] == 0:
        raise exc
    return audio


def _check_channels(count: int, name: str) -> None:
    if count > MAX_SPLIT_CHANNELS:
        raise AudioError(f"{name}: {count} channels; each is transcribed on its own up to {MAX_SPLIT_CHANNELS}")


def _soundfile_channels(path: str, name: str, info, max_seconds: float) -> np.ndarray:
    """``_soundfile_decode`` keeping the channels apart: block by block, each resampled as a stream."""
    _check_rate(info.samplerate, name)
    _check_channels(info.channels, name)
    limit = int(max_seconds * SAMPLE_RATE)
    stream = None if info.samplerate == SAMPLE_RATE else soxr.ResampleStream(
        info.samplerate, SAMPLE_RATE, info.channels, dtype="float32", quality="HQ")
    blocks, n = [], 0
    try:
        with sf.SoundFile(path) as f:
            while n <= limit:
                block = f.read(READ_BLOCK_FRAMES, dtype="float32", always_2d=True)
                last = len(block) < READ_BLOCK_FRAMES
                out = stream.resample_chunk(block, last=last) if stream is not None else block
                blocks.append(out)
                n += len(out)
                if last:
                    break
    except (sf.LibsndfileError, RuntimeError) as exc:
        raise _Corrupt(f"{name}: corrupt audio ({one_line(exc)})") from exc
    if n > limit:
        raise over_limit(name, max_seconds)
    return np.ascontiguousarray(np.concatenate(blocks).T, dtype=np.float32)


def _check_file(p: Path, name: str) -> None:
    """A regular file with something in it, or a one-line AudioError saying what it is instead."""
    if not p.exists():
        raise AudioError(f"{name}: file not found" if not p.is_symlink() else f"{name}: a link to nothing (or a loop of links)")
    if p.is_dir():
        raise AudioError(f"{name}: is a directory, not an audio file")
    if not p.is_file():
        raise AudioError(f"{name}: not a regular file (a device, pipe or socket), not an audio file")
    if p.stat().st_size == 0:
        raise AudioError(f"{name}: the file is empty (0 bytes)")


def load_audio_bytes(data: bytes, name: str = "upload", max_seconds: float = DEFAULT_MAX_SECONDS,
                     channels: bool = False) -> np.ndarray:
    """Decode audio held in memory (uploads, endpoint requests)."""
    return load_audio_stream(io.BytesIO(data), name, max_seconds, channels)


def load_audio_stream(stream: BinaryIO, name: str = "file object", max_seconds: float = DEFAULT_MAX_SECONDS,
                      channels: bool = False) -> np.ndarray:
    """Decode the audio file a binary file object reads (``open(path, "rb")``, ``io.BytesIO``, an upload's
    stream, as faster-whisper takes them), from where it stands to its end; ffmpeg and soundfile read a
    file, so it is copied to a temporary one piece by piece."""
    with tempfile.NamedTemporaryFile(suffix=".audio") as tmp:
        first = stream.read(1 << 20)
        if isinstance(first, str):
            raise AudioError(f"{name}: the file is open as text; open it as binary (mode 'rb')")
        if not first:
            raise AudioError(f"{name}: empty (0 bytes)")
        tmp.write(first)
        shutil.copyfileobj(stream, tmp)
        tmp.flush()
        return load_audio(tmp.name, max_seconds=max_seconds, name=name, channels=channels)


def _samples_first(audio: np.ndarray, name: str) -> np.ndarray:
    """An in-memory array as samples, or samples by channels (soundfile's layout): channels by samples
    (torchaudio's and librosa's ``mono=False``, up to ``MAX_CHANNELS`` rows) is transposed (a view)."""
    audio = np.asarray(audio)
    if audio.ndim == 2 and audio.shape[0] <= MAX_CHANNELS < audio.shape[1]:
        return audio.T
    if audio.ndim not in (1, 2) or (audio.ndim == 2 and audio.shape[1] > MAX_CHANNELS):
        raise AudioError(f"{name}: expected (samples,), (samples, channels) or (channels, samples), got shape {audio.shape}")
    return audio


def at_rate(audio: np.ndarray, rate: int) -> np.ndarray:
    """16 kHz samples (one row, or a row per channel) resampled to ``rate`` Hz: the peers' ``load_audio(file, sr)``."""
    if rate == SAMPLE_RATE:
        return audio
    if not isinstance(rate, int) or rate <= 0:
        raise ValueError(f"sample rate: a positive number of Hz, got {rate!r}")
    return np.ascontiguousarray(soxr.resample(audio.T, SAMPLE_RATE, rate, quality="HQ").T, dtype=np.float32)


@dataclass(frozen=True)
class InMemoryAudio:
    """Samples already decoded (a client's array: transformers' ``{"raw", "sampling_rate"}``) at ``rate``
    Hz, in ``from_array``'s layouts; read by ``from_array`` where a file would be decoded."""
    samples: np.ndarray
    rate: int

    @property
    def nbytes(self) -> int:
        return self.samples.nbytes


def from_array(audio: np.ndarray, rate: int, name: str = "array", max_seconds: float = DEFAULT_MAX_SECONDS,
               channels: bool = False) -> np.ndarray:
    """Downmix/resample an in-memory array (e.g. a microphone recording; layouts: ``_samples_first``),
    refused when longer than ``max_seconds``; ``channels``: resampled, one row per channel (``load_audio``'s ``channels``)."""
    audio = _samples_first(audio, name)
    _check_rate(rate, name)
    if len(audio) / rate > max_seconds:
        raise over_limit(name, max_seconds, len(audio) / rate)
    if np.issubdtype(audio.dtype, np.integer):
        wide = np.iinfo(audio.dtype).bits > 16 and audio.size
        if wide and 0 < (peak := int(np.abs(audio).max())) <= np.iinfo(np.int16).max + 1:  # np.array(list) is int64
            raise AudioError(f"{name}: {audio.dtype} samples whose largest is {peak}, 16-bit audio in a wider type, "
                             f"would be read as near silence: pass it as int16, or as floats in [-1, 1]")
        audio = audio.astype(np.float32) / float(np.iinfo(audio.dtype).max)
    if channels:
        rows = audio.reshape(len(audio), -1).T
        _check_channels(len(rows), name)
        return _check(np.stack([_to_mono_16k(row, rate, name) for row in rows]), name)
    return _check(_to_mono_16k(audio, rate, name), name)
