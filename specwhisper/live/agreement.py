"""LocalAgreement-2 (Macháček et al., 2023, whisper_streaming's ``HypothesisBuffer``): a word is
confirmed when two consecutive hypotheses of the growing buffer agree on it and on every word
before it.

Why words with times (``specwhisper.asr.decoding.alignment``) and not segments: the buffer still holds the
audio of words confirmed earlier, so every new hypothesis repeats them; only their times tell which
words of a new hypothesis are already out (a word starting before the last confirmed end, less
0.1 s, is dropped), and Whisper's segment times are too coarse for that (a segment spans 3-10 s).
A word's end time is also what its latency is measured from.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specwhisper.results.transcript import Word
from specwhisper.results.words import word_key

TIME_SLACK_S = 0.1  # a new word starting this much before the last confirmed end is still new
REPEAT_WINDOW_S = 1.0  # ... and if it starts this close to it, it may repeat the confirmed tail
MAX_REPEAT = 5  # n-gram length checked for such repeats (whisper_streaming's value)
# A run of this many words of no duration is text the alignment found no audio for: Whisper repeating
# a sentence at the buffer's end. On bench/streaming.py's file (0.5 s pieces) two hypotheses in a row
# ended "... feathers and can fly. Many people don't think about them ... can fly." with the repeat's
# 15 words all at 36.64 s, and the repeat was confirmed (160 words against the plain engine's 145).
SQUEEZED_RUN = 3
SQUEEZED_S = 0.02


def before_squeezed_run(words: list[Word]) -> list[Word]:
    """``words`` up to the first run of ``SQUEEZED_RUN`` words shorter than ``SQUEEZED_S`` each. The run's first
    word stays when it starts where the word before it ends and the next one starts later: it is the last word
    of the speech, squeezed against the audio's end, and the repeat follows at its own instant. tiny.en on
    jfk's last 2.84 s: "... your country" with "country" at 2.04-2.04 s, right after "your", then the sentence
    again from 2.84 s; the run counted from "country" dropped it, and the stream ended "... for your". A word
    alone in a pause before the run (base: "Montreal" at 4.0 s, 1.5 s after the one it repeats) still goes."""
    run = 0
    for i, w in enumerate(words):
        run = run + 1 if w.end - w.start < SQUEEZED_S else 0
        if run == SQUEEZED_RUN:
            cut = i + 1 - run
            last = cut > 0 and words[cut].start - words[cut - 1].end < SQUEEZED_S <= words[cut + 1].start - words[cut].end
            return words[: cut + 1] if last else words[:cut]
    return words


# Two hypotheses agree on a word when they agree on it but for case and punctuation (``word_key``,
# the post-edit guard's comparison form). whisper_streaming compares words as written, which held
# back a word while Whisper still hesitated over the comma or full stop after it (the next hypothesis
# writes "there," where the last wrote "there."): measured on bench/streaming.py's file (CPU clock),
# p50 / p90 latency 5.09 / 10.74 -> 3.86 / 6.91 s. The confirmed word is the newer hypothesis's.


def same_words(a: list[Word], b: list[Word]) -> bool:
    """The same words as written: a repeat of confirmed words at a new hypothesis's start (``insert``)
    must match exactly, or a second "ask" after a confirmed "ask," would be taken for a repeat."""
    return [w.text.strip() for w in a] == [w.text.strip() for w in b]


@dataclass
class LocalAgreement:
    """The uncommitted tail of the last hypothesis and the confirmed words still inside the buffer."""

    last_time: float = 0.0  # end of the last confirmed word (absolute seconds)
    in_buffer: list[Word] = field(default_factory=list)  # confirmed words whose audio is still buffered
    tail: list[Word] = field(default_factory=list)  # the last hypothesis past the confirmed words
    new: list[Word] = field(default_factory=list)

    def insert(self, words: list[Word]) -> None:
        """A new hypothesis (absolute times): keep the words after the confirmed ones. They are found
        by the confirmed tail's words where the hypothesis has them, near the last confirmed end (but
        for case and punctuation); by time only where it does not. Times alone lost words: Whisper
        gave "Americans." the pause after it (ending at 2.26 s), the next hypotheses ended it at 2.08 s
        and started "ask" there, before the last confirmed end, so "ask" was dropped and "not" confirmed
        after it (jfk in 0.5 s pieces)."""
        after = self._after_confirmed_words(words)
        if after is not None:
            self.new = after
            return
        self.new = [w for w in words if w.start > self.last_time - TIME_SLACK_S]
        if self.new and self.in_buffer and abs(self.new[0].start - self.last_time) < REPEAT_WINDOW_S:
            # the hypothesis may still start with the last confirmed words: drop the longest repeat
            for n in range(min(len(self.in_buffer), len(self.new), MAX_REPEAT), 0, -1):
                if same_words(self.in_buffer[-n:], self.new[:n]):
                    self.new = self.new[n:]
                    break

    def _after_confirmed_words(self, words: list[Word]) -> list[Word] | None:
        """The words after the longest run (up to ``MAX_REPEAT``) of the last confirmed words that
        ``words`` repeat ending within ``REPEAT_WINDOW_S`` of the last confirmed end, the closest such
        run; None when there is none."""
        keys = [word_key(w.text) for w in words]
        for n in range(min(len(self.in_buffer), MAX_REPEAT), 0, -1):
            tail = [word_key(w.text) for w in self.in_buffer[-n:]]
            ends = [i + n for i in range(len(words) - n + 1)
                    if keys[i : i + n] == tail and abs(words[i + n - 1].end - self.last_time) < REPEAT_WINDOW_S]
            if ends:
                return words[min(ends, key=lambda e: abs(words[e - 1].end - self.last_time)) :]
        return None

    def flush(self) -> list[Word]:
        """Confirm the longest common prefix of the last two hypotheses (the new one's words and times)."""
        commit: list[Word] = []
        while self.new and self.tail and word_key(self.new[0].text) == word_key(self.tail[0].text):
            w = self.new.pop(0)
            self.tail.pop(0)
            commit.append(w)
            self.last_time = max(self.last_time, w.end)
        self.tail, self.new = self.new, []
        self.in_buffer.extend(commit)
        return commit

    def confirm_tail(self) -> list[Word]:
        """Confirm the last hypothesis's unconfirmed words as they are (the stream ends with them)."""
        commit, self.tail = self.tail, []
        if commit:
            self.last_time = max(self.last_time, commit[-1].end)
        self.in_buffer.extend(commit)
        return commit

    def drop_before(self, time: float) -> None:
        """The buffer now starts at ``time``: forget the words whose audio is gone."""
        self.in_buffer = [w for w in self.in_buffer if w.end > time + 1e-6]  # a cut at a word's end drops it
        self.tail = [w for w in self.tail if w.start >= time]

    def pending(self) -> list[Word]:
        """The last hypothesis's unconfirmed words (the partial text; flushed at the end of the stream)."""
        return list(self.tail)
