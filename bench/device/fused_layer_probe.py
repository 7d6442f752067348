"""What fusing a decoder layer's kernels gives a large-v3 step on a GPU: the graphed eager pass against a
torch.compile'd layer function (one compile serves all 32 layers: weights are arguments), both replayed
from a CUDA graph. Random weights, float16, batch 1, 16 columns. Run on a GPU machine from the repo root
with bench/gpu/run.sh's environment (PYTHONPATH=/tmp/g/site:.).

Measured on an H200, torch 2.11, 2026-11-26: the graphed eager pass 3.74 ms; compiled (default mode)
3.01 ms; compiled (max-autotune-no-cudagraphs) 3.23 ms; the bound of reading the pass's 2.06 GB is
0.49 ms. Fusing the elementwise work leaves the products' own time: autotune timed a 16 x 1280 by
1280 x 1280 product at 7.9 us at best (3.3 MB of weights: 0.42 TB/s), so a pass of 16 rows is bound by
skinny products that do not fill the chip, not by launches. Not adopted: 20% for a compile step and a
second code path."""
import statistics, time
import torch
import torch.nn.functional as F
from bench.large_target_probe import build
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime

def tm(fn, reps=50):
    for _ in range(5): fn()
    torch.cuda.synchronize(); out = []
    for _ in range(reps):
        t = time.perf_counter(); fn(); torch.cuda.synchronize(); out.append((time.perf_counter() - t) * 1e3)
    return statistics.median(out)

def graphed(fn):
    s = torch.cuda.Stream(); s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3): fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g): out = fn()
    return g, out

def layer_fn(x, mask, rows, positions, kc, vc, ck, cv, W, n_head: int, scaling: float, cscaling: float):
    l1w, l1b, qkvw, qkvb, ow, ob, l2w, l2b, cqw, cqb, cow, cob, l3w, l3b, f1w, f1b, f2w, f2b = W
    b, n, d = x.shape
    hd = d // n_head
    qkv = F.linear(F.layer_norm(x, (d,), l1w, l1b), qkvw, qkvb)
    q = (qkv[..., :d] * scaling).view(b, n, n_head, hd).transpose(1, 2)
    kc[rows, :, positions] = qkv[..., d:2 * d].view(b, n, n_head, hd)
    vc[rows, :, positions] = qkv[..., 2 * d:].view(b, n, n_head, hd)
    a = F.scaled_dot_product_attention(q, kc, vc, attn_mask=mask, scale=1.0)
    x = x + F.linear(a.transpose(1, 2).reshape(b, n, d), ow, ob)
    q = (F.linear(F.layer_norm(x, (d,), l2w, l2b), cqw, cqb) * cscaling).view(b, n, n_head, hd).transpose(1, 2)
    a = F.scaled_dot_product_attention(q, ck, cv, scale=1.0)
    x = x + F.linear(a.transpose(1, 2).reshape(b, n, d), cow, cob)
    return x + F.linear(F.gelu(F.linear(F.layer_norm(x, (d,), l3w, l3b), f1w, f1b)), f2w, f2b)

torch.manual_seed(0)
with torch.inference_mode():
    model = build("large-v3", "cuda", torch.float16)
    rt = WhisperDecoderRuntime(model)
    d = model.config.d_model
    enc = torch.randn(1, 1500, d, device="cuda", dtype=torch.float16)
    cache = rt.new_cache(enc, slack=16)
    rt.step(torch.tensor([list(range(220, 320))], device="cuda"), torch.arange(100, device="cuda")[None], cache)
    W16 = rt.fixed_width
    x = torch.randn(1, W16, d, device="cuda", dtype=torch.float16)
    pos = torch.full((1, W16), cache.k.shape[3] - 1, device="cuda"); pos[0, 100 % W16] = 100
    base_ms = tm(lambda: rt.graphs(x, pos, cache, 0, None))
    print(f"graphed eager pass: {base_ms:.3f} ms", flush=True)
    def weights(i):
        L, lin = rt.layers[i], rt.products[i]
        def wb(p): return (p.weight, p.bias if p.bias is not None else torch.zeros(p.weight.shape[0], device="cuda", dtype=torch.float16))
        return (L.self_attn_layer_norm.weight, L.self_attn_layer_norm.bias, *wb(lin.qkv), *wb(lin.out),
                L.encoder_attn_layer_norm.weight, L.encoder_attn_layer_norm.bias, *wb(lin.cross_q), *wb(lin.cross_out),
                L.final_layer_norm.weight, L.final_layer_norm.bias, *wb(lin.fc1), *wb(lin.fc2))
    Ws = [weights(i) for i in range(len(rt.layers))]
    sc, csc = rt.layers[0].self_attn.scaling, rt.layers[0].encoder_attn.scaling
    key_pos = torch.arange(cache.k.shape[3], device="cuda")
    rows = torch.arange(1, device="cuda")[:, None].expand(1, W16)
    def stack(fn):
        def run():
            mask = key_pos[None, None, None, :] <= pos[:, None, :, None]
            y = x
            for i in range(len(Ws)):
                y = fn(y, mask, rows, pos, cache.k[i], cache.v[i], cache.cross_k[i], cache.cross_v[i], Ws[i], rt.n_head, sc, csc)
            return y
        return run
    eager = stack(layer_fn)
    ref = eager().clone()
    ref2 = rt._layers(x, pos, cache, 0, None, None)
    print("layer_fn eager matches _layers:", (ref - ref2).abs().max().item(), flush=True)
    for mode in ("default", "max-autotune-no-cudagraphs"):
        try:
            t0 = time.perf_counter()
            cfn = torch.compile(layer_fn, mode=mode, dynamic=False, fullgraph=True)
            run = stack(cfn)
            out = run(); torch.cuda.synchronize()
            comp_s = time.perf_counter() - t0
            g, gout = graphed(run)
            ms = tm(g.replay)
            print(f"compiled ({mode}): compile {comp_s:.0f} s, graphed {ms:.3f} ms, max diff vs eager {(gout - ref).abs().max().item():.3g}", flush=True)
        except Exception as e:
            print(f"compiled ({mode}) failed: {type(e).__name__}: {str(e)[:300]}", flush=True)
