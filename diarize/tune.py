"""Tune the offline diarization pipeline on the public pyannote development files.

    python -m diarize.tune                 # full grid, writes diarize/params.json
    python -m diarize.tune --quick         # smaller grid (a couple of minutes)
    python -m diarize.tune --out /tmp/p.json

Data
  * tuning objective: DER (pyannote.metrics, collar 0.25 s, overlap scored) summed over
    dev00 + dev01 (``../shared/eval/pyannote-audio``, debug.development.rttm / .uem);
  * constraint: public single-speaker clips must come out as exactly one speaker
    (each miss adds 0.05 to the objective);
  * held out: the pyannote ``sample.wav`` (30 s, 2 speakers) is only reported, never used to choose.

Search
  Construction options (segmentation step, sub-chunk size, exclude-overlap) are crossed with
  the pyannote hyper-parameters (clustering method / threshold / min_cluster_size and
  segmentation min_duration_off). Segmentation and embeddings are computed once per option
  set and file; the clustering and reconstruction steps of ``SpeakerDiarization.apply`` are
  replayed for every hyper-parameter point. To prefer plateaus over lucky spikes, a threshold
  is scored by the mean objective over itself and its two grid neighbours. Among option sets
  whose best smoothed objective is within ``--speed-tolerance`` of the best, the fastest
  (largest segmentation step) wins. The chosen setting is finally re-run end to end through
  ``Diarizer`` and those DERs are what is stored.
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from diarize.evaluation import EVAL_DIR, der_pair, pyannote_dev_files, pyannote_sample_file, total_der
from diarize.pipeline import DEFAULT_PARAMS, Diarizer, annotation_to_turns, build_offline_pipeline

SINGLE_SPEAKER = ["whisper.cpp/jfk.wav", "lhotse/2412-153948-0000.flac", "coqui-tts-ljspeech/LJ001-0001.wav",
                  "mfa/acoustic_corpus.wav"]
SINGLE_PENALTY = 0.05

OPTION_SETS = {
    # name: constructor options of OfflineSpeakerDiarization
    "pyannote-1s": {"segmentation_step": 0.1},
    "pyannote-3s": {"segmentation_step": 0.3},
    "sub1.5-3s": {"segmentation_step": 0.3, "subchunk_duration": 1.5, "subchunk_step": 0.75},
    "sub2-3s": {"segmentation_step": 0.3, "subchunk_duration": 2.0, "subchunk_step": 1.0},
    "sub3-3s": {"segmentation_step": 0.3, "subchunk_duration": 3.0, "subchunk_step": 1.0},
    "sub1.5-4.5s": {"segmentation_step": 0.45, "subchunk_duration": 1.5, "subchunk_step": 0.75},
    "sub2-5s": {"segmentation_step": 0.5, "subchunk_duration": 2.0, "subchunk_step": 1.0},
}
QUICK_SETS = ["pyannote-3s", "sub1.5-3s", "sub2-3s"]

THRESHOLDS = [round(x, 2) for x in np.arange(0.30, 1.301, 0.05)]
METHODS = ["centroid", "average"]
MIN_CLUSTER_SIZES = [1, 2, 4, 8]
MIN_DURATION_OFFS = [0.0, 0.25, 0.5, 1.0, 2.0]


def _file(audio: np.ndarray, uri: str) -> dict:
    return {"waveform": torch.from_numpy(audio)[None], "sample_rate": 16000, "uri": uri}


def _prepare(pipeline, file: dict) -> dict:
    """Segmentation, speaker count and embeddings of one file (the expensive, parameter-free part)."""
    segmentations = pipeline.get_segmentations(file)
    count = pipeline.speaker_count(segmentations, pipeline._segmentation.model.receptive_field, warm_up=(0.0, 0.0))
    state = {"segmentations": segmentations, "count": count, "empty": float(np.nanmax(count.data)) == 0.0}
    if not state["empty"]:
        state["embeddings"] = pipeline.get_embeddings(file, segmentations,
                                                      exclude_overlap=pipeline.embedding_exclude_overlap)
    return state


def _cluster_and_reconstruct(pipeline, state: dict):
    """Replay of SpeakerDiarization.apply after the embeddings (binarised powerset segmentation)."""
    segmentations, count = state["segmentations"], state["count"]
    hard_clusters, _, _ = pipeline.clustering(embeddings=state["embeddings"].copy(), segmentations=segmentations,
                                              num_clusters=None, min_clusters=1, max_clusters=np.inf)
    count = type(count)(np.minimum(count.data, np.inf).astype(np.int8), count.sliding_window)
    inactive = np.sum(segmentations.data, axis=1) == 0
    hard_clusters[inactive] = -2
    return pipeline.reconstruct(segmentations, hard_clusters, count)


def evaluate_option_set(name: str, options: dict, dev, singles, log) -> list[dict]:
    t0 = time.time()
    pipeline = build_offline_pipeline({"options": {}, "params": {
        "segmentation": {"min_duration_off": 0.0},
        "clustering": {"method": "centroid", "min_cluster_size": 1, "threshold": 0.7}}}, **options)
    dev_states = [_prepare(pipeline, _file(audio, f.uri)) for f, audio in dev]
    single_states = [_prepare(pipeline, _file(audio, uri)) for uri, audio in singles]
    prep = time.time() - t0
    rows = []
    for method, mcs, threshold in itertools.product(METHODS, MIN_CLUSTER_SIZES, THRESHOLDS):
        pipeline.clustering.instantiate({"method": method, "min_cluster_size": mcs, "threshold": threshold})
        dev_discrete = [None if s["empty"] else _cluster_and_reconstruct(pipeline, s) for s in dev_states]
        single_discrete = [None if s["empty"] else _cluster_and_reconstruct(pipeline, s) for s in single_states]
        for mdo in MIN_DURATION_OFFS:
            hyps = [[] if d is None else annotation_to_turns(pipeline.to_annotation(d, 0.0, mdo))
                    for d in dev_discrete]
            pairs = [(f.reference, h, f.uem) for (f, _), h in zip(dev, hyps)]
            dev_der = total_der(pairs)
            single_counts = [0 if d is None else
                             len({t.speaker for t in annotation_to_turns(pipeline.to_annotation(d, 0.0, mdo))})
                             for d in single_discrete]
            misses = sum(c != 1 for c in single_counts)
            rows.append({"set": name, "method": method, "min_cluster_size": mcs, "threshold": threshold,
                         "min_duration_off": mdo, "dev_der": dev_der, "single_misses": misses,
                         "objective": dev_der + SINGLE_PENALTY * misses})
    log(f"  {name}: prepared in {prep:.1f} s, grid of {len(rows)} in {time.time() - t0 - prep:.1f} s")
    return rows


def smooth(rows: list[dict]) -> None:
    """objective_smoothed = mean objective over the threshold and its grid neighbours."""
    index = {(r["set"], r["method"], r["min_cluster_size"], r["min_duration_off"], r["threshold"]): r for r in rows}
    for r in rows:
        i = THRESHOLDS.index(r["threshold"])
        near = [THRESHOLDS[j] for j in (i - 1, i, i + 1) if 0 <= j < len(THRESHOLDS)]
        vals = [index[(r["set"], r["method"], r["min_cluster_size"], r["min_duration_off"], t)]["objective"]
                for t in near]
        r["smoothed"] = float(np.mean(vals))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_PARAMS)
    parser.add_argument("--quick", action="store_true", help="fewer option sets")
    parser.add_argument("--sets", nargs="*", choices=sorted(OPTION_SETS), help="option sets to try")
    parser.add_argument("--exclude-overlap", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--speed-tolerance", type=float, default=0.01,
                        help="prefer a faster option set whose objective is within this of the best")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: shared CPUs)")
    parser.add_argument("--table", type=Path, help="also write every grid point as JSON lines here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)

    from asr.audio import load_audio

    log = lambda msg: print(msg, flush=True)  # noqa: E731
    dev = [(f, load_audio(f.audio)) for f in pyannote_dev_files()]
    singles = [(uri, load_audio(EVAL_DIR / uri)) for uri in SINGLE_SPEAKER]
    names = args.sets or (QUICK_SETS if args.quick else list(OPTION_SETS))
    overlap_choices = {"both": [False, True], "yes": [True], "no": [False]}[args.exclude_overlap]
    rows = []
    log(f"tuning on {[f.uri for f, _ in dev]} (+{len(singles)} single-speaker constraint clips)")
    for name, exclude in itertools.product(names, overlap_choices):
        options = {**OPTION_SETS[name], "embedding_exclude_overlap": exclude}
        set_name = f"{name}{'+xo' if exclude else ''}"
        rows.extend(evaluate_option_set(set_name, options, dev, singles, log))
        for r in rows:
            if r["set"] == set_name:
                r["options"] = options
    smooth(rows)
    if args.table:
        args.table.write_text("".join(json.dumps({k: v for k, v in r.items()}) + "\n" for r in rows))

    best_per_set = {}
    for r in rows:
        key = r["set"]
        if key not in best_per_set or (r["smoothed"], r["objective"]) < (best_per_set[key]["smoothed"],
                                                                         best_per_set[key]["objective"]):
            best_per_set[key] = r
    log("best per option set (smoothed objective, raw objective, dev DER):")
    for key, r in sorted(best_per_set.items(), key=lambda kv: kv[1]["smoothed"]):
        log(f"  {key:18s} {r['smoothed']:.4f} {r['objective']:.4f} {r['dev_der']:.4f}  {r['method']} "
            f"thr={r['threshold']} mcs={r['min_cluster_size']} mdo={r['min_duration_off']}")
    overall = min(r["smoothed"] for r in best_per_set.values())
    eligible = [r for r in best_per_set.values() if r["smoothed"] <= overall + args.speed_tolerance]
    chosen = max(eligible, key=lambda r: (r["options"]["segmentation_step"], -r["smoothed"]))

    params = {"segmentation": {"min_duration_off": chosen["min_duration_off"]},
              "clustering": {"method": chosen["method"], "min_cluster_size": chosen["min_cluster_size"],
                             "threshold": chosen["threshold"]}}
    settings = {"options": chosen["options"], "params": params}
    diarizer = Diarizer(build_offline_pipeline(settings), "tuned")
    report = {}
    for f in [f for f, _ in dev] + [pyannote_sample_file()]:
        audio = load_audio(f.audio)
        t = time.time()
        turns = diarizer(audio)
        report[f.uri] = {**der_pair(f.reference, turns, f.uem), "speakers": len({x.speaker for x in turns}),
                         "seconds": round(time.time() - t, 2)}
    out = {
        **settings,
        "tuning": {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "script": "python -m diarize.tune" + (" --quick" if args.quick else ""),
            "objective": "DER collar 0.25 s, overlap scored, summed over dev00+dev01; +0.05 per single-speaker "
                         "clip not found as exactly 1 speaker; threshold scored with its grid neighbours",
            "tuned_on": [f.uri for f, _ in dev],
            "single_speaker_constraint": SINGLE_SPEAKER,
            "held_out": ["pyannote sample.wav"],
            "grid": {"option_sets": sorted(best_per_set), "thresholds": THRESHOLDS, "methods": METHODS,
                     "min_cluster_sizes": MIN_CLUSTER_SIZES, "min_duration_offs": MIN_DURATION_OFFS},
            "chosen_set": chosen["set"],
            "grid_objective": round(chosen["objective"], 4),
            "grid_dev_der": round(chosen["dev_der"], 4),
            "end_to_end": report,
        },
    }
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    log(f"chosen {chosen['set']}: {json.dumps(params)}")
    log(f"end to end: {json.dumps(report)}")
    log(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
