"""Long-form throughput: ours against faster-whisper on >= 10-minute files, quiet and under load.

    python bench/longform.py [--minutes 10] [--threads 2] [--load 4] [--systems ...] [--conditions quiet,loaded]

Two files are built from the public English clips with their references (specwhisper.evaluation.transcripts.
build_long_file): ``dense`` (one clip after another, a talk) and ``speakers`` (a conversation, every
clip in another voice). Each system transcribes each file in a process of its own, started as a user
would start it (imports and model loading included), and is measured from outside with ``os.wait4``:
wall seconds, CPU seconds (user + system, all threads), peak RSS. Systems take turns file by file in
a rotating order (this machine's speed drifts), first on a quiet machine, then next to a competing
load: ``--load N`` busy processes that this script starts and stops itself (bounded in time).

Systems (all on the same embedded base weights, greedy, English given):
- ``ours none`` / ``ours auto``: the ``transcribe`` CLI (``--draft none`` / ``auto``), batch 8; ``ours int8``: ``-m base:int8``
  (int8 weights and rows, exact with respect to itself), ``--draft none``; ``ours bf16 none`` / ``ours bf16 auto``:
  ``--dtype bfloat16`` (exact with respect to the bfloat16 model: ``token_identical`` compares their tokens).
- ``ours vf none`` (``ours vf int8 none``, ``ours vf bf16 none``, ``ours vf auto``): ``--vad-filter --without-timestamps``,
  the work of faster-whisper's batched pipeline: the VAD's speech alone, joined into 30 s windows, no timestamps.
- ``fw fp32`` / ``fw int8``: faster-whisper's ``WhisperModel.transcribe`` (sequential, its defaults
  but beam 1: condition on previous text, temperature fallback, no VAD filter).
- ``fw batched fp32`` / ``fw batched int8``: faster-whisper's ``BatchedInferencePipeline``, batch 8
  (its silero VAD cuts the audio).

Writes bench/results/longform.json; prints per-condition tables and the ratios against faster-whisper.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import embedded_ct2_folder, machine  # noqa: E402

SYSTEMS = ("ours none", "ours auto", "ours int8", "ours int8 auto", "ours bf16 none", "ours bf16 auto", "ours vf none",
           "ours vf auto", "ours vf int8 none", "ours vf bf16 none", "fw fp32", "fw int8", "fw batched fp32", "fw batched int8")
DEFAULT_SYSTEMS = ("ours none", "ours auto", "ours int8", "fw fp32", "fw int8", "fw batched fp32", "fw batched int8")
CACHE = ROOT / "bench" / ".cache"


def _fw_child(audio_path: str, compute_type: str, batched: bool, threads: int, out_txt: str) -> None:
    """faster-whisper in this (child) process: transcribe, write the text (and its timed segments beside it,
    ``.segments.json``)."""
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    folder = embedded_ct2_folder("base")  # the embedded base weights as a CTranslate2 folder
    model = WhisperModel(str(folder), device="cpu", compute_type=compute_type, cpu_threads=threads)
    if batched:
        segments, _ = BatchedInferencePipeline(model).transcribe(audio_path, language="en", beam_size=1, batch_size=8)
    else:
        segments, _ = model.transcribe(audio_path, language="en", beam_size=1)
    segments = list(segments)
    Path(out_txt).write_text(" ".join(s.text.strip() for s in segments))
    timed(out_txt).write_text(json.dumps([dict(start=s.start, end=s.end, text=s.text) for s in segments]))


def timed(out_txt: str | Path) -> Path:
    """Where a peer's child writes its timed segments, beside its text: [{start, end, text}, ...]."""
    return Path(out_txt).with_suffix(".segments.json")


def _ours(system: str) -> tuple[list[str], str]:
    """``ours [vf] [int8|bf16] [DRAFT]``: its settings and its drafter (none when not named)."""
    words = system.split()[1:]
    if words and words[-1] not in ("vf", "int8", "bf16"):
        return words[:-1], words[-1]
    return words, "none"


def _command(system: str, audio: Path, threads: int, out_dir: Path) -> list[str]:
    py = sys.executable
    if system.startswith("ours"):
        words, draft = _ours(system)
        cmd = [py, "-m", "specwhisper.serving.cli.main", str(audio), "-m", "base:int8" if "int8" in words else "base",
               "--draft", draft, "-l", "en", "--threads", str(threads), "-f", "txt,json", "-o", str(out_dir), "-q"]
        cmd += ["--dtype", "bfloat16"] if "bf16" in words else []
        return cmd + (["--vad-filter", "--without-timestamps"] if "vf" in words else [])
    compute = {"fp32": "float32", "int8": "int8"}[system.split()[-1]]
    batched = "batched" in system
    code = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.longform import _fw_child; "
            f"_fw_child({str(audio)!r}, {compute!r}, {batched}, {threads}, {str(out_dir / (audio.stem + '.txt'))!r})")
    return [py, "-c", code]


def measured(cmd: list[str], cwd: Path, pythonpath: Path, what: str) -> dict:
    """``cmd`` in a fresh process (``pythonpath`` first on its path), measured from outside with
    ``os.wait4``: wall and CPU seconds (user + system, all threads) and peak RSS. A failed run raises
    with its last line of stderr, named ``what``."""
    env = dict(os.environ, PYTHONPATH=str(pythonpath), TQDM_DISABLE="1")
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"{what} failed: {err.strip().splitlines()[-1] if err.strip() else status}")
    return dict(wall_s=wall, cpu_s=usage.ru_utime + usage.ru_stime, peak_rss_mb=usage.ru_maxrss / 1024)


def run_one(system: str, audio: Path, threads: int) -> dict:
    """One system on one file in a fresh process: wall, CPU seconds, peak RSS, the transcript and its timed
    segments ({start, end, text})."""
    out_dir = Path(tempfile.mkdtemp(prefix="longform-"))
    run = measured(_command(system, audio, threads, out_dir), ROOT, ROOT, f"{system} on {audio.name}")
    text_path, ours = out_dir / (audio.stem + ".txt"), out_dir / (audio.stem + ".json")
    if ours.is_file():  # the CLI's json: segments with their tokens
        segments = json.loads(ours.read_text())["segments"]
        tokens = [s["tokens"] for s in segments]
    else:  # a peer's child: timed segments beside its text
        segments, tokens = json.loads(timed(text_path).read_text()), None
    return dict(run, text=text_path.read_text(), tokens=tokens,
                segments=[dict(start=s["start"], end=s["end"], text=s["text"]) for s in segments])


class Load:
    """``n`` busy processes (pure arithmetic), each ending by itself after ``limit_s`` at the latest."""

    def __init__(self, n: int, limit_s: float):
        self.n, self.limit_s, self.procs = n, limit_s, []

    def __enter__(self):
        code = f"import time\nt = time.time() + {self.limit_s}\nx = 0\nwhile time.time() < t:\n    for i in range(10000): x += i * i\n"
        self.procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(self.n)]
        time.sleep(2)
        return self

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()


def main(argv: list[str] | None = None) -> int:
    from specwhisper.evaluation.transcripts import LONG_KINDS, build_long_file, wer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--minutes", type=float, default=10.0, help="length of each built file (default: 10)")
    ap.add_argument("--threads", type=int, default=2, help="threads for every system (default: 2, the CLI default)")
    ap.add_argument("--load", type=int, default=4, help="busy processes for the loaded condition (default: 4)")
    ap.add_argument("--systems", default=",".join(DEFAULT_SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    ap.add_argument("--conditions", default="quiet,loaded", help="quiet, loaded or both (default: both)")
    ap.add_argument("--kinds", default=",".join(LONG_KINDS), help="files: dense, speakers (default: both)")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "longform.json")
    args = ap.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",")]
    unknown = [s for s in systems if s not in SYSTEMS]
    if unknown:
        ap.error(f"unknown system '{unknown[0]}'")
    files = {k: build_long_file(k, CACHE, args.minutes * 60) for k in args.kinds.split(",")}
    for k, f in files.items():
        print(f"{k}: {f.path.name}, {f.duration:.0f} s, {len(f.clips)} clips", flush=True)

    results: dict[tuple[str, str, str], dict] = {}
    turn = 0
    for condition in args.conditions.split(","):
        load = Load(args.load, limit_s=3600) if condition == "loaded" else None
        if load:
            load.__enter__()
        try:
            for kind, f in files.items():
                order = systems[turn % len(systems):] + systems[: turn % len(systems)]
                turn += 1
                for system in order:
                    r = run_one(system, f.path, args.threads)
                    r["words"] = len(r["text"].split())  # fewer words than the reference: words lost
                    r["wer"] = wer([f.reference], [r.pop("text")])
                    r["rtf"] = r["wall_s"] / f.duration
                    results[(condition, kind, system)] = r
                    print(f"{condition:6s} {kind:8s} {system:16s} wall {r['wall_s']:6.1f} s  cpu {r['cpu_s']:6.1f} s  "
                          f"RTF {r['rtf']:.3f}  WER {r['wer']:.3f}  words {r['words']}  peak {r['peak_rss_mb']:.0f} MB", flush=True)
                    save(results, files, args)  # after every run: a stopped bench keeps what it measured
        finally:
            if load:
                load.__exit__()

    runs = save(results, files, args, complete=True)
    print("\nwall-time speedup of ours over faster-whisper (>1: ours faster); slowdown under load (loaded / quiet wall):")
    for row in runs:
        extra = ", ".join(f"{k} {v}" for k, v in row.items() if k.startswith(("speedup_vs", "slowdown")))
        print(f"  {row['name']:40s} {extra}")
    print(f"wrote {args.out}")
    return 0


def save(results: dict[tuple[str, str, str], dict], files: dict, args, complete: bool = False) -> list[dict]:
    """The rows measured so far, with their ratios, written to ``args.out`` (``complete``: every run ended)."""
    runs = []
    for (condition, kind, system), r in results.items():
        quiet = results.get(("quiet", kind, system))
        row = dict(name=f"{system}, {kind}, {condition}", system=system, file=kind, condition=condition,
                   audio_s=round(files[kind].duration, 1), wall_s=round(r["wall_s"], 1), cpu_s=round(r["cpu_s"], 1),
                   rtf=round(r["rtf"], 4), wer=round(r["wer"], 4), words=r["words"], reference_words=len(files[kind].reference.split()),
                   peak_rss_mb=round(r["peak_rss_mb"]))
        if system.startswith("ours") and _ours(system)[1] != "none":  # a drafter: its tokens against the target alone's
            settings = _ours(system)[0]
            alone = next((v for (c, k, x), v in results.items() if (c, k) == (condition, kind) and x.startswith("ours")
                          and _ours(x) == (settings, "none")), None)
            if alone and r.get("tokens") is not None and alone.get("tokens") is not None:
                row["token_identical"] = r["tokens"] == alone["tokens"]
        for ref in ("fw fp32", "fw batched fp32", "fw batched int8"):
            other = results.get((condition, kind, ref))
            if other and system != ref:
                row[f"speedup_vs_{ref.replace(' ', '_')}"] = round(other["wall_s"] / r["wall_s"], 3)
                row[f"cpu_ratio_vs_{ref.replace(' ', '_')}"] = round(other["cpu_s"] / r["cpu_s"], 3)
        if condition != "quiet" and quiet:
            row["slowdown_under_load"] = round(r["wall_s"] / quiet["wall_s"], 3)
        runs.append(row)
    args.out.write_text(json.dumps({
        "machine": machine(args.threads) + f"; loaded condition: {args.load} busy processes beside the measured one",
        "files": {k: dict(name=f.path.name, audio_s=round(f.duration, 1), clips=len(f.clips)) for k, f in files.items()},
        "note": "each run a fresh process (imports and model loading included), measured with os.wait4; wall_s, cpu_s "
                "(user+system, all threads), peak_rss_mb; systems interleaved file by file; same base weights, greedy, "
                "language en; WER after Whisper's English normaliser",
        "complete": complete,
        "ratios": ratios(runs),
        "runs": runs,
    }, indent=2) + "\n")
    return runs


def ratios(runs: list[dict]) -> dict:
    """Each system's wall-time and CPU-time ratios against faster-whisper's batched pipeline (>1: ours
    faster), per condition, over the files: 'min-max' of the rows (a shared machine drifts)."""
    out: dict[str, str] = {}
    for row in runs:
        for ref in ("fw_batched_fp32", "fw_batched_int8"):
            if f"speedup_vs_{ref}" not in row:
                continue
            key = f"{row['system']} vs {ref.replace('_', ' ')}, {row['condition']}"
            rows = [r for r in runs if r["system"] == row["system"] and r["condition"] == row["condition"]
                    and f"speedup_vs_{ref}" in r]
            wall = sorted(r[f"speedup_vs_{ref}"] for r in rows)
            cpu = sorted(r[f"cpu_ratio_vs_{ref}"] for r in rows)
            out[key] = f"wall {wall[0]:.2f}-{wall[-1]:.2f}, cpu {cpu[0]:.2f}-{cpu[-1]:.2f} ({len(rows)} files)"
    return out


if __name__ == "__main__":
    sys.exit(main())
