"""Output writers: txt, srt, vtt, json, tsv, rttm."""

from __future__ import annotations

import io
import json
import os
import tempfile
from pathlib import Path
from typing import Callable, TextIO

from specwhisper.asr.types import Segment, Transcript
from specwhisper.diarize.rttm import format_rttm


def _clock(seconds: float, sep: str) -> str:
    ms = max(0, int(round(seconds * 1000)))
    h, ms = divmod(ms, 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    return f"{h:02d}:{m:02d}:{s:02d}{sep}{ms:03d}"


def _turns(segments: list[Segment]) -> list[tuple[str | None, list[Segment]]]:
    """Consecutive segments of the same speaker, grouped."""
    turns: list[tuple[str | None, list[Segment]]] = []
    for seg in segments:
        if turns and turns[-1][0] == seg.speaker:
            turns[-1][1].append(seg)
        else:
            turns.append((seg.speaker, [seg]))
    return turns


def write_txt(t: Transcript, f: TextIO) -> None:
    if t.speakers:
        for speaker, segs in _turns(t.segments):
            text = " ".join(s.text.strip() for s in segs)
            f.write(f"[{speaker or 'UNKNOWN'}] {text}\n")
    else:
        for s in t.segments:
            f.write(s.text.strip() + "\n")


def _cue_text(s: Segment) -> str:
    return f"[{s.speaker}] {s.text.strip()}" if s.speaker else s.text.strip()


def write_srt(t: Transcript, f: TextIO) -> None:
    for i, s in enumerate(t.segments, 1):
        f.write(f"{i}\n{_clock(s.start, ',')} --> {_clock(s.end, ',')}\n{_cue_text(s)}\n\n")


def write_vtt(t: Transcript, f: TextIO) -> None:
    f.write("WEBVTT\n\n")
    for s in t.segments:
        text = f"<v {s.speaker}>{s.text.strip()}" if s.speaker else s.text.strip()
        f.write(f"{_clock(s.start, '.')} --> {_clock(s.end, '.')}\n{text}\n\n")


def write_json(t: Transcript, f: TextIO) -> None:
    json.dump(t.to_dict(), f, ensure_ascii=False, indent=2)
    f.write("\n")


def write_tsv(t: Transcript, f: TextIO) -> None:
    f.write("start\tend\tspeaker\ttext\n")
    for s in t.segments:
        text = s.text.strip().replace("\t", " ")
        f.write(f"{int(round(s.start * 1000))}\t{int(round(s.end * 1000))}\t{s.speaker or ''}\t{text}\n")


def write_rttm(t: Transcript, f: TextIO) -> None:
    """The diarizer's turns (overlapping turns included, whether or not any words fell in them).

    A transcript that was never diarized (``turns`` is None) falls back to its speaker-attributed
    segments, so a speaker label set some other way still comes out."""
    uri = (Path(t.source).stem if t.source else "") or "audio"
    f.write(format_rttm(t.turns if t.turns is not None else t.segments, uri))


WRITERS: dict[str, Callable[[Transcript, TextIO], None]] = {
    "txt": write_txt,
    "srt": write_srt,
    "vtt": write_vtt,
    "json": write_json,
    "tsv": write_tsv,
    "rttm": write_rttm,
}
ALL_FORMATS = tuple(WRITERS)


def parse_formats(spec: str) -> list[str]:
    """'srt,json' or 'all' -> validated list of format names."""
    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError("no output format given")
    if "all" in names:
        return list(ALL_FORMATS)
    unknown = [n for n in names if n not in WRITERS]
    if unknown:
        raise ValueError(f"unknown output format '{unknown[0]}' (choose from {', '.join(ALL_FORMATS)}, all)")
    return list(dict.fromkeys(names))


def render(t: Transcript, fmt: str) -> str:
    buf = io.StringIO()
    WRITERS[fmt](t, buf)
    return buf.getvalue()


def _write_temp(out_dir: Path, name: str, text: str) -> Path:
    """``text`` in a new, uniquely named hidden file beside its destination, flushed to disk."""
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class OutputDirError(ValueError):
    """The output folder cannot take outputs; the message is one line."""


def check_output_dir(folder: Path) -> None:
    """Create ``folder`` when missing and prove a file can be written in it, before any work."""
    if folder.exists() and not folder.is_dir():
        raise OutputDirError(f"{folder}: the output folder is a file")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputDirError(f"{folder}: cannot create the output folder ({exc.strerror or exc})") from None
    try:
        fd, probe = tempfile.mkstemp(prefix=".write-check.", dir=folder)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise OutputDirError(f"{folder}: cannot write to the output folder ({exc.strerror or exc})") from None


def write_outputs(t: Transcript, out_dir: Path, stem: str, formats: list[str]) -> list[Path]:
    """Write each format to ``out_dir/stem.fmt``, all or none: every format goes to its own unique
    temp file (fsynced) first, then they are renamed into place and the folder is fsynced. A failure
    removes the temp files and whatever this call had already renamed into place."""
    out_dir.mkdir(parents=True, exist_ok=True)
    temps: dict[Path, Path] = {}
    placed: list[Path] = []
    try:
        for fmt in formats:
            path = out_dir / f"{stem}.{fmt}"
            temps[path] = _write_temp(out_dir, path.name, render(t, fmt))
        for path, tmp in temps.items():
            tmp.replace(path)
            placed.append(path)
        _fsync_dir(out_dir)
    except BaseException:
        for leftover in [tmp for path, tmp in temps.items() if path not in placed] + placed:
            leftover.unlink(missing_ok=True)
        raise
    return placed
