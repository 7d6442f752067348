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
depend on how many other rows are in the call (checked bitwise for 2-16 rows), so a verify pass's
matrix products give each token the numbers a step would have given it; a lone row, on some CPUs
and shapes, takes another path (``Linear._single_row_differs``: checked once per matrix at packing,
such a matrix then gets lone rows as two).

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
        self.in_features = weight.shape[1]
        self.bias = None if bias is None else bias.detach().to(weight.dtype).contiguous()
        self.packed = _packable(weight)
        if self.packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), PACK_ROWS)
        else:
            self.weight = weight
        self.pad_single = self.packed and self._single_row_differs()

    @classmethod
    def of(cls, *modules: torch.nn.Linear) -> Linear:
        """The modules' products side by side (a missing bias counts as zeros)."""
        weight = torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight
        if all(m.bias is None for m in modules):
            return cls(weight)
        bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules])
        return cls(weight, bias)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def _single_row_differs(self) -> bool:
        """Whether oneDNN computes a lone row differently from the same row among others. Measured on this
        project's AMD EPYC CI machine: for base's fc2 (2048 inputs) a 1-row call takes another path whose
        sums differ in the last bit from every 2-16-row call, so a plain step (1 row) and a verify pass (k
        rows) could break a near-tie differently; products with 512 inputs agree bitwise for 1-16 rows.
        Where a lone row differs it is computed as 2 (itself twice): the same time, the same numbers."""
        x = torch.randn(4, self.in_features, generator=torch.Generator().manual_seed(0))
        many = self._product(x)
        return any(not torch.equal(self._product(x[i : i + 1]), many[i : i + 1]) for i in range(len(x)))

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if not self.packed:
            return F.linear(x, self.weight, self.bias)
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        if self.pad_single and rows.shape[0] == 1:
            y = self._product(rows.expand(2, -1).contiguous())[:1]
        else:
            y = self._product(rows.contiguous())
        return y.view(*shape[:-1], self.out_features)

    def num_bytes(self) -> int:
        return self.weight.numel() * self.weight.element_size()


class PackedLinear(torch.nn.Module):
    """An inference-only stand-in for an ``nn.Linear`` inside a model (``pack_linears``); ``keep_weight``
    keeps the original ``weight`` reachable (an output head that code reads rows of)."""

    def __init__(self, linear: torch.nn.Linear, keep_weight: bool = False):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.product = Linear(linear.weight, linear.bias)
        if keep_weight:
            self.weight = linear.weight

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, packed={self.product.packed}"


def pack_linears(model: torch.nn.Module) -> int:
    """Replace, in place, every float32 CPU ``nn.Linear`` of ``model`` by a ``PackedLinear`` (for an LLM
    verifying a few drafted tokens per pass, as for Whisper's decoder). The output head gets a packed
    copy and keeps its weight (for a tied head that is the input embedding's). Returns how many."""
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear and _packable(child.weight)]
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child, keep_weight=child is head))
    return len(swaps)
