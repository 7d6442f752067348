"""``-`` for standard input and output: ``ffmpeg -i talk.mkv -f wav - | transcribe - -f srt -o - > talk.srt``.

The input ``-`` is the audio on standard input, in any format a file may hold (it is read to its end
into a temporary file, then decoded as a file is: soundfile or ffmpeg), named ``<stdin>`` in messages
and ``stdin`` in file names. ``-o -`` writes the one format asked for to standard output, in place of
the text the command prints; the summary line stays on standard error.

With ``--live`` the input ``-`` is listened to as it arrives (``StdinAudio``), a microphone's pipe:
``ffmpeg -f pulse -i default -ac 1 -ar 16000 -f s16le - | transcribe - --live``. It is raw 16 kHz mono
16-bit PCM, or a WAV stream (``-f wav``: its header says the rate, the channels and the sample format,
16-bit or float, which are downmixed and resampled as they come).
"""

from __future__ import annotations

import os
import queue
import shutil
import struct
import sys
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np

STDIO = "-"
STDIN_NAME = "<stdin>"
STDIN_STEM = "stdin"


def reads_stdin(args) -> bool:
    return STDIO in args.inputs


def writes_stdout(args) -> bool:
    return args.output_dir is not None and str(args.output_dir) == STDIO


def check_stdin(args) -> None:
    """What standard input goes with, as ValueErrors of one line: ``-`` is the only input, piped in, and the
    audio (not also the text of --align-text)."""
    if reads_stdin(args):
        if len(args.inputs) > 1:
            raise ValueError("- (the audio on standard input) must be the only input")
        if sys.stdin is None or sys.stdin.isatty():
            raise ValueError("- reads the audio from standard input, which is a terminal here: pipe the audio in "
                             "(ffmpeg -i talk.mkv -f wav - | transcribe -)")
        if args.align_text == STDIO:
            raise ValueError("standard input holds the audio (-) or the text of --align-text (-), not both")


def check_stdout(args, formats: list[str]) -> None:
    """What ``-o -`` goes with, as ValueErrors of one line: one file, one format, nothing else printed."""
    if writes_stdout(args):
        if len(args.inputs) > 1 or Path(args.inputs[0]).is_dir():
            raise ValueError("-o - writes one file's transcript to standard output: give one input")
        if args.live or args.verbose or getattr(args, "detect_language", False):
            flag = "--live" if args.live else "--verbose" if args.verbose else "--detect-language"
            raise ValueError(f"-o - writes the transcript to standard output, where {flag} prints too")
        if len(formats) != 1:
            raise ValueError(f"-o - writes one format to standard output, got {', '.join(formats)}: choose one with "
                             "-f (txt, srt, vtt, json, tsv, aud, textgrid)")


@contextmanager
def stdin_file() -> Iterator[Path]:
    """Standard input's bytes in a temporary file (named ``stdin``), removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="specwhisper-stdin.") as folder:
        path = Path(folder) / STDIN_STEM
        with open(path, "wb") as out:
            shutil.copyfileobj(sys.stdin.buffer, out, 1 << 20)
        yield path


def write_transcript(transcript, out_dir: Path | None, stem: str, formats: list[str], layout) -> list[str]:
    """``formats`` of ``transcript`` written under ``out_dir`` (``write_outputs``); ``out_dir`` None (``-o -``):
    its one format on standard output. What was written, in words for the summary line."""
    from specwhisper.pipeline.writers import render, write_outputs

    if out_dir is None:
        write_stdout(render(transcript, formats[0], layout))
        return [f"{formats[0]} to standard output"]
    return [p.name for p in write_outputs(transcript, out_dir, stem, formats, layout)]


def write_stdout(text: str) -> None:
    """A rendered transcript on standard output; a reader that went away (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # and none at exit, when Python flushes standard output again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


SAMPLE_RATE = 16000
READ_BYTES = 16000  # half a second of 16 kHz 16-bit audio per read at most
CONTAINERS = {b"ID3": "mp3", b"\xff\xfb": "mp3", b"\xff\xf3": "mp3", b"fLaC": "flac", b"OggS": "ogg",
              b"\x1aE\xdf\xa3": "webm/mkv"}  # what a pipe may hold that --live does not decode


class StreamFormatError(ValueError):
    """Standard input does not hold audio ``--live`` can listen to (one line)."""


class StdinAudio:
    """16 kHz mono float32 audio from a byte stream as it arrives (``take``), read by a thread of its own so
    that the pipe never fills while an update runs: raw 16 kHz mono s16le, or a WAV stream (its header's
    format). ``stop()`` (the first Ctrl-C) ends the stream where it is."""

    def __init__(self, stream=None, name: str = STDIN_NAME):
        self.stream = stream if stream is not None else sys.stdin.buffer
        self.name = name
        self.pieces: queue.Queue = queue.Queue()
        self.stopped = threading.Event()
        threading.Thread(target=self._read, name="stdin-audio", daemon=True).start()

    def stop(self) -> None:
        self.stopped.set()

    def take(self) -> np.ndarray | None:
        """All the audio that arrived since the last take, waiting for some; None once the stream ended (or
        was stopped); a StreamFormatError when its bytes are not audio --live reads."""
        got: list = []
        while not got:
            if self.stopped.is_set():
                return None
            try:
                got.append(self.pieces.get(timeout=0.1))
            except queue.Empty:
                continue
        while got[-1] is not None and not isinstance(got[-1], Exception):
            try:
                got.append(self.pieces.get_nowait())
            except queue.Empty:
                break
        if isinstance(got[-1], Exception):
            if len(got) == 1:
                raise got[-1]
            self.pieces.put(got.pop())  # the audio before the failure first; the failure at the next take
        if got[-1] is None:  # the end, after the pieces before it
            got.pop()
            self.stopped.set()
        return np.concatenate(got) if got else None

    def _read(self) -> None:
        try:
            decode, pending = self._open()
            while True:
                audio, pending = decode(pending)
                if audio.size:
                    self.pieces.put(audio)
                more = self._chunk()
                if not more or self.stopped.is_set():
                    break
                pending += more
            self.pieces.put(None)
        except Exception as exc:  # noqa: BLE001 - the reader's failure is the stream's, raised by take()
            self.pieces.put(exc if isinstance(exc, StreamFormatError) else StreamFormatError(f"{self.name}: {exc}"))

    def _chunk(self) -> bytes:
        return getattr(self.stream, "read1", self.stream.read)(READ_BYTES)

    def _more(self, data: bytes, n: int, what: str) -> bytes:
        """``data`` and the stream's next bytes, until it holds ``n`` (a StreamFormatError if it ends first)."""
        while len(data) < n:
            more = self._chunk()
            if not more:
                raise StreamFormatError(f"{self.name}: {what}")
            data += more
        return data

    def _open(self):
        """The decoder of the stream's audio, and the bytes of it read so far."""
        head = b""
        while len(head) < 12 and (more := self._chunk()):
            head += more
        if not head:
            raise StreamFormatError(f"{self.name}: the stream is empty (0 bytes)")
        for magic, kind in CONTAINERS.items():
            if head.startswith(magic) or head[4:8] == b"ftyp":
                raise StreamFormatError(f"{self.name}: --live listens to raw 16 kHz mono s16le or a WAV stream, and this "
                                        f"looks like {kind if head.startswith(magic) else 'mp4/m4a'}: decode it first "
                                        "(ffmpeg -i - -ac 1 -ar 16000 -f s16le -)")
        if head[:4] == b"RIFF" and head[8:12] == b"WAVE":
            fmt, rest = self._wav_format(head[12:])
            return pcm_decoder(*fmt), rest
        return pcm_decoder(np.dtype("<i2"), 1, SAMPLE_RATE), head

    def _wav_format(self, data: bytes) -> tuple[tuple[np.dtype, int, int], bytes]:
        """Walk a WAV stream's chunks up to ``data``: (sample type, channels, rate), and the audio bytes after."""
        fmt = None
        for _ in range(64):
            data = self._more(data, 8, "the WAV stream ends inside its header")
            kind, size = struct.unpack("<4sI", data[:8])
            data = data[8:]
            if kind == b"data":  # its size: a stream's is 0 or 0xFFFFFFFF, read to the end either way
                if fmt is None:
                    raise StreamFormatError(f"{self.name}: the WAV stream has no format chunk before its data")
                return fmt, data
            body = size + (size & 1)
            data = self._more(data, body, "the WAV stream ends inside its header")
            if kind == b"fmt ":
                tag, channels, rate, _, _, bits = struct.unpack("<HHIIHH", data[:16])
                if tag == 0xFFFE and size >= 26:  # WAVE_FORMAT_EXTENSIBLE: the sub-format's tag
                    tag = struct.unpack("<H", data[24:26])[0]
                sample = {(1, 16): np.dtype("<i2"), (3, 32): np.dtype("<f4")}.get((tag, bits))
                if sample is None or channels < 1 or rate < 1000:
                    raise StreamFormatError(f"{self.name}: a WAV stream of {bits}-bit samples (format {tag}), {channels} "
                                            f"channel(s) at {rate} Hz; --live takes 16-bit or 32-bit float PCM "
                                            "(ffmpeg ... -c:a pcm_s16le -f wav -)")
                fmt = (sample, channels, rate)
            data = data[body:]
        raise StreamFormatError(f"{self.name}: no data chunk in the WAV stream's first 64 chunks")


def pcm_decoder(sample: np.dtype, channels: int, rate: int):
    """bytes -> (16 kHz mono float32 of the whole frames in them, the bytes left over), resampled as a stream."""
    import soxr

    frame = sample.itemsize * channels
    resampler = None if rate == SAMPLE_RATE else soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")

    def decode(data: bytes) -> tuple[np.ndarray, bytes]:
        whole = len(data) - len(data) % frame
        samples = np.frombuffer(data[:whole], sample).reshape(-1, channels).astype(np.float32)
        if sample.kind == "i":
            samples /= 32768.0
        elif not np.isfinite(samples).all():  # NaN would reach the encoder, and every later window would be NaN
            raise ValueError("the WAV stream's float samples must be finite numbers (it holds NaN or infinity)")
        mono = np.ascontiguousarray(samples.mean(axis=1), dtype=np.float32)
        return (mono if resampler is None else resampler.resample_chunk(mono)), data[whole:]

    return decode
