"""RTTM reading and writing (NIST Rich Transcription Time Marked, SPEAKER lines).

Line format (10 space-separated fields):
  SPEAKER <uri> <channel> <onset> <duration> <NA> <NA> <speaker> <NA> <NA>
"""

from __future__ import annotations

import io
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from specwhisper.results.transcript import SpeakerTurn


def _safe_field(text: str, what: str) -> str:
    text = str(text).strip()
    if not text:
        raise ValueError(f"RTTM {what} cannot be empty")
    return "_".join(text.split())  # RTTM fields are whitespace separated


def _turns(items: Iterable) -> list[SpeakerTurn]:
    """SpeakerTurn or Segment-like objects (start, end, speaker) -> turns; items without a speaker are skipped."""
    turns = []
    for item in items:
        speaker = getattr(item, "speaker", None)
        if speaker is None:
            continue
        start, end = float(item.start), float(item.end)
        if end > start:
            turns.append(SpeakerTurn(start, end, str(speaker)))
    return sorted(turns, key=lambda t: (t.start, t.end, t.speaker))


def format_rttm(turns_or_segments: Iterable, uri: str) -> str:
    """RTTM lines, in milliseconds: a turn's duration is its end's millisecond less its start's, so that the
    file holds the json's turns exactly (a json written again gives the same RTTM)."""
    uri = _safe_field(uri, "uri")
    lines = [
        f"SPEAKER {uri} 1 {t.start:.3f} {round(t.end, 3) - round(t.start, 3):.3f} <NA> <NA> "
        f"{_safe_field(t.speaker, 'speaker')} <NA> <NA>"
        for t in _turns(turns_or_segments)
    ]
    return "".join(line + "\n" for line in lines)


def save_rttm(turns_or_segments: Iterable, uri: str, path_or_file: str | os.PathLike | TextIO) -> None:
    """Write speaker turns (or speaker-attributed segments) as RTTM to a path or an open text file."""
    text = format_rttm(turns_or_segments, uri)
    if isinstance(path_or_file, (str, os.PathLike)):
        Path(path_or_file).write_text(text)
    else:
        path_or_file.write(text)


def parse_rttm(text: str, name: str = "<rttm>") -> dict[str, list[SpeakerTurn]]:
    out: dict[str, list[SpeakerTurn]] = {}
    for lineno, line in enumerate(io.StringIO(text), 1):
        fields = line.split()
        if not fields or fields[0].startswith((";", "#")):
            continue
        if fields[0] != "SPEAKER":
            continue  # other RTTM record types (LEXEME, SPKR-INFO...) carry no turns
        if len(fields) < 8:
            raise ValueError(f"{name}:{lineno}: SPEAKER line needs at least 8 fields, got {len(fields)}")
        try:
            onset, duration = float(fields[3]), float(fields[4])
        except ValueError:
            raise ValueError(f"{name}:{lineno}: onset/duration are not numbers: {fields[3]!r} {fields[4]!r}") from None
        if duration < 0:
            raise ValueError(f"{name}:{lineno}: negative duration {duration}")
        out.setdefault(fields[1], []).append(SpeakerTurn(onset, onset + duration, fields[7]))
    for turns in out.values():
        turns.sort(key=lambda t: (t.start, t.end, t.speaker))
    return out


def read_rttm(path: str | os.PathLike) -> dict[str, list[SpeakerTurn]]:
    """Read an RTTM file -> {uri: turns sorted by start}."""
    return parse_rttm(Path(path).read_text(), str(path))


def turns_to_annotation(turns: Iterable[SpeakerTurn], uri: str | None = None):
    """SpeakerTurn list -> pyannote.core.Annotation (for scoring with pyannote.metrics)."""
    from pyannote.core import Annotation, Segment

    annotation = Annotation(uri=uri)
    for i, t in enumerate(turns):
        annotation[Segment(t.start, t.end), i] = t.speaker
    return annotation
