"""Probe of large-class Whisper shapes (random weights): what a target step, a verify pass of k tokens
and a draft step cost, and the speculative speedup those costs allow at a given acceptance.

    python bench/large_target_probe.py [--device cuda] [--dtype float16] [--models large-v3,medium]

RANDOM WEIGHTS with the real layer structure (transformers configs of whisper-large-v3, medium,
large-v3-turbo, distil-large-v3): timings only, no transcript. Decoding here is transformers' own
eager decoder with its dynamic cache (not this project's exact runtime: bench/large_target.py measures
that one), so the figures bound what speculation can give on a device, not what the product gives.
Projection (Leviathan et al.): with acceptance a and lookahead k a round yields (1 - a^(k+1)) / (1 - a)
tokens for k draft steps and one verify pass of k+1 tokens; decoder speedup = tokens per round *
step / (k * draft + verify).

Writes bench/results/large_target_probe_<device>.json.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
from transformers import WhisperConfig, WhisperForConditionalGeneration  # noqa: E402
from transformers.cache_utils import DynamicCache, EncoderDecoderCache  # noqa: E402

from specwhisper.hardware.device import synchronize  # noqa: E402

SHAPES = {  # d_model, encoder layers, decoder layers, heads, ffn, mel bins, vocabulary
    "large-v3": (1280, 32, 32, 20, 5120, 128, 51866),
    "large-v3-turbo": (1280, 32, 4, 20, 5120, 128, 51866),
    "distil-large-v3": (1280, 32, 2, 20, 5120, 128, 51866),
    "medium": (1024, 24, 24, 16, 4096, 80, 51865),
    "distil-medium": (1024, 24, 2, 16, 4096, 80, 51865),
}
DRAFTERS = {"large-v3": "distil-large-v3", "medium": "distil-medium"}


def build(name: str, device: str, dtype: torch.dtype, d_model: int | None = None) -> WhisperForConditionalGeneration:
    """Random weights of ``name``'s layer structure; ``d_model``: narrower (heads of 64, MLP 4x), for rehearsals."""
    d, enc, dec, heads, ffn, mels, vocab = SHAPES[name]
    if d_model is not None:
        d, heads, ffn = d_model, max(1, d_model // 64), 4 * d_model
    cfg = WhisperConfig(d_model=d, encoder_layers=enc, decoder_layers=dec, encoder_attention_heads=heads,
                        decoder_attention_heads=heads, encoder_ffn_dim=ffn, decoder_ffn_dim=ffn, num_mel_bins=mels,
                        vocab_size=vocab, max_source_positions=1500, max_target_positions=448)
    torch.manual_seed(0)
    with torch.device(device):
        model = WhisperForConditionalGeneration(cfg)
    return model.to(dtype).eval()


def timed(fn, device, reps: int, warmups: int = 3) -> float:
    """Median milliseconds of ``fn`` over ``reps`` runs after ``warmups``, each until ``device`` has done
    the work it queued."""
    for _ in range(warmups):
        fn()
    out = []
    for _ in range(reps):
        synchronize(device)
        t = time.perf_counter()
        fn()
        synchronize(device)
        out.append((time.perf_counter() - t) * 1000)
    return statistics.median(out)


@torch.inference_mode()
def probe(name: str, device: str, dtype: torch.dtype, reps: int, context: int = 100) -> dict:
    model = build(name, device, dtype)
    d, _, _, _, _, mels, vocab = SHAPES[name]
    feats = torch.randn(1, mels, 3000, device=device, dtype=dtype)
    enc_ms = timed(lambda: model.model.encoder(feats), device, max(3, reps // 5))
    enc_out = model.model.encoder(feats).last_hidden_state
    prefix = torch.randint(0, vocab - 1000, (1, context), device=device)
    cache = EncoderDecoderCache(DynamicCache(), DynamicCache())
    model(encoder_outputs=(enc_out,), decoder_input_ids=prefix, past_key_values=cache, use_cache=True)

    def step(k: int):
        def run():
            toks = torch.randint(0, vocab - 1000, (1, k), device=device)
            model(encoder_outputs=(enc_out,), decoder_input_ids=toks, past_key_values=cache, use_cache=True)
            cache.self_attention_cache.crop(-k)
        return run

    row = dict(name=name, encoder_ms_per_window=round(enc_ms, 2), step_ms=round(timed(step(1), device, reps), 3))
    row["verify_ms"] = {k: round(timed(step(k), device, reps), 3) for k in range(2, 9)}
    params = sum(p.numel() for n, p in model.named_parameters() if n.startswith(("model.decoder", "proj_out")))
    row["decoder_weight_bytes"] = params * torch.finfo(dtype).bits // 8
    model = None  # freed before the cache is emptied
    if device.startswith("cuda"):
        torch.cuda.empty_cache()
    return row


def project(target: dict, draft: dict, acceptance: float) -> dict:
    best = None
    for k in range(1, 8):
        tokens = (1 - acceptance ** (k + 1)) / (1 - acceptance)
        cost = k * draft["step_ms"] + target["verify_ms"][k + 1]
        speed = tokens * target["step_ms"] / cost
        if best is None or speed > best["decoder_speedup"]:
            best = dict(lookahead=k, tokens_per_target_pass=round(tokens, 2), decoder_speedup=round(speed, 3))
    return best


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--dtype", default=None, help="float16 on cuda, float32 on cpu by default")
    ap.add_argument("--models", default="large-v3,medium")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    dtype = getattr(torch, args.dtype or ("float16" if args.device.startswith("cuda") else "float32"))
    runs = []
    for target in args.models.split(","):
        t = probe(target, args.device, dtype, args.reps)
        dr = probe(DRAFTERS[target], args.device, dtype, args.reps)
        runs += [t, dr]
        print(json.dumps(t), json.dumps(dr), sep="\n", flush=True)
        for a in (0.6, 0.7, 0.8, 0.9):
            p = project(t, dr, a)
            runs.append(dict(name=f"{target} + {DRAFTERS[target]} drafter, projection at acceptance {a}",
                             acceptance_rate=a, **p))
            print(runs[-1], flush=True)
    dev = torch.cuda.get_device_name() if args.device.startswith("cuda") else platform.processor() or platform.machine()
    out = args.out or Path(__file__).parent / "results" / f"large_target_probe_{args.device.split(':')[0]}.json"
    out.write_text(json.dumps({
        "machine": f"{dev}, torch {torch.__version__}, {dtype}; RANDOM WEIGHTS, transformers eager decoder with "
                   f"its dynamic cache, batch 1, {100}-token context; projections are not measured decoding",
        "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
