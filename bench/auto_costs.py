"""What ``--draft auto`` costs a run that starts fresh (a CLI call per file): timing the passes, or taking
the costs an earlier run stored (specwhisper.asr.drafters.cost_store), against plain decoding.

    python bench/auto_costs.py [--reps 3] [--model base]

Each run is a fresh process that loads the model and transcribes one file, as ``transcribe FILE`` does:
``none`` (``--draft none``), ``auto, measuring`` (an empty cache folder for the costs: the passes are
timed) and ``auto, stored`` (a cache folder holding the costs a first run measured). The three take
turns file by file (this machine's speed drifts); the seconds are load plus transcription, the median of
``--reps``. Every run writes the same tokens (checked). Writes bench/results/auto_costs.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import machine, run_isolated  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "auto_costs.json"
FILES = {"jfk (11 s)": "openai-whisper/jfk.flac", "fleurs-en-002 (12 s)": "cuttledoc-fleurs/fleurs-en-002.ogg",
         "acoustic corpus (27 s)": "mfa/acoustic_corpus.wav"}


def one_run(model: str, draft: str, cache: str, path: str, q) -> None:
    import torch

    torch.set_num_threads(2)
    import specwhisper

    t = time.perf_counter()
    m = specwhisper.load(model, draft=draft, cache_dir=cache)
    tr = m.transcribe(path, language="en")
    q.put({"seconds": time.perf_counter() - t, "tokens": [s.tokens for s in tr.segments]})


def cache_with_models(folder: Path) -> Path:
    """A cache folder holding the converted models (links to the user's), and no stored costs."""
    from specwhisper.asr.weights.loader import default_cache_dir

    (folder / "models").mkdir(parents=True)
    for m in default_cache_dir().joinpath("models").iterdir():
        (folder / "models" / m.name).symlink_to(m)
    return folder


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", default="base")
    ap.add_argument("--eval-root", type=Path, default=ROOT.parent / "shared" / "eval")
    args = ap.parse_args(argv)
    from specwhisper.asr.weights.loader import ensure_embedded

    ensure_embedded(args.model)  # converted once, outside the timings
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, rel in FILES.items():
            path = str(args.eval_root / rel)
            stored = cache_with_models(Path(tmp) / f"stored-{len(runs)}")
            first = run_isolated(one_run, args.model, "auto", str(stored), path)  # measures and stores
            seconds: dict[str, list[float]] = {"none": [], "auto, measuring": [], "auto, stored": []}
            tokens = {"first auto run": first["tokens"]}
            for rep in range(args.reps):
                for system in seconds:
                    cache = (cache_with_models(Path(tmp) / f"measuring-{len(runs)}-{rep}")
                             if system == "auto, measuring" else stored)
                    got = run_isolated(one_run, args.model, "none" if system == "none" else "auto", str(cache), path)
                    seconds[system].append(got["seconds"])
                    tokens[system] = got["tokens"]
            identical = all(t == first["tokens"] for t in tokens.values())
            base = statistics.median(seconds["auto, measuring"])
            for system, got in seconds.items():
                s = statistics.median(got)
                runs.append({"name": f"{args.model}, {label}, {system}", "seconds": round(s, 3),
                             "speedup": round(base / s, 3), "token_identical": identical})
                print(f"{runs[-1]['name']:55s} {s:6.2f} s  {base / s:5.2f}x the measuring run  same tokens: {identical}")
    RESULTS.write_text(json.dumps({"machine": machine(2), "note": "seconds: model load and transcription in a fresh "
                                   "process, median of the reps; speedup: over auto timing its passes",
                                   "runs": runs}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
