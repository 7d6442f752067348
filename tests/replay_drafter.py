"""Drafters whose choices replay known continuations at a chosen per-token acceptance: random-weight
models agree with nothing, so the speculative loop's accept path (rows accepting different lengths,
a drafter's cache rolled back, a row ending inside a draft) is driven this way in the tests and the
large-shape benches. The drafter still runs its real draft steps (its caches hold what it proposed,
as a real drafter's would); only its greedy choice is replaced where it is made."""

from __future__ import annotations

import random

from specwhisper.asr.drafters.ngram import WhisperNgramDrafter
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter
from specwhisper.hardware.device import on_device


class Replay:
    """The next draft token after a prefix: a reference's own with probability ``acceptance`` while the
    prefix follows one of ``references`` (rows of a batch, each its own), else a wrong one. A prefix two
    references share takes the first one's next token (the other row's draft is then rejected there)."""

    def __init__(self, references: list[list[int]], acceptance: float, text_tokens: int, seed: int = 0):
        self.a, self.text = acceptance, text_tokens
        self.rng = random.Random(seed)
        self.next_of: dict[tuple[int, ...], int] = {}
        for ref in references:
            for p in range(len(ref)):
                self.next_of.setdefault(tuple(ref[:p]), ref[p])

    def next(self, prefix: list[int]) -> int:
        right = self.next_of.get(tuple(prefix))
        if right is not None and self.rng.random() < self.a:
            return right
        return ((right or 0) + 1) % self.text


def replaying(drafter, replay: Replay):
    """``drafter`` (a model drafter or an early-exit one) choosing the replay's tokens. The replay's
    prefixes are in the drafter's vocabulary: for one of another vocabulary, give references mapped
    with its token map (``drafter.map.to_draft``). The drafter's own choice still runs (its head and
    rules), then gives way to the replay's, which the host knows without reading the device."""
    if isinstance(drafter, EarlyExitDrafter):
        eot, dev, hooks = drafter.vocab.eot, drafter.rt.device, drafter
    else:
        eot, dev, hooks = drafter.m.special.eot, drafter.m.runtime.device, drafter.runtime
    # the drafter's own hooks, kept at the first replay (a drafter is re-pointed at each new replay)
    real_start, real_pick = hooks.__dict__.setdefault("_own_hooks", (hooks.start, hooks.pick))
    seen: dict[int, list[int]] = {}

    def start(rows, prefixes, *rest):
        real_start(rows, prefixes, *rest)
        seen.clear()
        seen.update((r, list(p)) for r, p in zip(rows, prefixes))

    def pick(*args):
        real_pick(*args)
        rows = args[-1]
        tokens = [replay.next(seen[r]) for r in rows]
        for r, t in zip(rows, tokens):
            seen[r].append(t)
        t = on_device(tokens, dev)  # a queued copy: torch.tensor(..., device=) would wait for the GPU
        return t, t == eot

    hooks.start, hooks.pick = start, pick
    return drafter


class ReplayLookup(WhisperNgramDrafter):
    """A drafter that runs no model (the n-gram lookup's kind, its cost a host lookup) proposing the
    replay's tokens: what a free drafter at that acceptance gives, the verify passes' cost alone."""

    def __init__(self, replay: Replay):
        super().__init__()
        self.replay = replay

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        drafts = []
        for context, k in zip(contexts, ks):
            d: list[int] = []
            for _ in range(k):
                d.append(self.replay.next(context + d))
            drafts.append(d)
        return drafts
