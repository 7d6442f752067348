"""Subtitle layout: openai-whisper's ``--max_line_width``, ``--max_line_count``, ``--max_words_per_line``
and ``--highlight_words`` for srt and vtt.

The cues are those of openai-whisper's ``SubtitlesWriter.iterate_result`` (whisper/utils.py, release
20250625) run on our json: ``tests/test_subtitles.py`` checks that its writer, given the same options
and our json, writes our srt and vtt byte for byte. In short:

- Cues are built from the words (their times as the json holds them, to the millisecond): a cue runs
  from its first word's start to its last word's end.
- ``max_line_width``: a line breaks before the word that would take it past this many characters
  (a word counts with its leading space, a line's first word without it).
- ``max_line_count`` (with ``max_line_width``): a cue holds at most this many lines, and a pause of
  more than 3 s between words starts a new cue; segments no longer bound cues. Without both options,
  each segment is cut into cues of its own.
- ``max_words_per_line``: each segment is cut into runs of at most this many words, each run starting
  a new cue.

Combinations that openai-whisper accepts and then ignores are refused with a one-line error: a line
count without a width, and words per line with both a width and a line count.
- ``highlight_words``: one cue per word with that word underlined (``<u>word</u>``), and the cue's
  text without underline over the gaps between words.

Two additions that openai-whisper, which knows no speakers, cannot have: a diarized transcript's cue
starts with WhisperX's ``[SPEAKER_00]: `` label (the speaker of its first word's segment), and a cue
never spans two speakers' segments. ``-->`` in a word is written ``->``, as in segment cues, so that a
cue cannot end early.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from specwhisper.results.transcript import Segment

LONG_PAUSE_S = 3.0  # openai-whisper: a longer pause between words starts a new cue (with a line count)
UNLIMITED = 1000  # openai-whisper's stand-in for an option not given
_UNDERLINE = re.compile(r"^(\s*)(.*)$")


@dataclass(frozen=True)
class SubtitleOptions:
    """How srt and vtt cues are laid out; all unset: one cue per segment, at the segment's times."""

    max_line_width: int | None = None  # characters in a line before it breaks
    max_line_count: int | None = None  # lines in a cue (needs max_line_width)
    max_words_per_line: int | None = None  # words in a cue
    highlight_words: bool = False  # underline each word as it is spoken

    @property
    def active(self) -> bool:
        """Whether cues are laid out from the words (and so whether word timestamps are needed)."""
        return self.highlight_words or any(
            v is not None for v in (self.max_line_width, self.max_line_count, self.max_words_per_line))

    def validate(self) -> None:
        """Raises ValueError with a one-line message."""
        for name in ("max_line_width", "max_line_count", "max_words_per_line"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name.replace('_', '-')} must be a whole number, got {value!r}")
            if value < 1:
                raise ValueError(f"{name.replace('_', '-')} must be >= 1, got {value}")
        if not isinstance(self.highlight_words, bool):
            raise ValueError(f"highlight-words must be true or false, got {self.highlight_words!r}")
        if self.max_line_count is not None and self.max_line_width is None:
            raise ValueError("max-line-count needs max-line-width (lines only break at a width)")
        if self.max_words_per_line is not None and self.max_line_width is not None and self.max_line_count is not None:
            raise ValueError("max-words-per-line has no effect with both max-line-width and max-line-count; drop one of them")


@dataclass
class _Word:
    start: float  # as the json holds it: rounded to the millisecond
    end: float
    text: str
    speaker: str | None


def _words(segments: list[Segment], max_words: int) -> Iterator[tuple[int, _Word]]:
    """Each segment's words, numbered from 0 again at the start of each run of ``max_words`` words."""
    for seg in segments:
        for k, w in enumerate(seg.words):
            yield k % max_words, _Word(round(w.start, 3), round(w.end, 3), w.text, seg.speaker)


def layout(segments: list[Segment], opts: SubtitleOptions) -> Iterator[list[_Word]]:
    """The words of each cue; a word that starts a line after the first holds a leading newline."""
    preserve_segments = opts.max_line_count is None or opts.max_line_width is None
    width = opts.max_line_width or UNLIMITED
    line_len, line_count = 0, 1
    cue: list[_Word] = []
    last = next((round(w.start, 3) for s in segments for w in s.words), round(segments[0].start, 3) if segments else 0.0)
    for i, word in _words(segments, opts.max_words_per_line or UNLIMITED):
        long_pause = not preserve_segments and word.start - last > LONG_PAUSE_S
        has_room = line_len + len(word.text) <= width
        run_break = i == 0 and bool(cue) and preserve_segments
        speaker_break = bool(cue) and word.speaker != cue[-1].speaker
        if line_len > 0 and has_room and not long_pause and not run_break and not speaker_break:
            line_len += len(word.text)  # the line goes on
        else:  # a new line
            word.text = word.text.strip()
            if cue and (opts.max_line_count is not None and (long_pause or line_count >= opts.max_line_count)) or run_break or speaker_break:
                yield cue  # ... in a new cue
                cue, line_count = [], 1
            elif line_len > 0:
                line_count += 1
                word.text = "\n" + word.text
            line_len = len(word.text.strip())
        cue.append(word)
        last = word.start
    if cue:
        yield cue


def word_cues(segments: list[Segment], opts: SubtitleOptions, clock) -> Iterator[tuple[str, str, str]]:
    """(start, end, text) of each cue, times written by ``clock(seconds)``."""
    for cue in layout(segments, opts):
        label = f"[{cue[0].speaker}]: " if cue[0].speaker is not None else ""
        texts = [w.text.replace("-->", "->") for w in cue]
        whole = label + "".join(texts)
        start, end = clock(cue[0].start), clock(cue[-1].end)
        if not opts.highlight_words:
            yield start, end, whole
            continue
        last = start
        for j, w in enumerate(cue):
            a, b = clock(w.start), clock(w.end)
            if last != a:
                yield last, a, whole
            underlined = _UNDERLINE.sub(r"\1<u>\2</u>", texts[j])
            yield a, b, label + "".join(texts[:j] + [underlined] + texts[j + 1 :])
            last = b
