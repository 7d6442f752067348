"""Output writers: txt, srt, vtt, json, tsv, rttm."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Callable, TextIO

from asr.types import Segment, Transcript
from diarize.rttm import format_rttm


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


def write_outputs(t: Transcript, out_dir: Path, stem: str, formats: list[str]) -> list[Path]:
    """Write each format to ``out_dir/stem.fmt`` atomically (temp file + rename)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for fmt in formats:
        path = out_dir / f"{stem}.{fmt}"
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(render(t, fmt), encoding="utf-8")
        tmp.replace(path)
        paths.append(path)
    return paths
