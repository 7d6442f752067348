"""The decoder's packed matrix products (specwhisper.hardware.kernels) on base's real weights, and the
private torch operators behind them: a torch upgrade that removes or changes one fails here, loudly."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

from specwhisper.asr.runtime.decoder import OutputHead
from specwhisper.hardware import kernels

PACKAGE = Path(__file__).resolve().parents[1] / "specwhisper"


def test_a_rows_product_does_not_depend_on_the_rows_beside_it(base_engine):
    """A verify pass multiplies several tokens at once; each must get the numbers a step of that token
    alone would get (so speculation cannot change a near-tie that plain decoding resolves)."""
    rt = base_engine.runtime
    lin = rt.products[2]
    assert lin.qkv.packed and lin.fc1.packed and rt.head.main.packed  # CPU, float32: oneDNN
    x = torch.randn(16, rt.d_model, generator=torch.Generator().manual_seed(0))
    wide = torch.randn(16, 4 * rt.d_model, generator=torch.Generator().manual_seed(3))
    for name, product, inp in (("qkv", lin.qkv, x), ("out", lin.out, x), ("cross_q", lin.cross_q, x),
                               ("cross_out", lin.cross_out, x), ("fc1", lin.fc1, x), ("fc2", lin.fc2, wide), ("head", rt.head, x)):
        whole = product(inp)
        for n in range(1, 16):
            assert torch.equal(product(inp[:n]), whole[:n]), f"{name}: {n} rows differ from the same rows among 16"
        for i in (1, 7, 15):  # a lone row, as a plain decoding step computes it
            assert torch.equal(product(inp[i : i + 1]), whole[i : i + 1]), f"{name}: row {i} alone differs"


def test_products_equal_the_models_own_layers(base_engine):
    rt = base_engine.runtime
    layer, lin = rt.layers[1], rt.products[1]
    x = torch.randn(3, rt.d_model, generator=torch.Generator().manual_seed(1))
    att = layer.self_attn
    expected = torch.cat([att.q_proj(x), att.k_proj(x), att.v_proj(x)], -1)
    torch.testing.assert_close(lin.qkv(x), expected, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(lin.fc1(x), layer.fc1(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(rt.head(x), torch.nn.functional.linear(x, rt.proj), rtol=1e-4, atol=1e-3)


def test_a_head_with_a_compact_vocabulary_scores_every_token_in_place(base_engine):
    rt, eot = base_engine.runtime, base_engine.special.eot
    x = torch.randn(5, rt.d_model, generator=torch.Generator().manual_seed(2))
    whole = OutputHead(rt.proj)(x)
    split = OutputHead(rt.proj, compact=(1000, eot))
    full = split(x)
    assert full.shape == whole.shape
    torch.testing.assert_close(full, whole, rtol=1e-4, atol=1e-3)
    ids = torch.cat([torch.arange(1000), torch.arange(eot, rt.vocab_size)])
    assert torch.equal(split.compact(x), full[:, ids])


def test_a_verify_pass_gives_each_token_the_bits_of_a_plain_step(base_engine, windows):
    """The guarantee behind token identity: whatever the verify width and however rows are batched, the
    decoder's final states (and logits) of every token are bitwise those of plain one-token steps, so
    speculation cannot break a near-tie of two tokens differently from the target alone."""
    rt = base_engine.runtime
    (_, _, enc, prompt), (_, _, enc2, _) = windows[0], windows[1]
    seq = prompt + base_engine.decoder.decode(enc, prompt).sequences[0].tokens[:24]
    p0 = len(prompt)

    def run(widths):
        cache = rt.new_cache(enc, slack=13)
        out = [rt.hidden(torch.tensor([seq[:p0]]), torch.arange(p0)[None], cache)[:, -1]]
        i = p0
        for w in widths:
            w = min(w, len(seq) - i)
            if w <= 0:
                break
            out.append(rt.hidden(torch.tensor([seq[i : i + w]]), torch.arange(i, i + w)[None], cache)[0])
            i += w
        return torch.cat(out)

    plain = run([1] * len(seq))
    for widths in ([2] * 20, [5] * 10, [3, 7, 1, 13, 4]):
        assert torch.equal(run(widths), plain), f"verify widths {widths} change the states"
    assert torch.equal(rt.logits(run([5] * 10)), rt.logits(plain))

    # a plain batched step (rows at one position) vs the same rows alone and vs ragged rows
    both = torch.cat([enc, enc2])
    cache = rt.new_cache(both, slack=13)
    rt.hidden(torch.tensor([seq[:p0]] * 2), torch.arange(p0).expand(2, -1), cache)
    step = rt.hidden(torch.tensor([[seq[p0]], [seq[p0 + 1]]]), torch.tensor([[p0], [p0]]), cache)
    alone = rt.new_cache(enc2, slack=13)
    rt.hidden(torch.tensor([seq[:p0]]), torch.arange(p0)[None], alone)
    assert torch.equal(step[1], rt.hidden(torch.tensor([[seq[p0 + 1]]]), torch.tensor([[p0]]), alone)[0])
    ragged = rt.hidden(torch.tensor([[seq[p0 + 1], seq[p0 + 2]], [seq[p0 + 2], seq[p0 + 2]]]),
                       torch.tensor([[p0 + 1, p0 + 2], [p0 + 1, p0 + 2]]), cache)
    assert torch.equal(ragged[1, 0], rt.hidden(torch.tensor([[seq[p0 + 2]]]), torch.tensor([[p0 + 1]]), alone)[0, 0])


def test_the_private_operators_exist_with_the_schemas_the_calls_were_written_for():
    assert torch.backends.mkldnn.is_available() and kernels.int8_available()
    for qualified, expected in kernels.PRIVATE_OPS.items():
        namespace, name = qualified.split("::")
        assert str(getattr(getattr(torch.ops, namespace), name).default._schema) == expected, qualified
    assert kernels.kernel_problem(kernels.PACKED_OPS) is None
    assert kernels.kernel_problem(kernels.INT8_OPS) is None


def test_no_other_module_calls_private_torch_operators():
    """kernels.py is the one place whose calls PRIVATE_OPS vouches for."""
    private = re.compile(r"torch\.ops\.|torch\._C\b|torch\._(make|weight|int_mm)")
    found = [f"{p.relative_to(PACKAGE)}:{i}" for p in PACKAGE.rglob("*.py") if p.name != "kernels.py"
             for i, line in enumerate(p.read_text().splitlines(), 1) if private.search(line)]
    assert not found, found


def test_packed_and_int8_products_match_the_reference_and_ignore_other_rows():
    """Without a model: the packed product equals ``F.linear`` to float32 rounding, and the int8 product
    is within int8 rounding on average (measured: mean |d| 0.0122 against a mean |y| of 1.23, i.e. 1%;
    5 of 6144 outputs are off by up to 0.37 where fbgemm's int16 pair sums saturate, the documented
    AVX2 behaviour); each is bitwise the same for a row alone as among 16."""
    g = torch.Generator().manual_seed(0)
    w, b = 0.05 * torch.randn(384, 512, generator=g), torch.randn(384, generator=g)  # a layer's scale of weights
    x = torch.randn(16, 512, generator=g)
    reference = torch.nn.functional.linear(x, w, b)
    packed, int8 = kernels.Linear(w, b), kernels.Int8Linear.quantize(w, b)
    torch.testing.assert_close(packed(x), reference, rtol=1e-5, atol=1e-5)
    assert (int8(x) - reference).abs().mean() <= 0.02 * reference.abs().mean()
    for product in (packed, int8):
        assert product.packed
        whole = product(x)
        for i in range(16):
            assert torch.equal(product(x[i : i + 1]), whole[i : i + 1])


@pytest.mark.parametrize("change", ["missing", "schema"])
def test_a_changed_operator_warns_and_falls_back_or_raises(monkeypatch, change):
    """What a torch upgrade that removes or alters an operator does: the float32 products fall back to
    ``F.linear`` with a KernelFallbackWarning (never silently), and int8 refuses with one line."""
    ops = dict(kernels.PRIVATE_OPS)
    for name in (kernels.PACKED_OPS[1], kernels.INT8_OPS[1]):
        if change == "missing":
            ops[name.replace("::", "::gone")] = ops.pop(name)
        else:
            ops[name] = ops[name].replace("Tensor Y", "Tensor Z")
    monkeypatch.setattr(kernels, "PRIVATE_OPS", ops)
    if change == "missing":
        monkeypatch.setattr(kernels, "PACKED_OPS", (kernels.PACKED_OPS[0], kernels.PACKED_OPS[1].replace("::", "::gone")))
        monkeypatch.setattr(kernels, "INT8_OPS", (kernels.INT8_OPS[0], kernels.INT8_OPS[1].replace("::", "::gone")))
    kernels.kernel_problem.cache_clear()
    try:
        w = torch.randn(64, 32, generator=torch.Generator().manual_seed(1))
        with pytest.warns(kernels.KernelFallbackWarning, match="exact but slower"):
            product = kernels.Linear(w)
        assert not product.packed
        x = torch.randn(3, 32)
        assert torch.equal(product(x), torch.nn.functional.linear(x, w))
        with pytest.raises(ValueError, match="int8 weights cannot run") as info:
            kernels.Int8Linear.quantize(w)
        assert "\n" not in str(info.value)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not kernels.Linear(w.double()).packed  # not a float32 CPU weight: plain by design, no warning
    finally:
        kernels.kernel_problem.cache_clear()
