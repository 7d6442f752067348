"""Output writers: txt, srt, vtt, json, tsv, rttm, aud, textgrid; srt and vtt take a layout
(specwhisper.pipeline.subtitles)."""

from __future__ import annotations

import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Callable, TextIO

from specwhisper.messages import printable
from specwhisper.results.transcript import Segment, Transcript
from specwhisper.diarize.rttm import format_rttm
from specwhisper.pipeline.subtitles import SubtitleOptions, word_cues

NO_LAYOUT = SubtitleOptions()


def _ms(seconds: float) -> int:
    """Integer milliseconds of a time as the json holds it (3 decimals), so that a peer's writer run on our
    json gives the very files ours give."""
    return max(0, round(1000 * round(seconds, 3)))


def format_timestamp(seconds: float, always_include_hours: bool = False, decimal_marker: str = ".") -> str:
    """openai-whisper's and faster-whisper's ``format_timestamp`` (their arguments): ``MM:SS.mmm``, hours from
    the first hour on or always (srt's; vtt's from the first hour on)."""
    h, ms = divmod(_ms(seconds), 3_600_000)
    m, ms = divmod(ms, 60_000)
    s, ms = divmod(ms, 1000)
    hours = f"{h:02d}:" if always_include_hours or h > 0 else ""
    return f"{hours}{m:02d}:{s:02d}{decimal_marker}{ms:03d}"


def timed_line(s: Segment) -> str:
    """openai-whisper's ``--verbose`` line: ``[00:01.000 --> 00:04.500]  text`` (two spaces: openai prints the
    segment's text after one, and it starts with one); the speaker label as in txt after one."""
    text = _labelled(s) if s.speaker is not None else f" {s.text.strip()}"
    return f"[{format_timestamp(s.start)} --> {format_timestamp(s.end)}] {text}"


def _labelled(s: Segment) -> str:
    """WhisperX's speaker label: ``[SPEAKER_00]: text`` (txt, srt, vtt); no label where none was assigned."""
    return f"[{s.speaker}]: {s.text.strip()}" if s.speaker is not None else s.text.strip()


def write_txt(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    """One line per segment, as openai-whisper and WhisperX write it."""
    for s in t.segments:
        f.write(_labelled(s) + "\n")


def _cues(t: Transcript, layout: SubtitleOptions, always_hours: bool, sep: str):
    """(start, end, text) per cue: one per segment, at its times, as the peers' subtitle writers give
    them from segments; laid out from the words (openai-whisper's layout) when ``layout`` asks for it
    and the transcript has words."""
    if layout.active and any(s.words for s in t.segments):
        yield from word_cues(t.segments, layout, lambda seconds: format_timestamp(seconds, always_hours, sep))
        return
    for s in t.segments:
        yield format_timestamp(s.start, always_hours, sep), format_timestamp(s.end, always_hours, sep), _labelled(s).replace("-->", "->")


def write_srt(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    for i, (start, end, text) in enumerate(_cues(t, layout, True, ","), 1):
        f.write(f"{i}\n{start} --> {end}\n{text}\n\n")


def write_vtt(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    f.write("WEBVTT\n\n")
    for start, end, text in _cues(t, layout, False, "."):
        f.write(f"{start} --> {end}\n{text}\n\n")


def write_json(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    json.dump(t.to_dict(), f, ensure_ascii=False, indent=2)
    f.write("\n")


def write_tsv(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    """openai-whisper's three columns (start and end in integer ms, text); WhisperX writes no speaker
    here either: speakers are in the json, srt, vtt and txt."""
    f.write("start\tend\ttext\n")
    for s in t.segments:
        text = s.text.strip().replace("\t", " ")
        f.write(f"{_ms(s.start)}\t{_ms(s.end)}\t{text}\n")


def write_aud(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    """Audacity's label track, as WhisperX's ``aud`` writes it: start and end in seconds (as the json holds
    them), the text, tab-separated, one label per segment; a speaker as ``[[SPEAKER_00]]`` before the text.
    Audacity's File > Import > Labels reads it."""
    for s in t.segments:
        speaker = f"[[{s.speaker}]]" if s.speaker is not None else ""
        f.write(f"{round(s.start, 3)}\t{round(s.end, 3)}\t{speaker}{s.text.strip().replace(chr(9), ' ')}\n")


def write_rttm(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    """The diarizer's turns (overlapping turns included, whether or not any words fell in them).

    A transcript that was never diarized (``turns`` is None) falls back to its speaker-attributed
    segments, so a speaker label set some other way still comes out."""
    uri = (Path(t.source).stem if t.source else "") or "audio"
    f.write(format_rttm(t.turns if t.turns is not None else t.segments, uri))


def _intervals(spans: list[tuple[float, float, str]], duration: float) -> list[tuple[float, float, str]]:
    """Labelled spans as a Praat interval tier: in order, none shorter than a millisecond (a word without a
    length joins the one before it), the gaps between them empty intervals, from 0 to ``duration``."""
    out: list[tuple[float, float, str]] = []
    end = 0.0
    duration = round(duration, 3)
    for start, stop, text in spans:  # in milliseconds, as the json's times
        start, stop = min(max(round(start, 3), end), duration), min(round(stop, 3), duration)
        if stop - start < 0.001:
            if out and out[-1][2]:
                out[-1] = (out[-1][0], out[-1][1], f"{out[-1][2]} {text}")
                continue
            stop = min(round(start + 0.001, 3), duration)
            if stop <= start:
                continue
        if start > end:
            out.append((end, start, ""))
        out.append((start, stop, text))
        end = stop
    if end < duration or not out:
        out.append((end, duration, ""))
    return out


def _praat(text: str) -> str:
    return '"' + text.replace('"', '""') + '"'


def write_textgrid(t: Transcript, f: TextIO, layout: SubtitleOptions = NO_LAYOUT) -> None:
    """A Praat TextGrid (long text format, as Praat and the Montreal Forced Aligner write it): an interval tier
    of the segments and one of the words (with word timestamps); diarized, a pair per speaker
    (``SPEAKER_00 - segments``, ``SPEAKER_00 - words``)."""
    duration = round(max([t.duration, *(s.end for s in t.segments)]), 3)
    tiers = []
    speakers = sorted({s.speaker for s in t.segments}, key=lambda s: (s is not None, s or "")) or [None]
    for speaker in speakers:
        segments = [s for s in t.segments if s.speaker == speaker]
        prefix = f"{speaker} - " if speaker is not None else ""
        tiers.append((prefix + "segments", [(s.start, s.end, s.text.strip()) for s in segments]))
        words = [(w.start, w.end, w.text.strip()) for s in segments for w in s.words]
        if words:
            tiers.append((prefix + "words", words))
    f.write(f'File type = "ooTextFile"\nObject class = "TextGrid"\n\nxmin = 0 \nxmax = {duration!r} \n')
    f.write(f"tiers? <exists> \nsize = {len(tiers)} \nitem []: \n")
    for n, (name, spans) in enumerate(tiers, 1):
        intervals = _intervals(spans, duration)
        f.write(f'    item [{n}]:\n        class = "IntervalTier" \n        name = {_praat(name)} \n'
                f"        xmin = 0 \n        xmax = {duration!r} \n        intervals: size = {len(intervals)} \n")
        for k, (start, stop, text) in enumerate(intervals, 1):
            f.write(f"        intervals [{k}]:\n            xmin = {start!r} \n            xmax = {stop!r} \n"
                    f"            text = {_praat(text)} \n")


# every writer takes the layout; only srt and vtt use it (as openai-whisper's writers)
WRITERS: dict[str, Callable[[Transcript, TextIO, SubtitleOptions], None]] = {
    "txt": write_txt,
    "srt": write_srt,
    "vtt": write_vtt,
    "json": write_json,
    "tsv": write_tsv,
    "rttm": write_rttm,
    "aud": write_aud,
    "textgrid": write_textgrid,
}
# what "all" writes: aud only by name, as in WhisperX; textgrid too (Praat's, for phonetics and corpus work)
ALL_FORMATS = tuple(f for f in WRITERS if f not in ("aud", "textgrid"))
SUFFIXES = {"textgrid": "TextGrid"}  # a file's extension where it is not the format's name (Praat's spelling)


def file_name(stem: str, fmt: str) -> str:
    """The name of ``stem``'s output in format ``fmt``: talk.srt, talk.TextGrid."""
    return f"{stem}.{SUFFIXES.get(fmt, fmt)}"


def with_all(names: list[str]) -> list[str]:
    """``names`` with ``all`` standing for ``ALL_FORMATS`` (``all,aud``: every format and aud), each once."""
    if "all" in names:
        names = [*ALL_FORMATS, *names]
    return [n for n in dict.fromkeys(names) if n != "all"]


def overwrites_text(text: Path, out_dir: Path, stem: str, formats: list[str]) -> str | None:
    """The one-line refusal when one of ``stem``'s outputs in ``out_dir`` would be the file ``text`` (the text
    to align: ``talk.srt`` brought in sync writes ``talk.srt``), else None."""
    for fmt in formats:
        out = out_dir / file_name(stem, fmt)
        if os.path.realpath(out) == os.path.realpath(text) or (out.exists() and text.exists() and os.path.samefile(out, text)):
            return (f"{text}: the {fmt} output would overwrite this text to align: write the outputs to another folder "
                    f"(-o) or leave {fmt} out")
    return None


def read_only_output(out_dir: Path, stem: str, formats: list[str]) -> str | None:
    """Why ``stem``'s outputs in ``out_dir`` may not be written (one of them is there and read-only: a
    transcript someone corrected and locked is not replaced by a rerun, root's included), else None."""
    for fmt in formats:
        out = out_dir / file_name(stem, fmt)
        try:
            locked = out.is_file() and not out.stat().st_mode & stat.S_IWUSR
        except OSError:
            continue
        if locked:
            return f"{printable(str(out))} is read-only: make it writable or remove it to write it again"
    return None


def formats_of_all(t: Transcript) -> list[str]:
    """What "all" writes of ``t``: rttm only with speakers (diarized, or multichannel's channels)."""
    return [f for f in ALL_FORMATS if f != "rttm" or t.turns is not None or t.speakers]


def parse_formats(spec: str) -> list[str]:
    """'srt,json', 'all' or 'all,aud' -> validated list of format names."""
    names = [n.strip().lower() for n in spec.split(",") if n.strip()]
    if not names:
        raise ValueError("no output format given")
    unknown = [n for n in names if n not in WRITERS and n != "all"]
    if unknown:
        raise ValueError(f"unknown output format '{unknown[0]}' (choose from {', '.join(WRITERS)}, all)")
    return with_all(names)


def render(t: Transcript, fmt: str, layout: SubtitleOptions = NO_LAYOUT) -> str:
    """``t`` in format ``fmt``; ``layout`` lays out srt and vtt cues (raises ValueError when invalid)."""
    layout.validate()
    buf = io.StringIO()
    WRITERS[fmt](t, buf, layout)
    return buf.getvalue()


def _umask() -> int:
    """The process's umask, read without changing it where Linux tells it (``os.umask`` sets it, for
    every thread, while it reads it)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def hidden_name(name: str, room: int = 200) -> str:
    """``name`` for a hidden working file beside it (a temp file, a backup, a checkpoint), which adds a dozen to
    thirty bytes to it: past ``room`` bytes, its start and a digest of the whole, so that a valid name of 250
    bytes still has its working files under the file system's 255."""
    data = name.encode("utf-8", "surrogateescape")
    if len(data) <= room:
        return name
    import hashlib

    return data[: room - 9].decode("utf-8", "ignore") + "~" + hashlib.sha1(data).hexdigest()[:8]


def _write_temp(out_dir: Path, name: str, text: str) -> Path:
    """``text`` in a new, uniquely named hidden file beside its destination, flushed to disk, with the
    mode a new file gets (``mkstemp`` makes it 0600: transcripts other users and servers could not read)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{hidden_name(name)}.", suffix=".tmp", dir=out_dir)
    try:
        os.fchmod(fd, 0o666 & ~_umask())
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


def _kept(path: Path) -> Path | None:
    """A second, hidden name for an earlier run's ``path`` (a hard link; a copy where the file system has
    none), so that a failed write can put it back; None when there is no such file."""
    backup = path.with_name(f".{hidden_name(path.name)}.{os.urandom(6).hex()}.old.tmp")
    try:
        os.link(path, backup)
    except FileNotFoundError:
        return None
    except OSError:  # no hard links on this file system (some network and FUSE ones)
        try:
            shutil.copy2(path, backup)
        except FileNotFoundError:
            return None
    return backup


def write_outputs(
    t: Transcript, out_dir: Path, stem: str, formats: list[str], layout: SubtitleOptions = NO_LAYOUT
) -> list[Path]:
    """Write each format to ``out_dir/stem.fmt`` (srt and vtt laid out by ``layout``), all or none:
    an invalid ``layout`` raises ValueError before anything is written; every format goes to its own unique
    temp file (fsynced) first, then they are renamed into place and the folder is fsynced. A failure
    removes the temp files and what this call had renamed into place, and puts back the earlier run's
    files those had replaced (kept under a second name until the new set is whole). An earlier output made
    read-only is not replaced: PermissionError, nothing written."""
    layout.validate()
    if refusal := read_only_output(out_dir, stem, formats):
        raise PermissionError(refusal)
    out_dir.mkdir(parents=True, exist_ok=True)
    temps: dict[Path, Path] = {}
    kept: dict[Path, Path] = {}
    placed: list[Path] = []
    try:
        for fmt in formats:
            path = out_dir / file_name(stem, fmt)
            temps[path] = _write_temp(out_dir, path.name, render(t, fmt, layout))
        for path in temps:
            if (backup := _kept(path)) is not None:
                kept[path] = backup
        for path, tmp in temps.items():
            tmp.replace(path)
            placed.append(path)
        _fsync_dir(out_dir)
    except BaseException:
        for path, tmp in temps.items():
            if path not in placed:
                tmp.unlink(missing_ok=True)
            elif path in kept:
                kept.pop(path).replace(path)  # the earlier run's file, back in place of the new one
            else:
                path.unlink(missing_ok=True)
        for backup in kept.values():
            backup.unlink(missing_ok=True)
        raise
    for backup in kept.values():
        backup.unlink(missing_ok=True)
    return placed
