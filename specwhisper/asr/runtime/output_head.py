"""The decoder's output head: the tied vocabulary projection, packed, optionally split for a drafter's
compact vocabulary (``specwhisper.asr.drafters.early_exit``, ``specwhisper.asr.drafters.model``)."""

from __future__ import annotations

import torch

from specwhisper.hardware.kernels import Int8Linear, Linear, packable


class OutputHead:
    """The tied output projection (vocabulary x d), the largest matrix of a Whisper decoder, as a
    packed copy (``specwhisper.hardware.kernels``: a product of 1-8 rows costs about what 1 row costs; vocabulary x d
    floats of memory, 106 MB for base).

    ``int8``: int8 weights and rows (``specwhisper.hardware.kernels.Int8Linear``, a ``MODEL:int8`` target or drafter).

    ``compact=(n, s)`` packs it in two parts: the drafters' compact vocabulary (text tokens below
    ``n`` and every token from ``s``, the special ones) and the text tokens between, so a drafter
    scores its vocabulary with ``compact`` while the verify pass scores the whole, without a second
    copy of the rows they share. That holds only where a product's columns are exact (the packed
    float32 CPU kernels, int8): an unpacked product (a GPU; bfloat16) picks its kernel, and so its sums'
    order, by the output width, so the split head gave the verify pass other logits than the target's
    whole head (on an H200 in bfloat16 jfk's "ask" became a timestamp pair under the early-exit
    drafter). There the head stays whole and ``compact`` slices its product."""

    def __init__(self, weight: torch.Tensor, compact: tuple[int, int] | None = None, int8: bool = False):
        w = weight.detach()
        self.compact_split = compact
        product = Int8Linear.quantize if int8 else Linear
        if compact is None or not (int8 or packable(w)):
            self.main, self.rest = product(w), None
        else:
            n, s = compact
            self.main, self.rest = product(torch.cat([w[:n], w[s:]])), product(w[n:s])

    def __call__(self, hidden: torch.Tensor) -> torch.Tensor:
        h = hidden.detach()
        if self.rest is None:
            return self.main(h)
        n = self.compact_split[0]
        a = self.main(h)
        return torch.cat([a[..., :n], self.rest(h), a[..., n:]], -1)

    def compact(self, hidden: torch.Tensor) -> torch.Tensor:
        """Logits of the compact vocabulary only: ids [0, n) then [s, vocabulary)."""
        if self.compact_split is None:
            raise ValueError("this head was packed without a compact vocabulary")
        if self.rest is None:  # the whole head (unpacked products): its columns of the compact vocabulary
            n, s = self.compact_split
            a = self.main(hidden.detach())
            return torch.cat([a[..., :n], a[..., s:]], -1)
        return self.main(hidden.detach())
