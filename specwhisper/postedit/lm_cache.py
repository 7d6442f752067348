"""A causal LM's KV cache and forward pass, as the post-edit's verify loop and drafters use them."""

from __future__ import annotations

from typing import Sequence

import torch

from specwhisper.hardware.device import on_device


def crop(cache, length: int) -> None:
    """Drop KV entries past ``length`` (DynamicCache.crop takes a negative count in transformers 5)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older signature
        return DynamicCache()


def input_ids(ids: Sequence[int] | torch.Tensor, device: torch.device) -> torch.Tensor:
    """One sequence's ids as a model's ``input_ids`` [1, n]: host ids queued to ``device``, device ids
    (a drafter's tokens, never read on the host) as they are."""
    if isinstance(ids, torch.Tensor):
        return ids.reshape(1, -1).to(device, torch.long)
    return on_device([list(ids)], device, dtype=torch.long)


@torch.inference_mode()
def forward(model, ids: Sequence[int] | torch.Tensor, cache, keep: int = 0) -> torch.Tensor:
    """Logits [len(ids) or keep, vocab] of ``ids`` (host ids or a device tensor) appended to ``cache``
    (which grows by len(ids)).

    ``keep`` > 0 scores only the last ``keep`` positions: the output head is the largest matrix of a
    small LM, and prompt positions need no logits.
    """
    x = input_ids(ids, model.device)
    kw = {"logits_to_keep": keep} if keep else {}
    out = model(input_ids=x, past_key_values=cache, use_cache=True, **kw)
    return out.logits[0]
