"""A smaller model drafting greedily: the loop every model drafter shares.

Per round and row: the target's tokens are mapped to the drafter's vocabulary (:mod:`.token_map`)
after the drafter's own prefix; the drafter's KV cache keeps the longest common prefix with what
it was fed before (rejected drafts and re-tokenised text roll back) and is fed the rest in one pass;
it then drafts up to ``k`` tokens greedily, one step per token, the tokens kept on the device until
the round's one read (:mod:`.draft_steps`), and the draft is mapped back.
The model calls are a :class:`DraftRuntime`, one adapter per kind of model: a Whisper decoder with
its static per-row cache (``specwhisper.asr.drafters.model``), a causal LM with a ``DynamicCache``
(``specwhisper.postedit.drafters``).
"""

from __future__ import annotations

from typing import Protocol

import torch

from specwhisper.hardware.device import on_device
from specwhisper.speculative.draft_steps import DraftSteps, Drafts, StepDrafts
from specwhisper.speculative.drafter import Drafter, common_prefix
from specwhisper.speculative.token_map import SameVocab, TokenMap


class DraftRuntime(Protocol):
    """The model calls of a model drafter, for the rows of the current batch. Tokens drafted within a
    round stay on the device (:mod:`.draft_steps`)."""

    def feed(self, feeds: list[list[int]], starts: list[int]) -> None:
        """Roll row i's cache back to ``starts[i]`` tokens and feed it ``feeds[i]`` (one batched pass);
        each row's last token's state is the next draft step's."""
        ...

    def start(self, rows: list[int], prefixes: list[list[int]]) -> None:
        """A round's drafting ``rows`` and their drafter tokens after the prefix (for models whose logit
        rules read them)."""
        ...

    def pick(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The greedy next token of each of ``rows`` (device [n]; ``rows`` shrink within a round, never
        grow) and whether that row's draft ends with it (device [n], nonzero: ends); or both for every
        row of the batch ([rows of the batch], the others' ignored)."""
        ...

    def step(self, rows: list[int], tokens: torch.Tensor, positions: list[int]) -> None:
        """Feed ``tokens`` (device [n], or :meth:`pick`'s of every row) to ``rows`` at ``positions`` (the
        other rows stay where they are)."""
        ...

    def space(self, length: int) -> int:
        """How many tokens a row of ``length`` drafter tokens may still draft."""
        ...


class ModelDrafter(Drafter):
    """Drafts greedily with a ``DraftRuntime``; ``prefix`` is what the drafter sees before the target's
    generated tokens (its own prompt), ``token_map`` maps between the two vocabularies."""

    name = "model"
    drafts_by_passes = True
    watch_stops = True  # learn of ended rows while drafting (``DraftSteps``)

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
        return self._round(contexts, ks).read()

    def draft(self, contexts: list[list[int]], ks: list[int]) -> Drafts:
        # drafts in the target's ids stay on the device; another vocabulary's are mapped on the host
        drafts = self._round(contexts, ks)
        return drafts if isinstance(self.map, SameVocab) else Drafts(drafts.read(), ks)

    def _round(self, contexts: list[list[int]], ks: list[int]) -> StepDrafts:
        """Sync the rows' caches and run the round's draft steps; the drafts stay on the device."""
        if len(self.fed) != len(contexts):
            self.reset(len(contexts))
        rt = self.runtime
        seqs = [self.prefix + self.map.to_draft(c) for c in contexts]
        # always feed at least the last token: its state starts the draft
        starts = [min(common_prefix(f, s), len(s) - 1) for f, s in zip(self.fed, seqs)]
        rt.feed([s[c:] for s, c in zip(seqs, starts)], starts)
        self.fed = [list(s) for s in seqs]

        steps = DraftSteps([max(0, min(k, rt.space(len(s)))) for k, s in zip(ks, seqs)], self.watch_stops)
        live = steps.first()
        if live:
            rt.start(live, [seqs[i][len(self.prefix) :] for i in live])
        stepped = [0] * len(seqs)  # per row: draft tokens fed to its cache
        while live:
            tokens, ends = rt.pick(live)
            go = steps.add(live, tokens, ends)
            if not go:
                break
            rows = [live[j] for j in go]
            if len(go) < len(live) and tokens.shape[0] < len(seqs):  # picks of the live rows only
                tokens = tokens[on_device(go, tokens.device)]
            rt.step(rows, tokens, [len(seqs[i]) + stepped[i] for i in rows])
            for i in rows:
                stepped[i] += 1
            live = rows

        def finish(picks: list[list[int]], drafts: list[list[int]]) -> list[list[int]]:
            self.fed = [s + p[:n] for s, p, n in zip(seqs, picks, stepped)]
            return [self.map.to_target(c, d) if d else [] for c, d in zip(contexts, drafts)]

        return StepDrafts(steps, finish)
