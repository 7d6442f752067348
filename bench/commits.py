"""The ``transcribe`` CLI at an earlier commit against this checkout: speed and WER on the long files.

    python bench/commits.py --before ddd19e5 [--reps 2] [--drafts none,auto] [--out bench/results/commits.json]

For a change that must leave behaviour and speed as they were (a restructuring): the earlier commit
is checked out in a temporary git worktree and run with this checkout's virtual environment
(``PYTHONPATH`` puts its tree first), on ``bench/longform.py``'s two 10-minute files, English given,
each run a fresh process measured from outside (wall and CPU seconds). The two trees alternate run by
run, in an order that flips every repetition (this machine's speed drifts). ``speedup`` is the
earlier commit's seconds over this checkout's, per file and drafter (median of the repetitions).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from bench.longform import measured  # noqa: E402

CACHE = ROOT / "bench" / ".cache"


def cli_module(tree: Path) -> str:
    """The module of the tree's ``transcribe`` entry point (its pyproject.toml's script)."""
    for line in (tree / "pyproject.toml").read_text().splitlines():
        if line.strip().startswith("transcribe ="):
            return line.split("=", 1)[1].strip().strip('"').split(":")[0]
    raise SystemExit(f"{tree}: no transcribe script in pyproject.toml")


def run_once(tree: Path, audio: Path, draft: str, out: Path) -> tuple[float, float, str]:
    """(wall s, CPU s, text written) of one CLI run from ``tree`` (``bench.longform.measured``)."""
    out.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-c", f"import sys; from {cli_module(tree)} import main; sys.exit(main())", str(audio),
           "-l", "en", "--draft", draft, "-o", str(out), "-f", "txt", "-q"]
    run = measured(cmd, tree, tree, f"{tree.name}: --draft {draft} on {audio.name}")
    return run["wall_s"], run["cpu_s"], (out / (audio.stem + ".txt")).read_text()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", required=True, help="the earlier commit (any git revision)")
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--drafts", default="none,auto")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "commits.json")
    args = ap.parse_args()
    from specwhisper.evaluation.transcripts import LONG_KINDS, build_long_file, wer

    files = {k: build_long_file(k, CACHE) for k in LONG_KINDS}
    work = Path(tempfile.mkdtemp(prefix="commits-"))
    old = work / "before"
    subprocess.run(["git", "worktree", "add", "--detach", "-f", str(old), args.before], cwd=ROOT, check=True,
                   capture_output=True)
    trees = {"before": old, "head": ROOT}
    seconds: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    wers: dict[tuple[str, str, str], float] = {}
    try:
        for rep in range(args.reps):
            order = ["before", "head"] if rep % 2 == 0 else ["head", "before"]
            for kind, lf in files.items():
                for draft in args.drafts.split(","):
                    for tree in order:
                        wall, cpu, text = run_once(trees[tree], lf.path, draft, work / f"{tree}-{kind}-{draft}-{rep}")
                        seconds.setdefault((tree, kind, draft), []).append((wall, cpu))
                        wers[(tree, kind, draft)] = round(wer([lf.reference], [text]), 4)
                        print(f"{tree:6} {kind:8} {draft:4} rep {rep}: wall {wall:.1f} s, cpu {cpu:.1f} s, "
                              f"WER {wers[(tree, kind, draft)]}", flush=True)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(old)], cwd=ROOT, capture_output=True)
    before_rev = subprocess.run(["git", "rev-parse", "--short", args.before], cwd=ROOT, capture_output=True,
                                text=True).stdout.strip()
    runs = []
    for (tree, kind, draft), times in seconds.items():
        wall = statistics.median(w for w, _ in times)
        cpu = statistics.median(c for _, c in times)
        row = {"name": f"{tree} {draft}, {kind}", "tree": before_rev if tree == "before" else "this checkout",
               "file": kind, "draft": draft, "audio_s": round(files[kind].duration, 1), "wall_s": round(wall, 1),
               "cpu_s": round(cpu, 1), "rtf": round(wall / files[kind].duration, 4), "wer": wers[(tree, kind, draft)],
               "reps": len(times)}
        if tree == "head":
            old_times = seconds[("before", kind, draft)]
            row["speedup"] = round(statistics.median(w for w, _ in old_times) / wall, 3)
            row["cpu_speedup"] = round(statistics.median(c for _, c in old_times) / cpu, 3)
            row["same_text_wer"] = wers[("before", kind, draft)] == row["wer"]
        runs.append(row)
    args.out.write_text(json.dumps({"machine": machine(2), "before": before_rev, "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
