"""Re-alignment of an accepted edit: edited words get the timings and segments of the original
words they align to."""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from typing import Sequence

from specwhisper.results.transcript import Segment, Word
from specwhisper.results.words import spread_words, word_key


@dataclass
class Unit:
    """One original word with its segment and timing (synthetic when a segment has no words)."""

    seg: int
    start: float
    end: float
    text: str
    probability: float | None
    speaker: str | None


def word_units(segments: Sequence[Segment], idx: Sequence[int]) -> list[Unit]:
    out = []
    for i in idx:
        s = segments[i]
        if s.words:
            out += [Unit(i, w.start, w.end, w.text, w.probability, w.speaker or s.speaker) for w in s.words]
        else:  # spread the segment's words evenly (only used to assign edited words to segments)
            out += [Unit(i, start, end, w, None, s.speaker) for start, end, w in spread_words(s)]
    return out


def realign(units: Sequence[Unit], edited: str) -> list[Unit]:
    """Edited words with timings/segments taken from the original words they align to.

    Equal words keep their timing; a replaced block shares the original block's span in proportion
    to character length; an inserted word sits at the end of the word before it (zero length).
    """
    e_words = edited.split()
    ok = [word_key(u.text) for u in units]
    ek = [word_key(w) for w in e_words]
    out: list[Unit] = []
    sm = difflib.SequenceMatcher(a=ok, b=ek, autojunk=False)
    for op, i1, i2, j1, j2 in sm.get_opcodes():
        if op == "equal":
            for a, b in zip(range(i1, i2), range(j1, j2)):
                u = units[a]
                out.append(Unit(u.seg, u.start, u.end, e_words[b], u.probability, u.speaker))
        elif op == "replace":
            block = units[i1:i2]
            t0, t1 = block[0].start, block[-1].end
            lens = [max(1, len(w)) for w in e_words[j1:j2]]
            total, acc = sum(lens), 0
            probs = [u.probability for u in block if u.probability is not None]
            for b, n in zip(range(j1, j2), lens):
                s = t0 + (t1 - t0) * acc / total
                acc += n
                e = t0 + (t1 - t0) * acc / total
                mid = (acc - n / 2) / total  # which original word this one overlaps most
                u = block[min(len(block) - 1, int(mid * len(block)))]
                out.append(Unit(u.seg, s, e, e_words[b], min(probs) if probs else None, u.speaker))
        elif op == "insert":
            u = units[i1 - 1] if i1 > 0 else units[0]
            t = u.end if i1 > 0 else u.start
            for b in range(j1, j2):
                out.append(Unit(u.seg, t, t, e_words[b], None, u.speaker))
        # delete: the words are gone
    return out


def alignment_problem(segments: Sequence[Segment], idx: Sequence[int], units: Sequence[Unit]) -> str | None:
    """None if the re-aligned words still fit their segments, else why not."""
    by_seg: dict[int, list[Unit]] = {i: [] for i in idx}
    for u in units:
        by_seg[u.seg].append(u)
    allowed = {i: {w.speaker or segments[i].speaker for w in segments[i].words} | {segments[i].speaker} for i in idx}
    prev = -1.0
    for i in idx:
        s, us = segments[i], by_seg[i]
        if s.text.strip() and not us:
            return f"segment {i} would lose all its words"
        for u in us:
            if u.start < prev - 1e-6 or u.end < u.start - 1e-6:
                return f"timings out of order in segment {i}"
            if s.words and (u.start < s.words[0].start - 1e-3 or u.end > s.words[-1].end + 1e-3):
                return f"word outside segment {i}"
            if u.speaker not in allowed[i]:
                return f"speaker changed in segment {i}"
            prev = u.start
    return None


def apply_units(segs: list[Segment], idx: Sequence[int], units: Sequence[Unit]) -> None:
    """Write re-aligned words into the segments ``idx`` (in place)."""
    for i in idx:
        s = segs[i]
        mine = [u for u in units if u.seg == i]
        lead = " " if s.text.startswith(" ") else ""
        new_text = lead + " ".join(u.text for u in mine)
        if new_text == s.text:
            continue
        if s.words:
            wlead = " " if s.words[0].text.startswith(" ") else ""
            s.words = [Word(u.start, u.end, wlead + u.text, u.probability, u.speaker) for u in mine]
        s.text = new_text
        s.tokens = []  # the ASR token ids no longer spell the edited text
