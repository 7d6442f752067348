"""The decoder's packed matrix products (specwhisper.runtime.kernels) on base's real weights."""

from __future__ import annotations

import torch

from specwhisper.asr.model import OutputHead


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
