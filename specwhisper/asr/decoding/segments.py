"""Turning decoded Whisper tokens (with timestamp tokens) into timed segments."""

from __future__ import annotations

import bisect
from dataclasses import replace

from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.results.transcript import Segment

TIME_PRECISION = 0.02  # seconds per timestamp token


def tokens_to_segments(
    tokens: list[int], special: SpecialTokens, tokenizer, offset: float, duration: float, drop_unfinished: bool = False
) -> list[Segment]:
    """Split ``tokens`` at timestamp pairs (openai/whisper's rule); times become absolute via ``offset``.

    A final run of text without a closing timestamp ends at the chunk's end, unless
    ``drop_unfinished`` (a decode cut by the length limit: that text is decoded again).
    """
    tb = special.timestamp_begin
    segments: list[Segment] = []
    start_ts: float | None = None
    text_tokens: list[int] = []

    def flush(end: float) -> None:
        nonlocal text_tokens, start_ts
        text = tokenizer.decode(text_tokens)
        if text.strip():
            s = min(start_ts if start_ts is not None else 0.0, duration)
            e = min(max(end, s), duration)
            segments.append(Segment(start=offset + s, end=offset + e, text=text, tokens=list(text_tokens)))
        text_tokens = []
        start_ts = None

    for tok in tokens:
        if tok >= tb:
            t = (tok - tb) * TIME_PRECISION
            if start_ts is None:
                start_ts = t
            elif text_tokens:
                flush(t)
            else:
                start_ts = t
        elif tok < special.eot:
            text_tokens.append(tok)
    if text_tokens and not drop_unfinished:
        flush(duration)
    return segments


def _words(text: str) -> list[str]:
    return ["".join(ch for ch in w.lower() if ch.isalnum()) for w in text.split()]


REPEAT_SLIPS = 0.2  # of a repeated text's words, the share (rounded down) that may differ in its repeat


def repeats(later: list[Segment], earlier: Segment) -> bool:
    """Whether the text of ``later`` begins with the words of ``earlier`` (case and punctuation aside), up
    to one word in five (``REPEAT_SLIPS``, rounded down: a text under five words exactly) written
    otherwise, left out or added: two decodes of one voice, one over a longer stretch, differ in a
    word as often as not ("And so my fellow Americans" / "So my fellow Americans")."""
    mine = [w for w in _words(earlier.text) if w]
    slips = int(len(mine) * REPEAT_SLIPS)
    theirs = [w for w in _words(" ".join(s.text for s in later)) if w][: len(mine) + slips]  # a longer prefix is further
    if not mine:
        return False
    row = list(range(len(theirs) + 1))  # word edit distance of mine[:i] to each prefix of theirs
    for i, word in enumerate(mine, 1):
        prev, row = row, [i] + [0] * len(theirs)
        for j, other in enumerate(theirs, 1):
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + (word != other))
    return min(row) <= slips


def _overlap(tail: list[str], head: list[str], most: int = 5) -> int:
    """The longest n <= ``most`` with ``tail[-n:] == head[:n]`` (whisper_streaming's n-gram rule)."""
    for n in range(min(most, len(tail), len(head)), 0, -1):
        if tail[-n:] == head[:n] and any(tail[-n:]):
            return n
    return 0


def _trimmed(seg: Segment, first: int, last: int, tokenizer) -> Segment | None:
    """``seg`` without its first ``first`` and last ``last`` words (None when nothing is left)."""
    words = seg.text.split()
    keep = words[first : len(words) - last]
    if not keep:
        return None
    text = " " + " ".join(keep)
    timed = seg.words[first : len(seg.words) - last] if len(seg.words) == len(words) else seg.words
    start = timed[0].start if timed and timed is not seg.words else seg.start
    end = timed[-1].end if timed and timed is not seg.words else seg.end
    return replace(seg, text=text, tokens=tokenizer.encode(text, add_special_tokens=False), words=list(timed),
                   start=start, end=end)


def stitch(segments: list[Segment], redecoded: set[int], tokenizer) -> list[Segment]:
    """Segments in time order, where a segment from a re-decoded stretch (``id`` in ``redecoded``)
    loses the words it repeats from the segment before it or after it: Whisper's segment times are
    coarse, so a stretch that looked skipped can start with words its neighbour already has (a
    minute of clips: "You can call me Abby." then "Call me Abby.")."""
    out: list[Segment] = []
    ordered = sorted(segments, key=lambda s: s.start)
    for k, seg in enumerate(ordered):
        if id(seg) in redecoded:
            words = _words(seg.text)
            first = _overlap(_words(out[-1].text), words) if out else 0
            nxt = next((s for s in ordered[k + 1 :] if id(s) not in redecoded), None)
            last = _overlap(words[first:][::-1], _words(nxt.text)[::-1]) if nxt else 0
            seg = _trimmed(seg, first, last, tokenizer) if first or last else seg
            if seg is None:
                continue
        out.append(seg)
    return out


def dated(segments: list[Segment], speech: list[tuple[float, float]]) -> list[Segment]:
    """Each segment from its first word's start to its last word's end, as openai-whisper and
    faster-whisper date a segment when they time its words (``add_word_timestamps``): a segment Whisper
    dated from the end of the speech before a pause (a cue 7 s early over music or noise) starts where
    its words do. The words lie within the segment's timestamps (``alignment.fit_words``), so the
    segment only ever shrinks. The rules that read segment times run before, on Whisper's timestamps.

    A segment without timed words (word timestamps off) is shrunk to the VAD's ``speech`` (the file's
    spans, seconds) within it, when it holds any: a window that opens with a pause is dated
    ``<|0.00|>`` by Whisper, and a text left open ends at the window's end. On bench/cue_timing.py's
    files with 1-20 s pauses (base), 36 of 99 segments began over 1 s before their clip (up to 23 s),
    2 narrowed (both hold words of the clip before, as their text does); on the talk and the
    conversation 14 of 187, 7 narrowed. faster-whisper's ``vad_filter`` gets the same by decoding the
    speech alone. A segment over no VAD speech (a voice too quiet for it) keeps Whisper's times."""
    ends = [e for _, e in speech]  # the spans are apart and in order: their ends rise too
    for seg in segments:
        if seg.words:
            seg.start, seg.end = seg.words[0].start, seg.words[-1].end
            continue
        first = bisect.bisect_right(ends, seg.start)  # the first span ending after the segment starts
        last = bisect.bisect_left(speech, (seg.end,), lo=first) - 1  # the last one starting before it ends
        if first <= last:
            seg.start, seg.end = max(seg.start, speech[first][0]), min(seg.end, speech[last][1])
    return segments
