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

Elsewhere (GPU, other dtypes) the weights stay plain tensors for ``F.linear``.

These are private torch operators, so this module is the only place that calls them (checked by
``tests/test_kernels.py``; ``empty_host_cache``, the one private call a CUDA graph capture needs on an
older torch, lives here for that reason), and each is checked against the schema it was written for
(``PRIVATE_OPS``) before first use. A torch build without oneDNN, or one where an operator is gone
or its schema changed, is not a silent switch: a float32 CPU weight then stays plain with a
``KernelFallbackWarning`` (the decoder takes its fixed-shape mode: still exact, several times
slower on a CPU), and ``Int8Linear`` raises.

``Int8Linear`` is the int8 form (a ``MODEL:int8`` target or drafter): int8 weights and int8 rows
whose sums are integers, so exact in any order, and a row's result again does not depend on the
others in the call.
"""

from __future__ import annotations

import functools
import warnings

import torch
import torch.nn.functional as F

from specwhisper.hardware.memory import release_file_pages

# the row count the packed layout is tuned for: a verify pass's usual width (1 is as fast with it)
PACK_ROWS = 4


# The private operators this module calls, with the schemas (torch 2.14.1) the calls were written for.
PRIVATE_OPS = {
    "mkldnn::_reorder_linear_weight": "mkldnn::_reorder_linear_weight(Tensor self, int? batch_size=None) -> Tensor Y",
    "mkldnn::_linear_pointwise": "mkldnn::_linear_pointwise(Tensor X, Tensor W, Tensor? B, str attr, Scalar?[] scalars, "
                                 "str? algorithm) -> Tensor Y",
    "quantized::linear_prepack": "quantized::linear_prepack(Tensor W, Tensor? B=None) -> "
                                 "__torch__.torch.classes.quantized.LinearPackedParamsBase W_prepack",
    "quantized::linear_dynamic": "quantized::linear_dynamic(Tensor X, __torch__.torch.classes.quantized."
                                 "LinearPackedParamsBase W_prepack, bool reduce_range=False) -> Tensor Y",
    "aten::_make_per_channel_quantized_tensor": "aten::_make_per_channel_quantized_tensor(Tensor self, Tensor scale, "
                                                "Tensor zero_point, int axis) -> Tensor",
}
PACKED_OPS = ("mkldnn::_reorder_linear_weight", "mkldnn::_linear_pointwise")
INT8_OPS = ("quantized::linear_prepack", "quantized::linear_dynamic", "aten::_make_per_channel_quantized_tensor")


class KernelFallbackWarning(RuntimeWarning):
    """The packed oneDNN products cannot be used: decoding stays exact but is slower."""


@functools.cache
def kernel_problem(ops: tuple[str, ...]) -> str | None:
    """Why ``ops`` cannot be called as this module calls them (missing, or another schema), or None."""
    for qualified in ops:
        namespace, name = qualified.split("::")
        try:
            schema = str(getattr(getattr(torch.ops, namespace), name).default._schema)
        except (AttributeError, RuntimeError):
            return f"torch {torch.__version__} has no operator {qualified}"
        if schema != PRIVATE_OPS[qualified]:
            return f"torch {torch.__version__} changed {qualified} to '{schema}'"
    return None


def packable(weight: torch.Tensor) -> bool:
    """Whether ``Linear`` packs ``weight`` (float32 on a CPU with oneDNN's kernels): the products whose
    rows and columns are exact whatever the call's shape."""
    if weight.device.type != "cpu" or weight.dtype != torch.float32:
        return False
    problem = kernel_problem(PACKED_OPS) if torch.backends.mkldnn.is_available() else "this torch build has no oneDNN"
    if problem:
        warnings.warn(f"packed CPU products unavailable ({problem}): float32 CPU decoding falls back to the "
                      f"fixed-shape mode, exact but slower", KernelFallbackWarning, stacklevel=3)
    return problem is None


class Linear:
    """``y = x W^T + b`` for inference, over the weights of one or more ``nn.Linear`` stacked by rows
    (e.g. the query, key and value projections in one product). The weights are copied (packed)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None, rows: int = PACK_ROWS):
        """``rows``: the row count the packed layout is tuned for (the encoder's products take 1500)."""
        weight = weight.detach()
        self.out_features = weight.shape[0]
        self.in_features = weight.shape[1]
        self.bias = None if bias is None else bias.detach().to(weight.dtype).contiguous()
        self.packed = packable(weight)
        if self.packed:
            self.weight = torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), rows)
        else:
            self.weight = weight
        self.pad_single = self.packed and self._single_row_differs()

    @classmethod
    def of(cls, *modules: torch.nn.Linear, rows: int = PACK_ROWS) -> Linear:
        """The modules' products side by side (a missing bias counts as zeros)."""
        weight = torch.cat([m.weight.detach() for m in modules]) if len(modules) > 1 else modules[0].weight
        if all(m.bias is None for m in modules):
            return cls(weight, rows=rows)
        bias = torch.cat([m.bias.detach() if m.bias is not None else m.weight.new_zeros(m.weight.shape[0]) for m in modules])
        return cls(weight, bias, rows=rows)

    def _product(self, x: torch.Tensor) -> torch.Tensor:
        return torch.ops.mkldnn._linear_pointwise(x, self.weight, self.bias, "none", [], "")

    def _single_row_differs(self) -> bool:
        """Whether oneDNN computes a lone row differently from the same row among others. Measured on this
        project's AMD EPYC CI machine: for base's fc2 (2048 inputs) a 1-row call takes another path whose
        sums differ in the last bit from every 2-16-row call, so a plain step (1 row) and a verify pass (k
        rows) could break a near-tie differently; products with 512 inputs agree bitwise for 1-16 rows.
        Where a lone row differs it is computed as 2 (itself twice): the same time, the same numbers."""
        x = torch.randn(4, self.in_features, generator=torch.Generator().manual_seed(0), device=self.weight.device)
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


def int8_available() -> bool:
    return "fbgemm" in torch.backends.quantized.supported_engines


class Int8Linear:
    """``y = x W^T + b`` with int8 weights (a scale per output channel) and int8 activations (a scale
    per row, as CTranslate2 quantizes): fbgemm's dynamic int8 product on CPU.

    Why not torch's other int8 paths, measured on this 2-core CPU for base's 2048 x 512 matrix and
    its 51865 x 512 head at 1 / 4 / 8 rows, against the packed float32 ``Linear`` (0.17 / 0.20 / 0.28
    ms; head 5.3 / 6.1 / 6.9 ms): weight-only ``torch._weight_int8pack_mm`` 0.9 / 4.9 / 8.8 ms (head
    22 / 119 / 227 ms), ``torch._int_mm`` 0.55 / 1.8 / 3.4 ms, oneDNN's ``qlinear_pointwise`` 0.27 /
    0.46 / 0.50 ms (head 6.7 / 13.6 / 12.7 ms); fbgemm's dynamic product 0.14 / 0.13 / 0.18 ms (head
    0.9 / 1.5 / 2.1 ms). But fbgemm picks one activation scale for the whole call from its minimum
    and maximum, so a row's numbers would depend on the other rows (a verify pass would not give a
    token what a step gives it). Here every row is first divided by its own largest magnitude and
    two guard rows of -1 and +1 fix the call's range: each row is quantized on its own (255 steps over
    its range), the integer sums depend on that row alone, and the row is scaled back. Checked bitwise
    for 1-16 rows (tests/test_int8.py). Full 8-bit rows, not fbgemm's 7-bit ``reduce_range``: on AVX2
    its int16 pair sums may saturate at 8 bits (rarely; per element, so still row-independent), but
    7 bits cost base 7% of the words of a 5-minute talk (483-485 words against float32's 519; 8 bits:
    526-528)."""

    packed = True  # row-independent, like a packed ``Linear``

    def __init__(self, qweight: torch.Tensor, scale: torch.Tensor, bias: torch.Tensor | None = None):
        if not int8_available():
            raise ValueError("int8 weights need fbgemm (an x86-64 CPU with AVX2); this torch/CPU has none")
        if problem := kernel_problem(INT8_OPS):
            raise ValueError(f"int8 weights cannot run: {problem}")
        self.qweight, self.scale = qweight, scale  # int8 [out, in], float64 [out]
        if qweight.device.type != "cpu":
            raise ValueError("int8 weights run on the CPU only")
        self.out_features, self.in_features = qweight.shape
        self.bias = None if bias is None else bias.detach().float().contiguous()
        q = torch._make_per_channel_quantized_tensor(qweight, scale, torch.zeros_like(scale, dtype=torch.long), 0)
        self.params = torch.ops.quantized.linear_prepack(q, None)
        self.guard = torch.stack([torch.full((self.in_features,), -1.0), torch.ones(self.in_features)])

    @classmethod
    def quantize(cls, weight: torch.Tensor, bias: torch.Tensor | None = None) -> Int8Linear:
        w = weight.detach().float()
        scale = (w.abs().amax(1).clamp(min=1e-12) / 127).double()
        q = torch.round(w / scale[:, None].float()).clamp(-127, 127).to(torch.int8)
        return cls(q, scale, bias)

    @classmethod
    def of(cls, *modules: torch.nn.Module) -> Int8Linear:
        """The products of ``nn.Linear`` or ``Int8Module`` modules side by side (per-channel scales stack
        by rows, so the int8 weights are the ones each module has alone)."""
        parts = [m.product if isinstance(m, Int8Module) else cls.quantize(m.weight, m.bias) for m in modules]
        if len(parts) == 1:
            return parts[0]
        biases = [p.bias if p.bias is not None else torch.zeros(p.out_features) for p in parts]
        bias = None if all(p.bias is None for p in parts) else torch.cat(biases)
        return cls(torch.cat([p.qweight for p in parts]), torch.cat([p.scale for p in parts]), bias)

    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        rows = x.reshape(-1, shape[-1])
        s = rows.abs().amax(1, keepdim=True)
        s.masked_fill_(s == 0, 1.0)
        scaled = torch.empty(rows.shape[0] + 2, self.in_features)
        scaled[:2] = self.guard
        torch.div(rows, s, out=scaled[2:])
        y = torch.ops.quantized.linear_dynamic(scaled, self.params, False)[2:]
        y = y.mul_(s) if self.bias is None else torch.addcmul(self.bias, y, s)
        return y.view(*shape[:-1], self.out_features)

    def num_bytes(self) -> int:
        return self.qweight.numel() + self.scale.numel() * 8


class Int8Module(torch.nn.Module):
    """An ``nn.Linear`` of a model replaced by its ``Int8Linear`` (``quantize_linears``)."""

    def __init__(self, linear: torch.nn.Linear):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.product = Int8Linear.quantize(linear.weight, linear.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.product(x)

    def extra_repr(self) -> str:
        return f"in_features={self.in_features}, out_features={self.out_features}, int8"


def product_of(*modules: torch.nn.Module, rows: int = PACK_ROWS) -> Linear | Int8Linear:
    """The products of ``modules`` side by side: int8 where a ``MODEL:int8`` model's modules are
    ``Int8Module`` (``quantize_linears``), else float (packed on a CPU)."""
    if all(isinstance(m, Int8Module) for m in modules):
        return Int8Linear.of(*modules)
    return Linear.of(*modules, rows=rows)


def float_sources(modules: list[torch.nn.Module]) -> list[torch.Tensor]:
    """The float weights of ``modules`` that packed copies replace (an ``Int8Module`` has none left)."""
    return [m.weight for m in modules if isinstance(m, torch.nn.Linear)]


def quantize_linears(model: torch.nn.Module, skip: tuple[torch.nn.Module, ...] = ()) -> int:
    """Replace, in place, every CPU ``nn.Linear`` of ``model`` but ``skip`` by an ``Int8Module``. The
    float32 weights' file pages go back to the kernel (``specwhisper.hardware.memory``; base: 110 MB more peak RSS
    with them resident)."""
    swaps = [(parent, name, child) for parent in model.modules() for name, child in parent.named_children()
             if type(child) is torch.nn.Linear and child.weight.device.type == "cpu" and not any(child is k for k in skip)]
    for parent, name, child in swaps:
        setattr(parent, name, Int8Module(child))
    release_file_pages([child.weight for _, _, child in swaps])
    return len(swaps)


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
             if type(child) is torch.nn.Linear and packable(child.weight)]
    for parent, name, child in swaps:
        setattr(parent, name, PackedLinear(child, keep_weight=child is head))
    return len(swaps)


def empty_host_cache() -> None:
    """Empty torch's cache of pinned host memory, as ``torch.cuda.graph`` does before a capture:
    ``torch.accelerator.empty_host_cache`` where torch has it (2.14), else the private call torch
    2.11's own ``torch.cuda.graph`` makes (the GPU machines run 2.11)."""
    public = getattr(torch.accelerator, "empty_host_cache", None)
    if public is not None:
        public()
    else:
        torch._C._host_emptyCache()
