"""Speaker attribution: put diarization turns onto transcript words and segments.

Rules
  * a word gets the speaker whose turns overlap it the longest; a word that no turn
    overlaps (diarization gap, word timing slightly off) gets the speaker of the nearest
    turn, so no word is left without a speaker while there is any turn at all;
  * a segment with words is split wherever the word speaker changes; each piece keeps
    its words, its text is rebuilt from them, and it carries its speaker;
  * a segment without words gets the speaker with the largest overlap (nearest turn if none);
  * ``overlap`` is set on a word when the turns of two (or more) speakers are active at the
    same time during at least ``WORD_OVERLAP_SHARE`` of it (its instant for a zero-length
    word): two speakers talk during that word;
  * ``overlap`` is set on a (piece of a) segment when one of its words is marked, or (for
    segments without words as well) when two speakers' turns are active at once for at least
    ``OVERLAP_MIN_SECONDS`` of it, or ``OVERLAP_MIN_SHARE`` of its duration:
    overlapping speech is marked, not dropped;
  * with no turns at all (silence, diarization found nobody) segments come back unchanged.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import replace

from specwhisper.results.words import join_words
from specwhisper.results.transcript import Segment, Word
from specwhisper.results.transcript import SpeakerTurn

OVERLAP_MIN_SECONDS = 0.5
OVERLAP_MIN_SHARE = 0.2
# a word is overlapped when two speakers' turns are both active for a third of it (0.1 s of a
# typical 0.3 s word); the diarizer's turns of two speakers often touch or overlap by a frame
# or two (17 ms each) at a speaker change, which must not mark the word that sits on it
WORD_OVERLAP_SHARE = 1 / 3


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

    def spans_by_speaker(self, start: float, end: float) -> dict[str, list[tuple[float, float]]]:
        """Parts of [start, end] each speaker's turns cover, merged per speaker."""
        spans: dict[str, list[tuple[float, float]]] = {}
        for t in self.overlapping(start, end):
            spans.setdefault(t.speaker, []).append((max(start, t.start), min(end, t.end)))
        return {speaker: _merge(parts) for speaker, parts in spans.items()}

    def overlap_by_speaker(self, start: float, end: float) -> dict[str, float]:
        """Seconds of [start, end] covered by each speaker (a speaker's own turns never double count)."""
        return {speaker: sum(e - s for s, e in parts) for speaker, parts in self.spans_by_speaker(start, end).items()}

    def nearest(self, start: float, end: float) -> str:
        """Speaker of the turn closest to the middle of [start, end] (only used for uncovered words)."""
        mid = (start + end) / 2
        return min(self.turns, key=lambda t: (max(t.start - mid, mid - t.end, 0.0), t.start)).speaker

    def _pick(self, covered: dict[str, float], start: float, end: float) -> str:
        return max(sorted(covered), key=lambda s: covered[s]) if covered else self.nearest(start, end)

    def speaker_for(self, start: float, end: float) -> str:
        end = max(end, start + 1e-3)  # zero-length word: use its instant
        return self._pick(self.overlap_by_speaker(start, end), start, end)

    def attribute(self, word: Word, keep_speaker: bool = False) -> Word:
        """A copy of ``word`` with its speaker (unless ``keep_speaker``) and overlap flag."""
        start, end = word.start, max(word.end, word.start + 1e-3)  # zero-length word: use its instant
        spans = self.spans_by_speaker(start, end)
        speaker = word.speaker if keep_speaker else \
            self._pick({k: sum(e - s for s, e in v) for k, v in spans.items()}, start, end)
        both = simultaneous_seconds(spans)
        return replace(word, speaker=speaker, overlap=both > 0 and both >= WORD_OVERLAP_SHARE * (end - start))


def _merge(spans: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[tuple[float, float]] = []
    for s, e in sorted(spans):
        if out and s <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], e))
        else:
            out.append((s, e))
    return out


def simultaneous_seconds(spans_by_speaker: dict[str, list[tuple[float, float]]]) -> float:
    """Seconds during which two or more speakers are active (each speaker's spans merged first)."""
    edges = sorted((x, step) for parts in spans_by_speaker.values() for s, e in _merge(parts)
                   for x, step in ((s, 1), (e, -1)))
    total, active, last = 0.0, 0, 0.0
    for x, step in edges:
        if active >= 2:
            total += x - last
        active, last = active + step, x
    return total


def overlap_seconds(turns: Sequence[SpeakerTurn]) -> float:
    """Seconds of ``turns`` (a whole file) where two or more speakers talk at once."""
    spans: dict[str, list[tuple[float, float]]] = {}
    for t in turns:
        spans.setdefault(t.speaker, []).append((t.start, t.end))
    return simultaneous_seconds(spans)


def _is_overlapped(turns: _Turns, start: float, end: float) -> bool:
    """Two or more speakers talk at once for OVERLAP_MIN_SECONDS of [start, end] (or OVERLAP_MIN_SHARE of it).

    Simultaneous speech, not merely another speaker's turn inside the span: a piece cut at a
    speaker change has the next speaker's turn right next to it, which is no overlap."""
    duration = end - start
    if duration <= 0:
        return False
    both = simultaneous_seconds(turns.spans_by_speaker(start, end))
    return both > 0.0 and both >= min(OVERLAP_MIN_SECONDS, OVERLAP_MIN_SHARE * duration)


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
                               overlap=_is_overlapped(index, seg.start, seg.end)))
            continue
        words = [index.attribute(w) for w in seg.words]
        groups: list[list[Word]] = []
        for w in words:
            if groups and groups[-1][-1].speaker == w.speaker:
                groups[-1].append(w)
            else:
                groups.append([w])
        if len(groups) == 1:
            start, end = seg.start, seg.end
            out.append(replace(seg, words=words, speaker=words[0].speaker,
                               overlap=any(w.overlap for w in words)
                               or _is_overlapped(index, start, end)))
            continue
        for i, group in enumerate(groups):
            start = seg.start if i == 0 else group[0].start
            end = seg.end if i == len(groups) - 1 else group[-1].end
            out.append(replace(seg, start=start, end=max(end, start), text=join_words(group), words=group,
                               tokens=[], speaker=group[0].speaker,
                               overlap=any(w.overlap for w in group)
                               or _is_overlapped(index, group[0].start, group[-1].end)))
    return out


def mark_word_overlaps(segments: list[Segment], turns: list[SpeakerTurn]) -> list[Segment]:
    """Segments whose words' ``overlap`` flags are set again from ``turns``, speakers kept.

    For words rebuilt after attribution (the post-edit rewrites a segment's words from its text)."""
    index = _Turns(turns)
    return [replace(s, words=[index.attribute(w, keep_speaker=True) if index else replace(w) for w in s.words])
            for s in segments]


def heard_spans(segments: list[Segment]) -> list[tuple[float, float]]:
    """(start, end) of every word the transcript holds; a segment without word timings counts whole."""
    return [(w.start, w.end) for s in segments if s.text.strip()
            for w in (s.words or [s]) if w.end >= w.start]


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
