"""``--draft auto``: speculate only where it pays, decided by measurement on this device.

Per batch size, the first batch times on its own encoder output a target step, verify passes of 2, 4
and 8 tokens and one draft step of each candidate drafter (the n-gram lookup; early exit where an
adapter for this target exists). With a drafter's per-token acceptance a and k drafts a round yields
(1 - a^(k+1)) / (1 - a) tokens (Leviathan et al.; k tokens at most for a drafter whose last draft is
checked rather than fed) for k draft steps and one verify pass; the candidate and k of the highest
expected tokens per second decode the batch, plain decoding unless a drafter beats it by ``MARGIN``.
After each speculative batch the drafter's acceptance estimate moves toward what it measured. Every
choice is exact, so the choice changes speed only.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field

import torch

from specwhisper.asr.decoding.greedy import Decoder, DecodeOutput, GreedyDecoder, Looping
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder
from specwhisper.hardware.device import on_device, synchronize

MARGIN = 1.10  # a drafter must be expected this much faster than plain decoding (timing noise)
# per-token: ngram and early-exit measured on the public set for base; distil-whisper drafters not measured
# here (no such weights on this machine), a starting guess that each speculative batch corrects
PRIOR_ACCEPTANCE = {"ngram": 0.10, "early-exit": 0.55, "distil": 0.7}
SMOOTHING = 0.3  # weight of a new batch's acceptance in the running estimate


@dataclass
class Costs:
    """Seconds of a target step, of verify passes by width, and of one draft step per candidate."""

    step: float
    verify: dict[int, float]
    draft: dict[str, float] = field(default_factory=dict)
    width: int | None = None  # the most tokens a verify pass holds (the fixed-shape mode's columns), None: any

    def most_drafts(self, bonus: bool, max_k: int = 8) -> int:
        """The most drafts a round can verify: ``max_k``, within the pass's width."""
        return max_k if self.width is None else min(max_k, self.width - (1 if bonus else 0))

    def verify_at(self, width: int) -> float:
        """A pass of ``width`` tokens (1: a step), interpolated over the measured widths (beyond them, the
        slope of the last two)."""
        # a pass of more tokens is never cheaper than one of fewer; a measurement saying so is noise
        # (a 16-core CPU timed large-v3's pass of 8 at 171 ms, of 7 at 168 ms and of 6 at 179 ms)
        table, most = {1: self.step}, self.step
        for w in sorted(self.verify):
            most = table[w] = max(most, self.verify[w])
        ws = sorted(table)
        if width in table:
            return table[width]
        lo = max(w for w in ws if w < width)
        hi = min((w for w in ws if w > width), default=None)
        if hi is None:
            lo, hi = ws[-2], ws[-1]
        return table[lo] + (table[hi] - table[lo]) * (width - lo) / (hi - lo)


def expected_speedup(costs: Costs, draft_step: float, acceptance: float, k: int, bonus: bool) -> float:
    """Tokens per second of speculation over plain decoding's, at per-token ``acceptance`` and ``k`` drafts."""
    a = min(max(acceptance, 0.0), 0.999)
    tokens = (1 - a ** (k + 1)) / (1 - a) if bonus else (1 - a**k) / (1 - a)
    seconds = k * draft_step + costs.verify_at(k + 1 if bonus else k)
    return tokens * costs.step / seconds


def best_possible(costs: Costs, draft_step: float, acceptance: float, bonus: bool, max_k: int = 8) -> float:
    """An upper bound of ``expected_speedup`` over k = 1..``max_k`` known before the passes wider than
    2 are timed: any pass of 2 or more tokens is taken to cost no more than the pass of 2."""
    a = min(max(acceptance, 0.0), 0.999)
    best = 0.0
    for k in range(1, costs.most_drafts(bonus, max_k) + 1):
        tokens = (1 - a ** (k + 1)) / (1 - a) if bonus else (1 - a**k) / (1 - a)
        width = k + 1 if bonus else k
        floor = costs.step if width <= 1 else max(costs.verify[2], costs.step)
        best = max(best, tokens * costs.step / (k * draft_step + floor))
    return best


def choose(costs: Costs, acceptance: dict[str, float], bonus: dict[str, bool], max_k: int = 8,
           margin: float = MARGIN) -> tuple[str | None, int, float]:
    """(candidate or None for plain decoding, k, expected speedup); a candidate must beat plain decoding
    by ``margin``."""
    best: tuple[str | None, int, float] = (None, 0, 0.0)
    for name, step in costs.draft.items():
        for k in range(1, costs.most_drafts(bonus[name], max_k) + 1):
            s = expected_speedup(costs, step, acceptance[name], k, bonus[name])
            if s > best[2]:
                best = (name, k, s)
    return best if best[2] >= margin else (None, 0, best[2])


def _seconds(fn, device: torch.device | str, reps: int = 2) -> float:
    """Median seconds of ``reps`` calls after one, each until ``device`` has done its work (about 10
    passes per batch size in all: ~0.5 s for base at batch 8 on this CPU, once per process)."""
    fn()
    out = []
    for _ in range(reps):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def family(name: str) -> str:
    """A candidate's kind for its prior acceptance: ngram, early-exit, distil (a distil-whisper model) or model."""
    head = name.split(":")[0]
    return head if head in ("ngram", "early-exit") else "distil" if "distil-" in name else "model"


class AutoDecoder(Decoder):
    def __init__(self, runtime, special, rules, candidates: dict[str, SpeculativeDecoder], notes: list[str] | None = None,
                 store=None):
        """``notes``: what the user should know of how the candidates were found (the distil drafter's);
        ``store``: where costs measured by an earlier process are kept (``cost_store.CostStore``), or None."""
        super().__init__(runtime, special, rules)
        self.store = store
        self.stored: set[int] = set()  # the batch sizes whose costs came from the store
        self.plain = GreedyDecoder(runtime, special, rules)
        self.candidates = candidates
        self.acceptance = {n: PRIOR_ACCEPTANCE.get(family(n), 0.3) for n in candidates}
        self.bonus = {n: d.drafter.bonus for n, d in candidates.items()}
        self.lookaheads = {n: d.lookahead for n, d in candidates.items()}  # each candidate's own policy
        self.costs: dict[int, Costs] = {}
        self.notes = list(notes or [])
        self.last_choice: tuple[str | None, int, float] | None = None
        self.choices: dict[int, tuple[str | None, int, float]] = {}  # the latest choice per batch size

    def summary(self) -> dict:
        """What auto weighed and chose per batch size, and why (the transcript's json carries it)."""
        return {"candidates": list(self.candidates), "notes": self.notes,
                "choices": {str(b): {"drafter": n or "none", "k": k, "expected_speedup": round(s, 3),
                                     "acceptance_estimate": round(self.acceptance[n], 3) if n else None,
                                     "costs": "stored" if b in self.stored else "measured"}
                            for b, (n, k, s) in sorted(self.choices.items())}}

    def describe(self) -> str:
        """One line for the CLI's summary: the choice per batch size, with the expected speed-up."""
        parts = [f"{n or 'plain'} at batch {b} ({'expected ' if n else 'best drafter expected '}{s:.2f}x"
                 f"{'' if n else f', under {MARGIN:.2f}x'}{', stored costs' if b in self.stored else ''})"
                 for b, (n, k, s) in sorted(self.choices.items())]
        return "; ".join(parts + self.notes)

    @torch.inference_mode()
    def measure(self, encoder_out: torch.Tensor, prompt: list[int], context: int = 24) -> Costs:
        """Costs at this batch size on a scratch cache of ``encoder_out`` (some 20 tokens in)."""
        rt, b, dev = self.rt, encoder_out.shape[0], self.rt.device
        cache = rt.new_cache(encoder_out, slack=13)
        seq = prompt + [220] * (context - len(prompt))
        rt.step(on_device([seq] * b, dev), torch.arange(len(seq), device=dev).expand(b, -1), cache)

        def verify(w):
            toks = torch.full((b, w), 220, device=dev)
            pos = torch.arange(context, context + w, device=dev).expand(b, -1)
            return lambda: rt.step(toks, pos, cache)

        costs = Costs(step=_seconds(verify(1), dev), verify={2: _seconds(verify(2), dev)}, width=cache.width)
        texts = [[220] * (context - len(prompt))] * b
        for name, dec in self.candidates.items():
            d = dec.drafter
            d.begin(encoder_out, prompt, None)
            d.attach(cache)
            try:
                d.propose(texts, [1] * b)  # syncs a model drafter's own cache
                costs.draft[name] = _seconds(lambda d=d: d.propose(texts, [1] * b), dev)
            finally:
                d.end()
        # The wider passes are the dearest to time (base at batch 8 on this CPU: 1.6 of the 3.8 s that
        # measuring took; 6.1 s of a 10-minute file's 74 went to measuring). Where no drafter would pay
        # at its running acceptance even if they cost no more than the pass of 2, they are not timed:
        # ``verify_at`` then follows the slope from 1 to 2 tokens (base at batch 8: 0.27 s for 9
        # tokens against 0.27 s measured for 8), should an estimate rise later.
        if any(best_possible(costs, costs.draft[n], self.acceptance[n], self.bonus[n]) >= MARGIN for n in self.candidates):
            costs.verify.update({w: _seconds(verify(w), dev) for w in (4, 8) if cache.width is None or w <= cache.width})
        return costs

    def with_rules(self, rules: WhisperLogitRules) -> AutoDecoder:
        """``Decoder.with_rules`` for the plain decoder and every candidate; the costs measured, the
        acceptance learned and the choices made stay shared."""
        if rules is self.rules:
            return self
        clone = super().with_rules(rules)
        clone.plain = self.plain.with_rules(rules)
        clone.candidates = {n: d.with_rules(rules) for n, d in self.candidates.items()}
        return clone

    def with_cap(self, max_new_tokens: int | None) -> AutoDecoder:
        """``Decoder.with_cap`` for the plain decoder and every candidate, shared as ``with_rules`` shares."""
        if max_new_tokens == self.max_new_tokens:
            return self
        clone = super().with_cap(max_new_tokens)
        clone.plain = self.plain.with_cap(max_new_tokens)
        clone.candidates = {n: d.with_cap(max_new_tokens) for n, d in self.candidates.items()}
        return clone

    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               looping: Looping | None = None) -> DecodeOutput:
        b = encoder_out.shape[0]
        if self.candidates and b not in self.costs:
            stored = self.store.get(b) if self.store is not None else None
            if stored is not None and set(stored.draft) == set(self.candidates):
                self.costs[b] = stored
                self.stored.add(b)
            else:
                self.costs[b] = self.measure(encoder_out, prompt)
                if self.store is not None:
                    self.store.put(b, self.costs[b])
        name, k, speedup = choose(self.costs[b], self.acceptance, self.bonus) if self.candidates else (None, 0, 1.0)
        self.last_choice = self.choices[b] = (name, k, speedup)
        if name is None:
            self.rt.whole_head()  # the early-exit candidate split it (measuring, or an earlier batch)
            return self.plain.decode(encoder_out, prompt, features, looping)
        dec = self.candidates[name]
        # the chosen k first; in a batch a drafter model's rows keep it (``SpeculativeDecoder.lookahead_for``)
        dec.lookahead = Lookahead(initial=k, maximum=max(k, self.lookaheads[name].maximum))
        out = dec.decode(encoder_out, prompt, features, looping)
        if out.stats.drafted_tokens:
            self.acceptance[name] += SMOOTHING * (out.stats.acceptance_rate - self.acceptance[name])
        return out
