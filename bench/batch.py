"""Batch throughput on the public English eval set: `transcribe DIR` vs the CLI once per file.

In one run, each system transcribes every file of specwhisper.evaluation.transcripts.english_set() from scratch
(fresh output folder, models loaded by the system itself, as a user would run it):

- per-file CLI: `transcribe FILE -o OUT -q` in a new process for each file (the baseline);
- batch, no cross-file batching: `transcribe DIR -o OUT --group-files 1` (models loaded once,
  audio decoded ahead; each file's chunks batched alone);
- batch: `transcribe DIR -o OUT` (chunks of up to 16 files decoded in shared batches);
- batch on Ray: `--engine ray --workers 2` (2 actors, one torch thread each, on a local Ray).

Reports files/hour, audio-hours/hour, RTF (wall / audio) and the speedup over the baseline, plus
the WER of each system's transcripts (they should agree: decoding is exact). Writes
bench/results/batch.json.

    .venv/bin/python bench/batch.py [--model base] [--skip-ray]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from specwhisper.evaluation.transcripts import english_set, wer  # noqa: E402

RESULTS = REPO / "bench" / "results" / "batch.json"


def _cpu_name() -> str:
    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    return next((x.split(":", 1)[1].strip() for x in lines if x.startswith("model name")), platform.processor() or "unknown")


def _transcribe(*args: str) -> None:
    cmd = [sys.executable, "-m", "specwhisper.serving.cli.main", *args]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"bench: {' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")


def _texts(out: Path, names: list[str]) -> list[str]:
    return [json.loads((out / f"{Path(n).stem}.json").read_text())["text"] for n in names]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="base")
    p.add_argument("--skip-ray", action="store_true", help="leave out the Ray run")
    args = p.parse_args(argv)

    items = english_set()
    audio_s = sum(i.duration for i in items)
    work = Path(tempfile.mkdtemp(prefix="bench-batch-"))
    src = work / "in"
    src.mkdir()
    names = []
    for k, i in enumerate(items):  # flat folder, unique stems (the set has jfk.wav and jfk.flac)
        dest = src / f"{k:02d}-{Path(i.file).name}"
        shutil.copy(i.path, dest)
        names.append(dest.name)
    refs = [i.reference for i in items]
    common = ["-m", args.model, "-q", "-f", "txt,json"]

    def per_file(out: Path) -> None:
        for n in names:
            _transcribe(str(src / n), "-o", str(out), *common)

    systems = [
        ("per-file CLI (baseline)", per_file),
        ("batch, one file per batch", lambda out: _transcribe(str(src), "-o", str(out), *common, "--group-files", "1")),
        ("batch, chunks of 16 files batched", lambda out: _transcribe(str(src), "-o", str(out), *common)),
    ]
    if not args.skip_ray:
        systems.append(("batch on local Ray, 2 workers",
                        lambda out: _transcribe(str(src), "-o", str(out), *common, "--engine", "ray", "--workers", "2")))

    load_start = os.getloadavg()
    runs = []
    baseline_wall = None
    baseline_texts = None
    for name, run in systems:
        out = work / f"out-{len(runs)}"
        load = os.getloadavg()
        t = time.perf_counter()
        run(out)
        wall = time.perf_counter() - t
        texts = _texts(out, names)
        baseline_wall = baseline_wall or wall
        baseline_texts = baseline_texts or texts
        row = {
            "name": name,
            "files": len(names),
            "audio_s": round(audio_s, 1),
            "wall_s": round(wall, 1),
            "speedup": round(baseline_wall / wall, 2),
            "rtf": round(wall / audio_s, 3),
            "files_per_hour": round(len(names) / wall * 3600),
            "audio_hours_per_hour": round(audio_s / wall, 2),
            "wer": round(wer(refs, texts), 4),
            "same_text_as_baseline": texts == baseline_texts,
            "load_average_1min_before": round(load[0], 2),
        }
        runs.append(row)
        print(f"{name:36s} wall {wall:7.1f} s  speedup {row['speedup']:5.2f}x  {row['files_per_hour']:6d} files/h  "
              f"{row['audio_hours_per_hour']:5.2f} audio-h/h  RTF {row['rtf']:.3f}  WER {row['wer']:.3f}  "
              f"same text {row['same_text_as_baseline']}", flush=True)
    shutil.rmtree(work, ignore_errors=True)

    result = {
        "machine": {
            "cpu": _cpu_name(),
            "cpu_count": os.cpu_count(),
            "platform": platform.platform(),
            "load_average_start": [round(x, 2) for x in load_start],
            "load_average_end": [round(x, 2) for x in os.getloadavg()],
            "note": "2-core CPU shared with other jobs running at the same time (see the load averages); "
                    "all systems measured one after another in one run",
        },
        "setup": {
            "data": f"public English eval set (specwhisper.evaluation.transcripts.english_set): {len(names)} files, {audio_s:.1f} s of audio",
            "model": args.model,
            "draft": "auto",
            "formats": "txt,json",
            "timing": "wall time of the whole command(s), model loading included, from a fresh output folder",
            "torch_threads": "1 in every process: importing silero_vad calls torch.set_num_threads(1); Ray actors 1 each",
        },
        "runs": runs,
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
