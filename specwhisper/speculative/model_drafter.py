"""A smaller model drafting greedily: the loop every model drafter shares.

Per round and row: the target's tokens are mapped to the drafter's vocabulary (:mod:`.token_map`)
after the drafter's own prefix; the drafter's KV cache keeps the longest common prefix with what
it was fed before (rejected drafts and re-tokenised text roll back) and is fed the rest in one pass;
it then drafts up to ``k`` tokens greedily, one step per token, and the draft is mapped back.
The model calls are a :class:`DraftRuntime`, one adapter per kind of model: a Whisper decoder with
its static per-row cache (``specwhisper.asr.drafters.model``), a causal LM with a ``DynamicCache``
(``specwhisper.postedit.drafters``).
"""

from __future__ import annotations

from typing import Protocol

from specwhisper.speculative.drafter import Drafter, common_prefix
from specwhisper.speculative.token_map import TokenMap


class DraftRuntime(Protocol):
    """The model calls of a model drafter, for the rows of the current batch."""

    def feed(self, feeds: list[list[int]], starts: list[int]) -> None:
        """Roll row i's cache back to ``starts[i]`` tokens and feed it ``feeds[i]`` (one batched pass);
        each row's last token's state is the next draft step's."""
        ...

    def pick(self, rows: list[int], prefixes: list[list[int]]) -> tuple[list[int], list[float]]:
        """The greedy next token of each of ``rows`` and its log-probability (``prefixes``: each
        row's drafter tokens after its prefix, for models whose logit rules read them)."""
        ...

    def step(self, rows: list[int], tokens: list[int], positions: list[int]) -> None:
        """Feed one token to each of ``rows`` at ``positions`` (the other rows stay where they are)."""
        ...

    def stops(self, token: int, logprob: float, length: int) -> bool:
        """True when a row's draft ends after ``token`` (its drafter sequence now ``length`` long)."""
        ...

    def room(self, length: int) -> bool:
        """True while a row of ``length`` drafter tokens may grow."""
        ...


class ModelDrafter(Drafter):
    """Drafts greedily with a ``DraftRuntime``; ``prefix`` is what the drafter sees before the target's
    generated tokens (its own prompt), ``token_map`` maps between the two vocabularies."""

    name = "model"

    def __init__(self, runtime: DraftRuntime, token_map: TokenMap, prefix: list[int] | None = None):
        self.runtime = runtime
        self.map = token_map
        self.prefix = list(prefix or [])
        self.fed: list[list[int]] = []  # per row: the drafter tokens whose state is in its cache

    def reset(self, rows: int) -> None:
        """A new batch of ``rows`` rows with empty caches."""
        self.fed = [[] for _ in range(rows)]

    def select(self, keep: list[int]) -> None:
        self.fed = [self.fed[i] for i in keep]

    def end(self) -> None:
        self.fed = []

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        if len(self.fed) != len(contexts):
            self.reset(len(contexts))
        rt = self.runtime
        seqs = [self.prefix + self.map.to_draft(c) for c in contexts]
        # always feed at least the last token: its state starts the draft
        starts = [min(common_prefix(f, s), len(s) - 1) for f, s in zip(self.fed, seqs)]
        rt.feed([s[c:] for s, c in zip(seqs, starts)], starts)
        self.fed = [list(s) for s in seqs]

        drafts: list[list[int]] = [[] for _ in seqs]
        live = [i for i, k in enumerate(ks) if k > 0 and rt.room(len(seqs[i]))]
        while live:
            toks, lps = rt.pick(live, [seqs[i][len(self.prefix) :] + drafts[i] for i in live])
            nxt = []
            for j, i in enumerate(live):
                drafts[i].append(toks[j])
                length = len(seqs[i]) + len(drafts[i])
                if len(drafts[i]) < ks[i] and not rt.stops(toks[j], lps[j], length) and rt.room(length):
                    nxt.append(i)
            if not nxt:
                break
            rt.step(nxt, [drafts[i][-1] for i in nxt], [len(seqs[i]) + len(drafts[i]) - 1 for i in nxt])
            for i in nxt:
                self.fed[i].append(drafts[i][-1])
            live = nxt
        return [self.map.to_target(c, d) if d else [] for c, d in zip(contexts, drafts)]
