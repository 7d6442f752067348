"""Speaker attribution: put diarization turns onto transcript words and segments.

Rules
  * a word gets the speaker whose turns overlap it the longest; a word that no turn
    overlaps (diarization gap, word timing slightly off) gets the speaker of the nearest
    turn, so no word is left without a speaker while there is any turn at all;
  * a segment with words is split wherever the word speaker changes; each piece keeps
    its words, its text is rebuilt from them, and it carries its speaker;
  * a segment without words gets the speaker with the largest overlap (nearest turn if none);
  * ``overlap`` is set on a (piece of a) segment when another speaker's turns cover at
    least ``OVERLAP_MIN_SECONDS`` of it, or ``OVERLAP_MIN_SHARE`` of its duration:
    overlapping speech is marked, not dropped;
  * with no turns at all (silence, diarization found nobody) segments come back unchanged.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace

from asr.types import Segment, Word
from diarize.pipeline import SpeakerTurn

OVERLAP_MIN_SECONDS = 0.5
OVERLAP_MIN_SHARE = 0.2


class _Turns:
    """Turns sorted by start with a running maximum of ends, for fast interval queries."""

    def __init__(self, turns: Sequence[SpeakerTurn]):
        self.turns = sorted((t for t in turns if t.end > t.start), key=lambda t: (t.start, t.end))
        self.starts = [t.start for t in self.turns]
        self.max_end = []
        running = float("-inf")
        for t in self.turns:
            running = max(running, t.end)
            self.max_end.append(running)

    def __bool__(self) -> bool:
        return bool(self.turns)

    def overlapping(self, start: float, end: float):
        hi = bisect.bisect_left(self.starts, end)
        lo = bisect.bisect_right(self.max_end, start)  # turns before lo all end by `start`
        for t in self.turns[lo:hi]:
            if t.end > start:
                yield t

    def overlap_by_speaker(self, start: float, end: float) -> dict[str, float]:
        """Seconds of [start, end] covered by each speaker (a speaker's own turns never double count)."""
        spans: dict[str, list[tuple[float, float]]] = {}
        for t in self.overlapping(start, end):
            spans.setdefault(t.speaker, []).append((max(start, t.start), min(end, t.end)))
        out = {}
        for speaker, parts in spans.items():
            total, cur_s, cur_e = 0.0, None, None
            for s, e in sorted(parts):
                if cur_e is None or s > cur_e:
                    if cur_e is not None:
                        total += cur_e - cur_s
                    cur_s, cur_e = s, e
                else:
                    cur_e = max(cur_e, e)
            total += cur_e - cur_s
            out[speaker] = total
        return out

    def nearest(self, start: float, end: float) -> str:
        """Speaker of the turn closest to the middle of [start, end] (only used for uncovered words)."""
        mid = (start + end) / 2
        return min(self.turns, key=lambda t: (max(t.start - mid, mid - t.end, 0.0), t.start)).speaker

    def speaker_for(self, start: float, end: float) -> str:
        if end <= start:  # zero-length word: use its instant
            end = start + 1e-3
        covered = self.overlap_by_speaker(start, end)
        if covered:
            return max(sorted(covered), key=lambda s: covered[s])
        return self.nearest(start, end)


def _is_overlapped(turns: _Turns, start: float, end: float, speaker: str | None) -> bool:
    duration = end - start
    if duration <= 0:
        return False
    covered = turns.overlap_by_speaker(start, end)
    others = [v for s, v in covered.items() if s != speaker]
    if not others:
        return False
    other = max(others)
    return other >= min(OVERLAP_MIN_SECONDS, OVERLAP_MIN_SHARE * duration) and other > 0.0


def _join(words: list[Word]) -> str:
    """Rebuild text from Whisper-style words (which carry their own leading spaces)."""
    text = "".join(w.text for w in words)
    if words and not words[0].text.startswith(" ") and not text.startswith(" "):
        text = " " + text
    return text


def assign_speakers(segments: list[Segment], turns: list[SpeakerTurn]) -> list[Segment]:
    """Return new segments with ``speaker``/``overlap`` set (and words' ``speaker``), split at speaker changes.

    The input segments are not modified.
    """
    index = _Turns(turns)
    if not index:
        return [replace(s, words=[replace(w) for w in s.words]) for s in segments]
    out: list[Segment] = []
    for seg in segments:
        if not seg.words:
            speaker = index.speaker_for(seg.start, seg.end)
            out.append(replace(seg, words=[], speaker=speaker,
                               overlap=_is_overlapped(index, seg.start, seg.end, speaker)))
            continue
        words = [replace(w, speaker=index.speaker_for(w.start, w.end)) for w in seg.words]
        groups: list[list[Word]] = []
        for w in words:
            if groups and groups[-1][-1].speaker == w.speaker:
                groups[-1].append(w)
            else:
                groups.append([w])
        if len(groups) == 1:
            start, end = seg.start, seg.end
            out.append(replace(seg, words=words, speaker=words[0].speaker,
                               overlap=_is_overlapped(index, start, end, words[0].speaker)))
            continue
        for i, group in enumerate(groups):
            start = seg.start if i == 0 else group[0].start
            end = seg.end if i == len(groups) - 1 else group[-1].end
            out.append(Segment(start=start, end=max(end, start), text=_join(group), words=group,
                               tokens=[], speaker=group[0].speaker,
                               overlap=_is_overlapped(index, group[0].start, group[-1].end, group[0].speaker)))
    return out


def speaker_turns_text(segments: list[Segment]) -> str:
    """Plain-text transcript with a ``[SPEAKER_xx]`` line whenever the speaker changes."""
    lines: list[str] = []
    current = object()
    for seg in segments:
        if seg.speaker != current:
            current = seg.speaker
            if current is not None:
                lines.append(f"[{current}]" + (" (overlap)" if seg.overlap else ""))
        text = seg.text.strip()
        if text:
            lines.append(text)
    return "\n".join(lines) + ("\n" if lines else "")
