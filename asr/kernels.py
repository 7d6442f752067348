"""Matrix products of the decoder at a few rows: oneDNN pre-packed weights on CPU.

A decode step multiplies 1 row, a speculative verify pass 2-13 rows, by every decoder matrix.
Those products are memory-bound (base: 84 MB of layer weights and a 106 MB output head per pass),
so a verify pass of 5 rows should cost about what a step of 1 row costs. With ``F.linear`` (MKL)
it does not: measured on this 2-core CPU with the weights streaming from memory, a 2048 x 512
product takes 0.42 ms for 1 row and 0.69-0.80 ms for 2-8; the head 13 ms for 1 row and 24-28 ms
for 2-8. oneDNN's inner-product on a weight packed once for a small batch (the kernel torch's
own compiler uses for frozen linears) takes 0.31-0.34 ms for 1-4 rows of the same 2048 x 512
matrix and 6.2 / 6.8 / 7.7 / 8.7 ms for 1 / 2 / 3 / 5 rows of the head (numpy's OpenBLAS on a
transposed copy, our earlier head: 6.2 / 14.2 / 14.4 / 14.8 ms). Its result for a row does not
depend on how many rows are in the call (checked bitwise for 1-8 rows), so a verify pass's
matrix products give each token the numbers a step would have given it.

Elsewhere (GPU, other dtypes, a torch build without oneDNN) the weights stay plain tensors for
``F.linear``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the row count the packed layout is tuned for: a verify pass's usual width (1 is as fast with it)
PACK_ROWS = 4


def _packable(weight: torch.Tensor) -> bool:
    return weight.device.type == "cpu" and weight.dtype == torch.float32 and torch.backends.mkldnn.is_available()


class Linear:
    """``y = x W^T + b`` for inference, over the weights of one or more ``nn.Linear`` stacked by rows
    (e.g. the query, key and value projections in one product). The weights are copied (packed)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        weight = weight.detach()
        self.out_features = weight.shape[0]
        self.bias = None if bias is None else bias.detach().to(weight.dtype).contiguous()
        self.packed = _packable(weight)
        if self.packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)
        else:
            self.weight = weight

    @classmethod
    def of(cls, *modules: torch.nn.Linear) -> Linear:
        """The modules' products side by side (a missing bias counts as zeros)."""
        weight = torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight
        if all(m.bias is None for m in modules):
            return cls(weight)
        bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules])
        return cls(weight, bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.packed:
            return F.linear(x, self.weight, self.bias)
        shape = x.shape
        y = torch.ops.mkldnn._linear_pointwise(x.reshape(-1, shape[-1]).contiguous(), self.weight, self.bias, "none", [], "")
        return y.view(*shape[:-1], self.out_features)

    def num_bytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()
