"""Attention for the post-edit LLM that gives every query the bits of a one-token decoding step.

Why not transformers' ``sdpa`` attention: a speculative verify pass scores several tokens in one
call, plain greedy decoding one per call, and torch's attention gives a query other last bits when
it shares a call with other queries (transformers even folds grouped-query heads another way for a
lone query). Those bits can break a near-tie between two tokens differently, so a speculative decode
would sometimes differ from the target's greedy output. Here each query attends alone, to the keys
up to its own position, in exactly the call a one-token step at that position makes; the matrix
products are row-independent already (``specwhisper.hardware.kernels``). Batch 1, causal, no padding (how the
post-editor runs the model); anything else is refused with a clear error rather than computed wrong.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

NAME = "per_query"


def _check_mask(mask: torch.Tensor | None, n: int, total: int) -> None:
    """The mask must be plain causal (what slicing the keys per query gives): no padding."""
    if mask is None:
        return
    m = mask[..., -n:, -total:]
    allowed = m if m.dtype == torch.bool else m == 0
    causal = torch.ones(n, total, dtype=torch.bool).tril(total - n)
    if not bool((allowed == causal).all()):
        raise ValueError("per-query attention takes one unpadded causal sequence (batch 1)")


def per_query_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling=None, **kwargs):
    """``query`` [B, heads, n, hd], ``key``/``value`` [B, kv heads, L, hd] (the last n keys are the
    queries' own) -> ([B, n, heads, hd], None), transformers' attention-function contract."""
    b, heads, n, hd = query.shape
    total = key.shape[2]
    if b != 1:
        raise ValueError("per-query attention takes one sequence at a time (batch 1)")
    _check_mask(attention_mask, n, total)
    groups = heads // key.shape[1]
    if groups > 1:  # grouped-query attention: each query head reads its key/value head (an exact copy)
        key = key.repeat_interleave(groups, dim=1)
        value = value.repeat_interleave(groups, dim=1)
    outs = [F.scaled_dot_product_attention(query[:, :, j : j + 1], key[:, :, : total - n + j + 1],
                                           value[:, :, : total - n + j + 1], scale=scaling) for j in range(n)]
    return torch.cat(outs, 2).transpose(1, 2).contiguous(), None


def use_per_query_attention(model) -> bool:
    """Switch a loaded transformers model to :func:`per_query_attention`; False (the model keeps its
    own attention) for models whose attention is more than causal softmax attention (sliding windows,
    logit soft-capping), which this function does not implement, and off the CPU (GPU kernels promise
    no row-independent bits anyway, and a call per query would cost a kernel launch each)."""
    from transformers import AttentionInterface

    if next(model.parameters()).device.type != "cpu":
        return False

    cfg = getattr(model.config, "get_text_config", lambda: model.config)()
    windowed = getattr(cfg, "sliding_window", None) and getattr(cfg, "use_sliding_window", True)
    if windowed or getattr(cfg, "attn_logit_softcapping", None):
        return False
    AttentionInterface.register(NAME, per_query_attention)
    model.set_attn_implementation(NAME)
    return True
