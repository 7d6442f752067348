"""Where a decoder pass's time goes on a GPU: the host queueing its work, or the device running it.

For large-v3 shapes (random weights) at each batch size it times the passes decoding is made of: a
plain step (the pass, then the logit rules and the greedy pick, op by op and as the one captured call
plain decoding makes on a GPU), a verify pass of 8 tokens a row, a
draft step (layers, head, rules, pick) of the distil-shaped drafter and of early exit after 4 layers,
each with its picks made row by row and for the whole batch in one captured call. Each pass gets:

- ``wall_ms``: the pass, waited for (median);
- ``host_ms``: the seconds until the host is free again, the pass queued behind a 20 ms sleep of the
  GPU, so that none of its kernels has started: what the host spends on it (a pass that makes the host
  wait for the GPU shows the sleep here: ``waits``);
- ``device_ms``: the GPU's time from its first kernel to its last, queued the same way, so that no
  kernel waits for the host: what the device spends on it;
- ``kernels`` and ``graph_replays``: launches the pass makes (torch.profiler), and its ``top`` host
  operations.

``wall_ms`` near ``host_ms`` means the host bounds the pass, near ``device_ms`` the device.

    python bench/gpu_profile.py --device cuda [--batches 1,16] [--out bench/results/gpu_profile.json]
    python bench/gpu_profile.py --device cpu --d-model 64 --batches 1,4   (rehearsal: host times only)
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.large_target import target_and_drafter  # noqa: E402
from bench.large_target_probe import timed  # noqa: E402
from specwhisper.asr.decoding.greedy import SamplingDecoder, read_out  # noqa: E402
from specwhisper.asr.decoding.rules import CapturedSelect  # noqa: E402
from specwhisper.asr.drafters.choice import model_drafter  # noqa: E402
from specwhisper.asr.drafters.early_exit import EarlyExitDrafter  # noqa: E402
from specwhisper.hardware.device import resolve_dtype  # noqa: E402

SLEEP_CYCLES = 40_000_000  # about 20 ms of an H100's clock


def queued(fn, device: torch.device, reps: int) -> tuple[float, float]:
    """(host ms, device ms), medians: ``fn`` queued behind a sleep of the GPU (``SLEEP_CYCLES``)."""
    if device.type != "cuda":
        ms = timed(fn, device, reps, warmups=1)
        return ms, ms
    host, dev = [], []
    for _ in range(reps):
        torch.cuda.synchronize()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda._sleep(SLEEP_CYCLES)
        start.record()
        t = time.perf_counter()
        fn()
        host.append((time.perf_counter() - t) * 1000)
        end.record()
        torch.cuda.synchronize()
        dev.append(start.elapsed_time(end))
    return statistics.median(host), statistics.median(dev)


def launches(fn, device: torch.device) -> dict:
    """Kernel launches, graph replays and the heaviest host operations of one call of ``fn``."""
    from torch.profiler import ProfilerActivity, profile

    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=acts) as prof:
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
    events = prof.key_averages()
    count = {e.key: e.count for e in events}
    kernels = sum(n for k, n in count.items() if k in ("cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx"))
    ops = sorted((e for e in events if e.key.startswith("aten::")), key=lambda e: -e.self_cpu_time_total)
    return dict(kernels=kernels, graph_replays=count.get("cudaGraphLaunch", 0), host_ops=sum(e.count for e in ops),
                top=[f"{e.key} x{e.count} {e.self_cpu_time_total / 1000:.2f} ms" for e in ops[:8]])


def passes(engine, d_bundle, batch: int, context: int = 100) -> dict:
    """The passes to time at ``batch`` rows, each a function that queues one."""
    rt, sp, dev = engine.runtime, engine.special, engine.runtime.device
    dtype = engine.bundle.model.dtype
    enc = torch.randn(batch, 1500, engine.bundle.model.config.d_model, device=dev, dtype=dtype)
    prompt = sp.prompt("en", "transcribe", timestamps=True)
    seq = prompt + [220 + i for i in range(context - len(prompt))]
    cache = rt.new_cache(enc, slack=13)
    rt.step(torch.tensor([seq] * batch, device=dev), torch.arange(len(seq), device=dev).expand(batch, -1), cache, whole_rows=True)
    rules = engine.rules.for_prompt(prompt)
    prefixes = [seq[len(prompt):] for _ in range(batch)]
    tok = torch.full((batch, 1), 220, device=dev)
    pos = torch.full((batch, 1), context, device=dev)
    wide, wide_pos = tok.expand(batch, 8).contiguous(), (context + torch.arange(8, device=dev)).expand(batch, 8).contiguous()

    def plain_step():
        logits = rt.step(tok, pos, cache)[:, -1]
        rules.select(logits.float(), prefixes)

    select = CapturedSelect(rules, rt.step(tok, pos, cache)[:, -1].float().clone(), read_out)

    def plain_step_captured():
        select.set_facts(prefixes)
        select(rt.step(tok, pos, cache)[:, -1])

    temperatures = torch.full((batch, 1), 0.4, device=dev)
    uniforms = torch.rand(batch, device=dev)

    def sampled_step():  # a temperature fallback's step: the rules and a draw, op by op
        logits = rt.step(tok, pos, cache)[:, -1]
        SamplingDecoder.draw(logits.float(), prefixes, rules, temperatures, uniforms)

    draw = CapturedSelect(rules, rt.step(tok, pos, cache)[:, -1].float().clone(), read_out, sampled=True)

    def sampled_step_captured():  # the same in one captured call (``CapturedChoices``)
        draw.set_facts(prefixes)
        draw.temperatures.copy_(temperatures)
        draw.uniforms.copy_(uniforms)
        draw(rt.step(tok, pos, cache)[:, -1])

    rows = list(range(batch))

    def early_exit_step(whole: bool):
        early = EarlyExitDrafter(rt, sp, engine.rules, 4)
        early.whole_batch, early.cache = whole, cache

        def layers():
            return rt.layer_range(rt.embed_at(tok, pos), pos, cache, 0, early.k)[:, 0]

        early.start(rows, prefixes, layers())
        return lambda: early.pick(layers(), rows)

    def distil_step(whole: bool):
        """A draft step of the distil-shaped drafter: its layers, head, rules and pick."""
        draft = model_drafter(engine, "distil", bundle=d_bundle).runtime
        draft.whole_batch, draft.cache = whole, draft.m.runtime.new_cache(enc, slack=1)
        draft.feed([seq] * batch, [0] * batch)
        draft.start(rows, prefixes)
        picked = torch.full((batch,), 220, device=dev)
        return lambda: (draft.step(rows, picked, [context] * batch), draft.pick(rows))

    # each drafter step both ways: the pick over the drafting rows, op by op; the whole batch's in one
    # captured call (``WholeBatchPicks``, the default where the runtime replays CUDA graphs)
    return {"plain step": plain_step, "plain step, captured choice": plain_step_captured,
            "sampled step": sampled_step, "sampled step, captured draw": sampled_step_captured,
            "verify 8": lambda: rt.step(wide, wide_pos, cache),
            "distil step, picks per row": distil_step(False), "distil step, whole batch": distil_step(True),
            "early-exit:4 step, picks per row": early_exit_step(False),
            "early-exit:4 step, whole batch": early_exit_step(True)}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default=None, help="default: float16 on a GPU, bfloat16 on the CPU (its fixed-shape mode)")
    ap.add_argument("--model", default="large-v3")
    ap.add_argument("--batches", default="1,16")
    ap.add_argument("--d-model", type=int, help="a narrower model of the same layers (rehearsal)")
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_profile.json")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    dtype = resolve_dtype(args.dtype or ("float16" if device.type == "cuda" else "bfloat16"), device)
    name = torch.cuda.get_device_name() if device.type == "cuda" else f"CPU, {torch.get_num_threads()} thread(s)"
    out = {"machine": f"{name}; torch {torch.__version__}, {str(dtype).replace('torch.', '')}",
           "note": "random weights; wall_ms: a pass waited for; host_ms: the host's time to queue it; device_ms: the "
                   "GPU's time to run it, queued behind a sleep (bench/gpu_profile.py)", "runs": []}
    with tempfile.TemporaryDirectory() as tmp, torch.inference_mode():
        engine, d_bundle = target_and_drafter(args.model, args.device, dtype, Path(tmp), args.d_model)
        for batch in [int(b) for b in args.batches.split(",")]:
            for what, fn in passes(engine, d_bundle, batch).items():
                wall = timed(fn, device, args.reps)
                host, dev = queued(fn, device, args.reps)
                row = dict(name=f"{args.model} batch {batch}, {what}", batch=batch, wall_ms=round(wall, 3),
                           host_ms=round(host, 3), device_ms=round(dev, 3), waits=device.type == "cuda" and host > 15,
                           **launches(fn, device))
                out["runs"].append(row)
                print(json.dumps(row), flush=True)
                args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"\n{'pass':34s} {'wall':>7s} {'host':>7s} {'device':>7s}  launches")
    for r in out["runs"]:
        print(f"  {r['name']:32s} {r['wall_ms']:7.2f} {r['host_ms']:7.2f} {r['device_ms']:7.2f}  "
              f"{r['kernels']} kernels, {r['graph_replays']} graphs, {r['host_ops']} ops{'  WAITS' if r['waits'] else ''}")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
