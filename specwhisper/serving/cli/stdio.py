"""``-`` for standard input and output: ``ffmpeg -i talk.mkv -f wav - | transcribe - -f srt -o - > talk.srt``.

The input ``-`` is the audio on standard input, in any format a file may hold (it is read to its end
into a temporary file, then decoded as a file is: soundfile or ffmpeg), named ``<stdin>`` in messages
and ``stdin`` in file names. ``-o -`` writes the one format asked for to standard output, in place of
the text the command prints; the summary line stays on standard error.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

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
        if args.live:
            raise ValueError("--live plays a file in real time: give its path (for a live stream, the server's "
                             "WebSocket /v1/live)")
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


def write_stdout(text: str) -> None:
    """A rendered transcript on standard output; a reader that went away (``| head``) is not an error."""
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # and none at exit, when Python flushes standard output again
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
