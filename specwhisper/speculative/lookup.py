"""Prompt-lookup drafting: propose what followed the latest tokens where they occurred before.

One matcher (:class:`PromptLookup`), drafters over it that differ only in where they look:
- :class:`NgramDrafter` (Whisper ``--draft ngram``): the row's own tokens and the other rows of the
  batch (neighbouring chunks of the same audio), latest occurrence first, exact token ids;
- :class:`CopyDrafter` (post-edit ``copy``): one fixed source text (the transcript being edited),
  the occurrence nearest to where the output is in the source, optionally on normalised token text
  so that casing/punctuation edits do not lose the place. It and the live transcription's
  ``specwhisper.speculative.hypothesis.HypothesisDrafter`` are subclasses of :class:`SourceCopyDrafter`.
All cost no model pass.
"""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

from specwhisper.speculative.drafter import Drafter


@dataclass(frozen=True)
class PromptLookup:
    """Finds the last ``n`` keys of a context (n = ``max_ngram`` .. ``min_ngram``) in a pool."""

    max_ngram: int = 3
    min_ngram: int = 1

    def grams(self, context: Sequence[Hashable]) -> Iterator[list[Hashable]]:
        """The context's suffixes to look for, longest first."""
        for n in range(min(self.max_ngram, len(context)), self.min_ngram - 1, -1):
            yield list(context[-n:])

    @staticmethod
    def ends(gram: list[Hashable], pool: list[Hashable], last_end: int | None = None) -> Iterator[int]:
        """End positions (<= ``last_end``) of the occurrences of ``gram`` in ``pool`` (lists), latest first."""
        n = len(gram)
        last_end = len(pool) if last_end is None else last_end
        for s in range(last_end - n, -1, -1):
            if pool[s] == gram[0] and pool[s : s + n] == gram:
                yield s + n

    def follow(self, gram: list[Hashable], keys: list[Hashable], tokens: Sequence[int], k: int,
               last_end: int | None = None) -> list[int]:
        """Up to ``k`` of ``tokens`` after the latest occurrence of ``gram`` in ``keys`` (the key of
        each of ``tokens``) that ends by ``last_end`` and has tokens after it; [] when there is none."""
        for end in self.ends(gram, keys, last_end):
            if end < len(tokens):
                return list(tokens[end : end + k])
        return []


class NgramDrafter(Drafter):
    """Prompt lookup over the batch: the latest earlier occurrence of the row's last n tokens in its
    own tokens, else in the other rows, and what followed it."""

    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.lookup = PromptLookup(max_ngram, min_ngram)

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return [self._draft(i, contexts, k) if k > 0 else [] for i, k in enumerate(ks)]

    def _draft(self, row: int, contexts: list[list[int]], k: int) -> list[int]:
        ctx = contexts[row]
        pools = [ctx] + [c for j, c in enumerate(contexts) if j != row]
        for gram in self.lookup.grams(ctx):
            for pool in pools:  # in its own tokens the suffix itself does not count
                cont = self.lookup.follow(gram, pool, pool, k, len(pool) - (1 if pool is ctx else 0))
                if cont:
                    return cont
        return []


_PUNCT_ONLY = re.compile(r"^[\W_]*$")


def normalised_key(text: str) -> str:
    """Case- and space-insensitive form of one token's text ('' for punctuation/space only)."""
    t = text.strip().lower()
    return "" if _PUNCT_ONLY.match(t) else re.sub(r"[\W_]+", "", t)


class SourceCopyDrafter(Drafter):
    """Drafts by copying one source sequence; a batch of one. A pointer follows where the output is in
    the source: after each round the output's last keys (``_tail_keys``) are matched against the
    source's keys, choosing the occurrence nearest to the pointer (ties go forward), and the draft is
    the next ``k`` source tokens. Subclasses set how the place is found:

    - ``advance``: move the pointer on by the tokens generated since, before searching (the output is
      expected to follow the source);
    - ``window``: only matches this close to the pointer count (None: anywhere);
    - ``unsynced_draft``: tokens still drafted from the pointer when the output's last keys are not in
      the source (0: none).
    """

    advance = False
    window: int | None = None
    unsynced_draft = 0

    def __init__(self, max_ngram: int = 3):
        self.max_ngram = max_ngram
        self.lookup = PromptLookup(max_ngram, 1)

    def _key(self, tok: int) -> Hashable:
        return tok

    def _tail_keys(self, generated: Sequence[int]) -> list[Hashable]:
        return [self._key(t) for t in generated[-self.max_ngram :]]

    def set_source(self, tokens: Sequence[int]) -> None:
        """The sequence to copy from; the pointer starts at its beginning."""
        self.src = [int(t) for t in tokens]
        self.keys = [self._key(t) for t in self.src]
        self.pointer = 0  # the source index expected to follow the output
        self.synced = True  # the output's last keys were found in the source
        self._seen = 0

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        if len(contexts) != 1:
            raise ValueError(f"a {self.name} drafter drafts for one sequence, got a batch of {len(contexts)}")
        return [self._draft(contexts[0], ks[0])]

    def _draft(self, generated: Sequence[int], k: int) -> list[int]:
        if len(generated) > self._seen:
            if self.advance:
                self.pointer += len(generated) - self._seen  # as if the new tokens followed the source
            self._seen = len(generated)
            keys = self._tail_keys(generated)
            if keys:
                self.synced = False
            for gram in self.lookup.grams(keys):
                hits = [e for e in self.lookup.ends(gram, self.keys)
                        if self.window is None or abs(e - self.pointer) <= self.window]
                if hits:
                    self.pointer = min(hits, key=lambda e: (abs(e - self.pointer), -e))
                    self.synced = True
                    break
        draft = self.src[self.pointer : self.pointer + k]
        return draft if self.synced else draft[: self.unsynced_draft]


class CopyDrafter(SourceCopyDrafter):
    """Drafts by copying a source text (post-editing repeats most of its input); a batch of one.

    The source is tokenised once with the target tokenizer; after it, the drafter proposes the
    end-of-turn token(s). ``normalise``: match on lower-cased token text without punctuation ("If"/
    " if" or an inserted comma keep the place); else on ids. Where the output is not in the source it
    drafts nothing: the model is writing words that are not in the source, a draft would be rejected,
    and on CPU a 2-token verify pass costs ~1.7 single steps, so it decodes plainly until it copies again.
    """

    name = "copy"

    def __init__(self, tokenizer, source_text: str, end_ids: Sequence[int] = (), max_ngram: int = 3,
                 normalise: bool = True):
        super().__init__(max_ngram)
        self.tokenizer = tokenizer
        self.normalise = normalise
        self._key_cache: dict[int, Hashable] = {}
        self.set_source(list(tokenizer.encode(source_text, add_special_tokens=False)) + [int(e) for e in end_ids])

    def _key(self, tok: int) -> Hashable:
        if not self.normalise:
            return tok
        k = self._key_cache.get(tok)
        if k is None:
            k = self._key_cache[tok] = normalised_key(self.tokenizer.decode([tok]))
        return k

    def _tail_keys(self, generated: Sequence[int]) -> list[Hashable]:
        keys = [self._key(t) for t in generated[-self.max_ngram * 3 :]]
        return [x for x in keys if x != ""]  # punctuation does not move the pointer
