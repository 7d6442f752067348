"""Attention in the row-exact mode (``specwhisper.asr.runtime.decoder.WhisperDecoderRuntime``): torch's CPU
attention does not give a query the same bits when it shares a call with other queries or rows, so
the passes whose tokens must equal a plain decoding step's attend query by query, and the others
(a row's first pass) row by row."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def attend_per_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, positions: list[list[int]], causal: bool,
                     kv_rows: list[int] | None = None) -> torch.Tensor:
    """Attention of each query of ``q`` [B, heads, n, hd] alone, in the very call a one-row plain step
    makes at that query's position: self-attention (``causal``) over the row's keys up to the position
    with an all-true mask, cross-attention over all of the row's keys without one. ``k``/``v``:
    [B, heads, keys, hd] (``kv_rows``: the row of ``k``/``v`` each row of ``q`` reads; None: its own);
    ``positions``: [B][n]."""
    rows = []
    for r, row in enumerate(positions):
        parts = []
        m = r if kv_rows is None else kv_rows[r]
        for j, p in enumerate(row):
            kr, vr, mask = k[m : m + 1], v[m : m + 1], None
            if causal:
                kr, vr = kr[:, :, : p + 1], vr[:, :, : p + 1]
                mask = torch.ones((1, 1, 1, p + 1), dtype=torch.bool, device=q.device)
            parts.append(F.scaled_dot_product_attention(q[r : r + 1, :, j : j + 1], kr, vr, attn_mask=mask, scale=1.0))
        rows.append(torch.cat(parts, 2))
    return torch.cat(rows)


def attend_per_row(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                   kv_rows: list[int] | None = None) -> torch.Tensor:
    """Attention of each row of ``q`` [B, heads, n, hd] alone, all its queries in one call: over keys
    0..n-1 with a causal mask (self-attention of a pass at positions 0..n-1), or over all of the row's
    keys (cross-attention; ``kv_rows`` as ``attend_per_query``'s). A row's numbers do not depend on its
    batch-mates."""
    n = q.shape[2]
    mask = torch.ones((n, n), dtype=torch.bool, device=q.device).tril() if causal else None
    kv = range(q.shape[0]) if kv_rows is None else kv_rows
    return torch.cat([F.scaled_dot_product_attention(q[r : r + 1], k[m : m + 1], v[m : m + 1], attn_mask=mask, scale=1.0)
                      for r, m in enumerate(kv)])
