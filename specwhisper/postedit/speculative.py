"""Exact greedy speculative decoding for causal LMs (batch 1, CPU-friendly): the verify loop.

One loop serves every drafter: the drafter proposes ``k`` tokens (``specwhisper.speculative``: the
proposer interface, a batch of one here), the target scores the last committed token plus the
draft in ONE forward pass, the shared acceptance rule keeps the longest prefix of the draft equal to
the target's own argmax plus the target's next token, and the ``DynamicCache`` is cropped back to
the committed length. The output is the target's greedy output by construction (up to float ties
between a one-token and a multi-token forward pass, which the tests check for on real text).

Drafters: ``specwhisper.speculative.lookup.CopyDrafter`` (copies from the text being edited) and the
model drafters of :mod:`specwhisper.postedit.drafters`. The lookahead ``k`` adapts per round
(``specwhisper.speculative.lookahead.Lookahead``).
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Callable, Sequence

import torch

from specwhisper.hardware.device import on_device
from specwhisper.postedit.lm_cache import crop, forward, new_cache
from specwhisper.speculative.draft_steps import Drafts
from specwhisper.speculative.acceptance import accept
from specwhisper.speculative.drafter import Drafter
from specwhisper.speculative.lookahead import Lookahead
from specwhisper.results.stats import SpeculativeCounts
from specwhisper.speculative.stats import count_round

__all__ = ["SpecStats", "Lookahead", "DEFAULT_LOOKAHEAD", "speculative_generate"]

# a cheap drafter's schedule: start wide, grow fast
DEFAULT_LOOKAHEAD = Lookahead(initial=8, minimum=1, maximum=24, grow=4, shrink=1)


@dataclass
class SpecStats(SpeculativeCounts):
    """Counters of one or more speculative decodes (the shared counters plus the LLM's phases)."""

    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0  # part of decode_seconds spent in the drafter
    stopped: int = 0  # decodes ended early by a stop rule (their output is a prefix of the greedy one)

    @property
    def seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0

    def merge(self, other: SpecStats) -> None:
        for name in SpecStats.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict:
        d = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_target_pass"] = round(self.tokens_per_target_pass, 4)
        d["seconds"] = round(self.seconds, 4)
        d["decode_tokens_per_second"] = round(self.decode_tokens_per_second, 3)
        return d


def speculative_generate(
    model,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    max_new_tokens: int = 128,
    eos_token_ids: Sequence[int] = (),
    lookahead: Lookahead | None = None,
    cache=None,
    cache_prefix_len: int = 0,
    stop: Callable[[list[int]], bool] | None = None,
) -> tuple[list[int], SpecStats]:
    """Greedy decode of ``model`` after ``prompt_ids``; identical to plain greedy, faster with a drafter.

    ``cache`` (optional) holds the KV of ``prompt_ids[:cache_prefix_len]`` (a shared instruction prefix);
    it is modified in place. ``stop(ids)`` is asked after each round; True ends the decode there (the
    ids are then a prefix of the greedy output). Returns the generated ids (ending with the EOS id when
    one was produced).
    """
    if len(prompt_ids) == 0:
        raise ValueError("empty prompt")
    stats = SpecStats(prompt_tokens=len(prompt_ids))
    eos = set(int(e) for e in eos_token_ids)
    look = lookahead or DEFAULT_LOOKAHEAD
    k = look.initial
    if not 0 <= cache_prefix_len < len(prompt_ids):
        raise ValueError(f"cache prefix ({cache_prefix_len}) must be shorter than the prompt ({len(prompt_ids)})")
    t0 = time.perf_counter()
    cache = cache if cache is not None else new_cache(model)
    crop(cache, cache_prefix_len)
    # The uncached prompt goes in with the first round: one pass both prefills and verifies the first
    # draft (transformers' generate spends a separate prefill pass on it).
    pending = [int(t) for t in prompt_ids[cache_prefix_len:-1]]
    committed = cache_prefix_len  # tokens whose KV is in the cache
    last = int(prompt_ids[-1])  # committed token not yet fed
    t1 = t0
    out: list[int] = []
    while len(out) < max_new_tokens:
        room = max_new_tokens - len(out) - 1  # the target always adds one token of its own
        drafts = Drafts([[]])
        if drafter is not None and room > 0 and k > 0:
            td = time.perf_counter()
            drafts = drafter.draft([out], [min(k, room)])
            stats.draft_seconds += time.perf_counter() - td
        # a drafter model's tokens are fed as they are on the device and read with the verdict: one read a round
        width = drafts.counts()[0]
        fed = on_device(pending + [last], model.device, dtype=torch.long)
        logits = forward(model, torch.cat([fed, drafts.matrix(model.device)[0]]), cache, keep=1 + width)
        greedy = logits.argmax(-1)
        values = drafts.values()
        read = (greedy if values is None else torch.cat([greedy.float(), values.to(greedy.device)])).tolist()
        draft = drafts.resolve(read[1 + width :])[0]
        n, new = accept(draft, [int(t) for t in read[: 1 + width]])
        committed += len(pending) + 1 + n
        if pending:
            pending = []
            t1 = time.perf_counter()
            stats.prefill_seconds = t1 - t0  # the first pass: prompt and first round
        crop(cache, committed)  # KV of `last` and the accepted draft stay; the rejected tail goes
        stats.target_passes += 1
        count_round(stats, len(draft), n)
        k = look.update(k, len(draft), n)
        stop_at = next((i for i, t in enumerate(new) if t in eos), None)
        if stop_at is not None:
            new = new[: stop_at + 1]
        out.extend(new)
        last = new[-1]
        if stop_at is not None:
            break
        if stop is not None and stop(out):
            stats.stopped += 1
            break
    stats.generated_tokens = len(out)
    stats.decode_seconds = time.perf_counter() - t1
    return out, stats
