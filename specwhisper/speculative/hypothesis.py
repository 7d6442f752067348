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

Where the output has left the source altogether (nothing of it matches near the expected place),
the drafter looks in the output itself, as the n-gram drafter does: a re-decode that loops ("sense
with the only sense with the only ...") repeats its own last tokens, and it runs to the re-decode's
token cap. Measured on 40 s of the bench file in 0.5 s pieces (one thread, CPU clock): 4 of 39
re-decodes looped, 64-78 tokens each in 36-60 target passes, 4.2 s of the 16.6 s of speculative
decoding; the looping decodes are thrown away (they confirm nothing), so their passes are pure cost.
Only a match of ``OWN_NGRAM`` tokens or more counts: at the buffer's end (new speech) a one-token
match in the output drafts what followed an earlier " the", rejected at once.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from specwhisper.speculative.lookup import PromptLookup, SourceCopyDrafter

TIMESTAMP_KEY = "<|t|>"
SEARCH_WINDOW = 8  # tokens either side of the expected place where the context's last tokens may match
UNSYNCED_DRAFT = 4  # tokens drafted from the expected place when the output's last tokens are not in the source
OWN_NGRAM = 2  # the shortest run of the output's last tokens looked up in the output itself


class HypothesisDrafter(SourceCopyDrafter):
    """Drafts a re-decode from the previous decode's tokens (``set_source`` before each decode, the
    end-of-text excluded); a batch of one. ``timestamp_begin``: the first timestamp token id (all ids
    from it are times)."""

    name = "previous-hypothesis"
    advance = True
    window = SEARCH_WINDOW
    unsynced_draft = UNSYNCED_DRAFT

    def __init__(self, timestamp_begin: int, max_ngram: int = 3):
        super().__init__(max_ngram)
        self.timestamp_begin = timestamp_begin
        self.set_source([])
        self.own = PromptLookup(max_ngram, OWN_NGRAM)

    def _key(self, tok: int) -> Hashable:
        return TIMESTAMP_KEY if tok >= self.timestamp_begin else tok

    def _draft(self, generated: Sequence[int], k: int) -> list[int]:
        draft = super()._draft(generated, k)
        return draft if draft or self.synced else self._own_draft(generated, k)

    def _own_draft(self, generated: Sequence[int], k: int) -> list[int]:
        """What followed the latest earlier occurrence of the output's last tokens in the output."""
        keys = [self._key(t) for t in generated]
        for gram in self.own.grams(keys):  # the suffix itself does not count
            cont = self.own.follow(gram, keys, generated, k, len(keys) - 1)
            if cont:
                return cont
        return []


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
