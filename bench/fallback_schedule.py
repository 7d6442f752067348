"""The temperature fallback's schedules, on the long files built from the public clips (``build_long_file``:
a talk and a conversation, and with ``--long-minutes`` an hour made of them): ``in turn`` (a failing
chunk's next temperature starts when the one before it fails: the CPU's), ``ahead, a stream per batch``
(its later temperatures wait in the sampling decode's queue at once, start when rows are free and are
dropped once one passes), ``ahead, pooled`` (and the failing rows of several batches share one sampling
decode, ``specwhisper.asr.decoding.fallback.FallbackPool``: a GPU's) and, as the control of the loop
cut, ``in turn, loops to the cap`` (a greedy text or a sample that loops runs on to its cap instead of
stopping where its text first fails the repetition check: ``specwhisper.asr.decoding.greedy.LOOP_CHECK_FROM``).

    python bench/fallback_schedule.py [--models tiny.en,base] [--batch-size 32] [--seeds 0,1] [--long-minutes 60]

A step costs a GPU about the same at any row count, and a row costs this CPU what it costs: so per file
and schedule the figures are the decoder steps of the fallback (``fallback_steps``, what a GPU pays) and
its target passes counted per row (``fallback_passes``, what a CPU pays), with the greedy steps and
passes beside them (``decoder_steps``, ``target_passes``); both are counts, the same on any machine for the same tokens. ``token_identical``: the run's
segments (tokens, temperature, times) equal the ``in turn`` run's. ``wall_s`` is this CPU's (a file's
runs back to back, in rotating order). English given, openai's fallback (0.2 ... 1.0, best of 5).

Writes bench/results/fallback_schedule.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402

# name: (temperatures ahead, the most batches pooled, loops cut)
SCHEDULES = {"in turn": (False, 1, True), "ahead, a stream per batch": (True, 1, True), "ahead, pooled": (True, None, True),
             "in turn, loops to the cap": (False, 1, False)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="tiny.en,base", help="comma-separated (default: tiny.en,base)")
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--seeds", default="0,1", help="seeds of the built files (default: 0,1)")
    ap.add_argument("--long-minutes", type=float, default=0.0,
                    help="also the hour of bench/gpu_longform.py (made of the seed-0 files), this long (default: none)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fallback_schedule.json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import specwhisper.asr.decoding.greedy as greedy
    from bench.gpu_longform import long_files
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, wer

    runs = []
    turn = 0
    for model in args.models.split(","):
        asr = AsrEngine(model)
        files = [(kind, seed, build_long_file(kind, ROOT / "bench" / ".cache", seed=seed))
                 for seed in [int(s) for s in args.seeds.split(",")] for kind in ("dense", "speakers")]
        if args.long_minutes:
            hour = long_files(10.0, args.long_minutes, None)[-1]
            files.append(("long", 0, SimpleNamespace(path=hour["path"], reference=hour["reference"])))
        for kind, seed, long in files:
            audio = load_audio(long.path)
            names = list(SCHEDULES)
            order = names[turn % len(names):] + names[: turn % len(names)]
            turn += 1
            found, mine = {}, []
            loop_from = greedy.LOOP_CHECK_FROM
            pool_batches = asr.fallback_pool
            for schedule in order:
                asr.fallback_ahead, pooled, cut = SCHEDULES[schedule]
                asr.fallback_pool = pooled or pool_batches
                greedy.LOOP_CHECK_FROM = loop_from if cut else 10**9
                t = time.perf_counter()
                result = asr.transcribe(audio, DecodeOptions(language="en", batch_size=args.batch_size))
                wall = time.perf_counter() - t
                found[schedule] = result
                s = result.stats
                text = " ".join(seg.text for seg in result.segments)
                run = dict(name=f"{model} b{args.batch_size} {kind} seed {seed}: {schedule}", model=model,
                           batch=args.batch_size, kind=kind, seed=seed, schedule=schedule,
                           fallback_steps=s.fallback_steps, fallback_passes=s.fallback_passes,
                           decoder_steps=s.decoder_steps, target_passes=s.target_passes, loops_cut=s.loops_cut,
                           sampled_segments=sum(seg.temperature > 0 for seg in result.segments),
                           wer=round(wer([long.reference], [text]), 4), wall_s=round(wall, 1))
                mine.append(run)
                print(json.dumps(run), flush=True)
            greedy.LOOP_CHECK_FROM, asr.fallback_pool = loop_from, pool_batches

            def facts(result):
                return [(seg.tokens, seg.temperature, seg.start, seg.end) for seg in result.segments]

            base = next(r for r in mine if r["schedule"] == "in turn")
            for run in sorted(mine, key=lambda r: names.index(r["schedule"])):
                run["token_identical"] = facts(found[run["schedule"]]) == facts(found["in turn"])
                if run is not base and base["fallback_steps"]:
                    run["fallback_steps_ratio"] = round(run["fallback_steps"] / base["fallback_steps"], 3)
                    run["fallback_passes_ratio"] = round(run["fallback_passes"] / base["fallback_passes"], 3)
                    run["all_steps_ratio"] = round((run["fallback_steps"] + run["decoder_steps"])
                                                   / (base["fallback_steps"] + base["decoder_steps"]), 3)
                runs.append(run)
        del asr
    base = [r for r in runs if r["schedule"] == "in turn"]
    for schedule in SCHEDULES:
        mine = [r for r in runs if r["schedule"] == schedule]
        total = {k: sum(r[k] for r in mine) for k in ("fallback_steps", "fallback_passes", "decoder_steps", "target_passes", "loops_cut")}
        row = dict(name=f"all files: {schedule}", schedule=schedule, files=len(mine), **total,
                   token_identical=all(r["token_identical"] for r in mine), wer=round(sum(r["wer"] for r in mine) / len(mine), 4))
        if schedule != "in turn":
            for k in ("fallback_steps", "fallback_passes"):
                row[f"{k}_ratio"] = round(total[k] / sum(r[k] for r in base), 3)
            row["all_steps_ratio"] = round((total["fallback_steps"] + total["decoder_steps"])
                                           / sum(r["fallback_steps"] + r["decoder_steps"] for r in base), 3)
            row["all_passes_ratio"] = round((total["fallback_passes"] + total["target_passes"])
                                            / sum(r["fallback_passes"] + r["target_passes"] for r in base), 3)
        runs.append(row)
        print(json.dumps(row), flush=True)
    out = dict(machine=machine(args.threads),
               setup=f"English given, openai's fallback (temperatures 0.2-1.0, best of 5), batch {args.batch_size}; "
                     f"the long files of build_long_file (>= 600 s){' and an hour of them' if args.long_minutes else ''}; step and pass counts do not depend on the machine, "
                     "wall seconds do",
               runs=runs)
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
