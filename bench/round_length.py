"""How many draft steps a batched speculative round runs, and what that costs on a GPU.

A batch's round drafts as many steps as its longest draft, and on a GPU a draft step costs about the
same for one row as for all of them. This bench runs the real speculative loop on this CPU (small
random-weight turbo / distil-large-v3 shapes, the distil drafter replaying the plain tokens at a chosen
per-token acceptance, rows as long as gpu_batched's) and counts, per round, the draft steps and the
verify pass, under three draft-length policies:

- ``growing``: each row grows its own k after a fully accepted draft, up to 12 (``Lookahead()``, as a
  lone row does; in a batch, the rule before ``SpeculativeDecoder.lookahead_for`` kept its rows' k);
- ``initial``: a batch's rows keep the initial k (4), as an explicitly named drafter's do;
- ``auto's k``: they keep the k that ``--draft auto``'s cost model chose for that batch size
  (``specwhisper.asr.drafters.auto``) from the H100's measured costs.

It then prices the counted passes at the H100's costs in bench/results/gpu_batched.json (a fixed-shape
pass, a distil draft step, and the host work of a plain step): PROJECTIONS, printed beside what the
H100 measured for the growing policy, where it ran (its host work per row is not priced: the
projection overestimates the growing rows at batch 4-16 by 15-30%, and matches them at batch 1).
Each row also gives the draft step cost at which its rounds would meet the target speedup (2.0x at
batch 1, 1.5x batched; None: not at any cost, the verify passes alone are too many), to hold against
bench/gpu_profile.py's draft steps.

    python bench/round_length.py [--batches 1,4,16] [--acceptances 0.7,0.8,0.9]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from specwhisper.asr.decoding.greedy import GreedyDecoder  # noqa: E402
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder  # noqa: E402
from specwhisper.asr.drafters.choice import model_drafter  # noqa: E402
from specwhisper.asr.engine import AsrEngine  # noqa: E402
from tests.random_whisper import write_random_whisper  # noqa: E402
from tests.replay_drafter import Replay, replaying  # noqa: E402

DRAFTER = "distil-large-v3"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,4,16")
    ap.add_argument("--acceptances", default="0.7,0.8,0.9")
    ap.add_argument("--costs", type=Path, default=ROOT / "bench" / "results" / "gpu_batched.json")
    ap.add_argument("--folder", type=Path, default=ROOT / "bench" / ".cache" / "round_length")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "round_length.json")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    gpu = json.loads(args.costs.read_text())
    runs = {r["name"]: r for r in gpu["runs"]}
    target, drafter = args.folder / "turbo", args.folder / "distil"
    if not (drafter / "config.json").exists():
        write_random_whisper(target, "large-v3-turbo", d_model=64)
        write_random_whisper(drafter, "distil-large-v3", d_model=64, encoder_from=target)
    engine = AsrEngine(str(target), device="cpu", dtype="bfloat16")  # bfloat16: the GPU's fixed-shape passes
    rt, sp, rules = engine.runtime, engine.special, engine.rules
    prompt = sp.prompt("en", "transcribe", timestamps=True)
    out = {"machine": f"{machine(1)}; costs: {gpu['machine']} (bench/results/gpu_batched.json)",
           "note": "PROJECTIONS: passes counted on this CPU, priced at the H100's measured costs of large-v3 shapes "
                   "(random weights); h100_measured: the growing policy's decoder_speedup there", "runs": []}
    for b in [int(x) for x in args.batches.split(",")]:
        plain, costs = runs[f"large-v3 batch {b}, plain"], runs[f"large-v3 batch {b}, costs"]
        limits = plain["row_tokens"]
        pass_ms = costs["step_ms_by_width"][str(plain["width"])]  # every fixed-shape pass has the batch's width
        draft_ms = costs["auto_draft_step_ms"][DRAFTER]
        plain_step_ms = plain["decoder_s"] * 1000 / max(limits)  # as measured, its host work included
        host_ms = max(0.0, plain_step_ms - pass_ms)
        g = torch.Generator().manual_seed(b)
        enc = torch.randn(b, 1500, 64, generator=g).to(torch.bfloat16)
        feats = torch.randn(b, 128, 3000, generator=g).to(torch.bfloat16)
        refs = [s.tokens for s in GreedyDecoder(rt, sp, rules).decode(enc, prompt, limits=limits).sequences]
        for a in [float(x) for x in args.acceptances.split(",")]:
            k = costs["auto_expected"][str(a)][DRAFTER]["k"]
            measured = runs.get(f"large-v3 batch {b} + {DRAFTER}, PROJECTION at per-token acceptance {a}", {})
            for policy, look in (("growing", Lookahead()), ("initial", Lookahead()), ("auto's k", Lookahead(initial=k))):
                if b == 1 and policy == "initial":
                    continue  # a lone row grows under every policy
                d = replaying(model_drafter(engine, str(drafter)), Replay(refs, a, sp.eot, seed=int(a * 10)))
                d.drafts_by_passes = policy != "growing"  # growing: the batch's rows are not held to their k
                spec = SpeculativeDecoder(rt, sp, rules, d, look)
                steps: list[int] = []
                draft = spec.drafter.draft
                spec.drafter.draft = lambda contexts, ks, draft=draft: steps.append(max(ks)) or draft(contexts, ks)
                got = spec.decode(enc, prompt, feats, limits=limits)
                spec_ms = sum(pass_ms + host_ms + n * draft_ms for n in steps)
                # the draft step cost at which these rounds would meet the target (2.0x at batch 1,
                # 1.5x batched), the passes and host work priced as above
                goal = 2.0 if b == 1 else 1.5
                budget = max(limits) * plain_step_ms / goal - len(steps) * (pass_ms + host_ms)
                row = dict(name=f"large-v3 batch {b} + {DRAFTER}, {policy} draft length, PROJECTION at per-token acceptance {a}",
                           batch=b, acceptance=a, policy=policy, k={"growing": None, "initial": 4}.get(policy, k),
                           token_identical=[s.tokens for s in got.sequences] == refs, rounds=len(steps),
                           draft_steps=sum(steps), draft_steps_per_round=round(sum(steps) / len(steps), 2),
                           decoder_speedup=round(max(limits) * plain_step_ms / spec_ms, 3),
                           h100_measured=measured.get("decoder_speedup") if policy == "growing" else None,
                           target_speedup=goal, draft_step_ms=draft_ms,
                           draft_step_ms_for_target=round(budget / sum(steps), 3) if budget > 0 and sum(steps) else None)
                out["runs"].append(row)
                print(f"  batch {b:2d} a={a} {policy:8s} k={row['k'] or '-':>2}  {row['rounds']:3d} rounds, "
                      f"{row['draft_steps_per_round']:5.2f} draft steps a round: {row['decoder_speedup']:.2f}x projected"
                      + (f"  (H100 measured {row['h100_measured']:.3f}x)" if row["h100_measured"] else "")
                      + f"; {goal}x needs a draft step of {row['draft_step_ms_for_target']} ms (H100: {draft_ms})", flush=True)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
