"""How long an audio file says it is, without decoding it (container metadata).

A duration from here is a claim: a hostile or broken file can understate it (an ADTS stream whose
first frames have a higher bitrate than the rest, say), so decoders must still stop at the limit
(``specwhisper.audio.loading``). It lets an honest long file be refused at once, before any of it is decoded.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
from pathlib import Path

import soundfile as sf

PROBE_TIMEOUT_S = 30.0
SF_COUNT_MAX = 2**63 - 1  # libsndfile's frame count of a file whose header leaves the length out


def soundfile_info(path: str | Path) -> sf._SoundFileInfo | None:
    """libsndfile's header facts (wav, flac, ogg, mp3), or None when it cannot read the file, or cannot
    tell its length: a FLAC written to a pipe has none in its header, libsndfile says 2**63 - 1 frames and
    fails to seek in it (ffmpeg reads it)."""
    try:
        info = sf.info(str(path))
    except (sf.LibsndfileError, RuntimeError, TypeError):
        return None
    return None if info.frames >= SF_COUNT_MAX else info


def _ffprobe_duration(path: str | Path) -> float | None:
    ffprobe = shutil.which("ffprobe")
    if ffprobe is None:
        return None
    cmd = [ffprobe, "-v", "error", "-show_entries", "format=duration:stream=duration,codec_type", "-of", "json", str(path)]
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=PROBE_TIMEOUT_S)
        facts = json.loads(proc.stdout or b"{}")
    except (subprocess.TimeoutExpired, OSError, ValueError):
        return None
    claims = [facts.get("format", {}).get("duration")]
    claims += [s.get("duration") for s in facts.get("streams", []) if s.get("codec_type") == "audio"]
    seconds = []
    for claim in claims:
        try:
            value = float(claim)
        except (TypeError, ValueError):
            continue
        if math.isfinite(value) and value >= 0:
            seconds.append(value)
    return max(seconds) if seconds else None


def header_seconds(path: str | Path, info: sf._SoundFileInfo) -> float | None:
    """The seconds libsndfile read in ``path``'s header (``info``), or None where its length is an estimate:
    an MP3 without a frame count (``mp3_counts_frames``) is timed from its first frame's bitrate and its size,
    96.7 s for an 11 s VBR file whose first frames are quiet."""
    if info.samplerate <= 0 or (info.format == "MP3" and not mp3_counts_frames(path)):
        return None
    return info.frames / info.samplerate


def probe_duration(path: str | Path) -> float | None:
    """Seconds of audio the file claims (libsndfile's header, else ffprobe's container metadata);
    None when neither can tell (then only a decode that stops at the limit knows)."""
    info = soundfile_info(path)
    if info is not None and (seconds := header_seconds(path, info)) is not None:
        return seconds
    return _ffprobe_duration(path)


def wav_header_seconds(path: str | Path) -> float | None:
    """The seconds a RIFF WAV's own header gives its data chunk (None: not a WAV, or a streamed one with no
    length). libsndfile and ffprobe both clamp a cut-off file's length to what is there, so only the
    header tells that a download or a copy stopped short."""
    try:
        with open(path, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    if head[:4] != b"RIFF" or head[8:12] != b"WAVE":
        return None
    at, frame_bytes, rate = 12, 0, 0
    while at + 8 <= len(head):
        kind, size = head[at : at + 4], int.from_bytes(head[at + 4 : at + 8], "little")
        if kind == b"fmt " and at + 22 <= len(head):
            rate, frame_bytes = int.from_bytes(head[at + 12 : at + 16], "little"), int.from_bytes(head[at + 20 : at + 22], "little")
        if kind == b"data":
            return size / (rate * frame_bytes) if rate and frame_bytes and size not in (0, 0xFFFFFFFF) else None
        at += 8 + size + (size & 1)
    return None


def mp3_counts_frames(path: str | Path) -> bool:
    """Whether an MP3's first frame is a Xing, Info or VBRI header, which counts the stream's frames: libsndfile's
    length is then that count, not its estimate from the bitrate and the file's size, and a file decoding to
    less was cut short."""
    try:
        with open(path, "rb") as f:
            head = f.read(10)
            skip = 0
            if head[:3] == b"ID3" and len(head) == 10:  # ID3v2: a syncsafe size, then the frames
                skip = 10 + sum((b & 0x7F) << (7 * (3 - i)) for i, b in enumerate(head[6:10])) + (10 if head[5] & 0x10 else 0)
            f.seek(skip)
            frame = f.read(192)  # the tag sits 13 to 36 bytes past the frame's sync word
    except OSError:
        return False
    return frame[:1] == b"\xff" and any(tag in frame[:64] for tag in (b"Xing", b"Info", b"VBRI"))
