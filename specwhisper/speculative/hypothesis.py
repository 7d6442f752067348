"""Drafting from the previous hypothesis: live transcription re-decodes a growing buffer every
second, and what it decoded a second ago is an almost perfect draft of what it decodes now.

Prompt lookup (``specwhisper.speculative.lookup.PromptLookup``) over one source, the previous
decode's token ids, with a pointer that follows where the output is in it. Two differences from the
copy drafter of the post-edit (``CopyDrafter``), both measured on re-decodes of a growing buffer:

- the place is searched only near where it should be (the pointer moved on by the tokens generated
  since), not anywhere: the two hypotheses differ in a few words ("Sin atra" / "S int ra", "to" /
  "To"), and after such a word the copy drafter's nearest-occurrence search jumped to an earlier
  " and" or " To" of the source and drafted its continuation, rejected at once;
- where the output has left the source (a changed word), the drafter still drafts a few tokens from
  the expected place: after a one-word substitution the source's words follow again.

Every timestamp token is one key when matching: the timestamps of a re-decode move (the last
segment's end follows the growing audio), so matched by id they would lose the place at every
segment boundary; matched as "a timestamp", the drafted timestamp is rejected where it moved and
the text after it is drafted again at once. Model-independent: the only model fact is where
timestamp ids begin.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from specwhisper.speculative.drafter import Drafter
from specwhisper.speculative.lookup import PromptLookup

TIMESTAMP_KEY = "<|t|>"
SEARCH_WINDOW = 8  # tokens either side of the expected place where the context's last tokens may match
UNSYNCED_DRAFT = 4  # tokens drafted from the expected place when the output's last tokens are not in the source


class HypothesisDrafter(Drafter):
    """Drafts a re-decode from the previous decode's tokens (``set_source`` before each decode);
    a batch of one. ``timestamp_begin``: the first timestamp token id (all ids from it are times)."""

    name = "previous-hypothesis"

    def __init__(self, timestamp_begin: int, max_ngram: int = 3):
        self.timestamp_begin = timestamp_begin
        self.max_ngram = max_ngram
        self.lookup = PromptLookup(max_ngram, 1)
        self.set_source([])

    def _key(self, tok: int) -> Hashable:
        return TIMESTAMP_KEY if tok >= self.timestamp_begin else tok

    def set_source(self, tokens: Sequence[int]) -> None:
        """The draft source of the next decode (the previous decode's tokens, end-of-text excluded)."""
        self.src = [int(t) for t in tokens]
        self.keys = [self._key(t) for t in self.src]
        self.pointer = 0  # the source index expected to follow the output
        self.synced = True
        self._seen = 0

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        if len(contexts) != 1:
            raise ValueError(f"a previous-hypothesis drafter drafts for one sequence, got a batch of {len(contexts)}")
        return [self._draft(contexts[0], ks[0])]

    def _draft(self, generated: Sequence[int], k: int) -> list[int]:
        if len(generated) > self._seen:
            self.pointer += len(generated) - self._seen  # as if the new tokens followed the source
            self._seen = len(generated)
            keys = [self._key(t) for t in generated[-self.max_ngram :]]
            self.synced = False
            for gram in self.lookup.grams(keys):
                hits = [e for e in self.lookup.ends(gram, self.keys) if abs(e - self.pointer) <= SEARCH_WINDOW]
                if hits:
                    self.pointer = min(hits, key=lambda e: (abs(e - self.pointer), -e))
                    self.synced = True
                    break
        draft = self.src[self.pointer : self.pointer + k]
        return draft if self.synced else draft[:UNSYNCED_DRAFT]


def rebase_tokens(tokens: Sequence[int], timestamp_begin: int, cut_frames: int) -> list[int]:
    """``tokens`` of a decode whose buffer now starts ``cut_frames`` timestamp steps (20 ms) later:
    the text of the segments that ended by the cut is dropped, the remaining timestamps move back
    by the cut. Only a draft source: a wrong guess costs speed, never exactness."""
    out: list[int] = []
    keep = False
    for t in tokens:
        if t >= timestamp_begin:
            shifted = t - cut_frames
            if shifted >= timestamp_begin:
                keep = True
                out.append(shifted)
        elif keep:
            out.append(t)
    return out
