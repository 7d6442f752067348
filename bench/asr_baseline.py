"""ASR baseline: real-time factor, peak RSS and WER of tiny.en and base on the public English set,
ours side by side with faster-whisper on the same weights, in one run.

    python bench/asr_baseline.py [--files N] [--threads 1] [--batch-size 1]

Each configuration runs in its own spawned process, so its peak RSS is its own. Our engine runs the
target alone (no drafter), greedy with timestamps; faster-whisper runs fp32 greedy, no VAD filter.
Writes bench/results/asr_baseline.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, set_clock, faster_whisper, machine, ours, run_isolated  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=0, help="first N public English files (0: all)")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=1)
    ap.add_argument("--models", default="tiny.en,base")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time by process CPU seconds (steadier while other jobs share the machine)")
    args = ap.parse_args()
    set_clock(args.clock)
    from specwhisper.evaluation.transcripts import english_set, wer

    items = english_set()
    items = items[: args.files] if args.files else items
    files = [str(i.path) for i in items]
    refs = [i.reference for i in items]
    runs = []
    for model in args.models.split(","):
        mine = run_isolated(ours, model, "none", files, args.threads, args.batch_size)
        theirs = run_isolated(faster_whisper, model, files, args.threads)
        for name, r in ((f"ours {model}", mine), (f"faster-whisper {model} (same weights, fp32)", theirs)):
            row = {"name": name, "rtf": round(r["total"] / r["audio_s"], 4), "wer": round(wer(refs, r["texts"]), 4),
                   "peak_rss_mb": round(r["peak_rss_mb"], 1),
                   "speedup": round(mine["total"] / r["total"], 3)}
            runs.append(row)
            print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)
    out = ROOT / "bench" / "results" / "asr_baseline.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(args.threads), "files": len(files),
                               "audio_seconds": round(sum(i.duration for i in items), 1),
                               "note": "speedup: our time / this run's time on the same files (ours = 1.0)",
                               "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
