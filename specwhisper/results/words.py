"""Words of a transcript as text: their comparison form, the text of a run of them, a segment's words spread
over its time when it has none timed, and sentences (where one ends; a segment's words as one segment per
sentence, WhisperX's ``--segment_resolution sentence``).

A sentence ends at a word ending in . ! ? (or their full-width forms), closing quotes and brackets
after it allowed, except where a full stop is not an end: an ellipsis, an initial ("J."), a dotted
abbreviation ("e.g.", "U.S."), a title ("Dr."), or a stop followed by a word in lower case ("3 p.m. and").
WhisperX splits with nltk's Punkt model, whose data is a download; these rules need none.
"""

from __future__ import annotations

import re
from dataclasses import replace

from specwhisper.results.transcript import Segment, Word

SENTENCE_END = ".。!！?？"
# openai-whisper's punctuation marks a word timestamp attaches to the word after (prepended) or before (appended)
PREPEND_PUNCTUATIONS = "\"'“¿([{-"
APPEND_PUNCTUATIONS = "\"'.。,，!！?？:：”)]}、"
CLOSERS = "\"'”’»)]」』"
TITLES = frozenset("mr mrs ms dr prof st jr sr vs mt no fig gen gov sen rep lt col capt sgt rev hon".split())


def word_key(w: str) -> str:
    """Comparison form of a word: lower case, letters and digits only."""
    return re.sub(r"[\W_]+", "", w.lower())


def spread_words(seg: Segment) -> list[tuple[float, float, str]]:
    """A segment's words (its text split at spaces), each given an equal share of its time: for a segment
    without word timestamps, where only which segment or window a word falls in matters."""
    pieces = seg.text.split()
    step = (seg.end - seg.start) / max(1, len(pieces))
    return [(seg.start + k * step, seg.start + (k + 1) * step, p) for k, p in enumerate(pieces)]


def join_words(words: list[Word]) -> str:
    """The text of Whisper-style words (each carries its own leading space), with one leading space."""
    text = "".join(w.text for w in words)
    return text if text.startswith(" ") else " " + text


def _ends_before(word: str, following: str) -> bool:
    """Whether a sentence ends after ``word``, ``following`` being the next word."""
    t = word.strip().rstrip(CLOSERS)
    if not t or t[-1] not in SENTENCE_END:
        return False
    if t[-1] != ".":
        return True
    stem = t[:-1].lstrip("\"'“‘«([")
    if stem.endswith(".") or "." in stem or stem.lower() in TITLES or (len(stem) == 1 and stem.isalpha()):
        return False
    first = next((ch for ch in following if ch.isalnum()), "")
    return not first.islower()


def split_sentences(segments: list[Segment]) -> list[Segment]:
    """Each segment with words as one segment per sentence in it: a piece runs from its first word's start
    to its last word's end (the segment's own start and end at its two ends), keeps the window's facts
    (``seek``, ``avg_logprob``, ...) and has no tokens of its own. A segment without words (no word
    timestamps) or with one sentence comes back as it is."""
    out: list[Segment] = []
    for seg in segments:
        words = seg.words
        out += split_at(seg, [i + 1 for i in range(len(words) - 1) if _ends_before(words[i].text, words[i + 1].text)])
    return out


def split_at(seg: Segment, cuts: list[int]) -> list[Segment]:
    """``seg`` cut before each of its words whose index is in ``cuts`` (increasing, inside the words): each
    piece runs from its first word's start to its last word's end (the segment's own start and end at its two
    ends), keeps the window's facts and has no tokens of its own; no cuts: ``[seg]``."""
    if not cuts:
        return [seg]
    words, out = seg.words, []
    bounds = [0, *cuts, len(words)]
    for n, (a, b) in enumerate(zip(bounds, bounds[1:])):
        group = words[a:b]
        start = seg.start if n == 0 else group[0].start
        end = seg.end if b == len(words) else group[-1].end
        out.append(replace(seg, start=start, end=max(end, start), text=join_words(group), words=group, tokens=[]))
    return out
