"""Tune the offline diarization pipeline on the public pyannote development files.

    python -m specwhisper.evaluation.tune_diarization                 # full grid, writes specwhisper/diarize/params.json
    python -m specwhisper.evaluation.tune_diarization --quick         # smaller grid (a couple of minutes)
    python -m specwhisper.evaluation.tune_diarization --out /tmp/p.json
    python -m specwhisper.evaluation.tune_diarization --with-sample ...  # tune on the pyannote sample.wav as well

Data
  * tuning objective: DER (pyannote.metrics, collar 0.25 s, overlap scored) summed over
    dev00 + dev01 (``../shared/eval/pyannote-audio``, debug.development.rttm / .uem);
  * constraint: public single-speaker clips must come out as exactly one speaker
    (each miss adds 0.05 to the objective);
  * ``--with-meetings``: the TUNE meetings of bench/meetings.py (3-4 speakers mixed from
    single-speaker clips) join the tuning files; its HELD_OUT meetings are never tuned on;
  * held out: the pyannote ``sample.wav`` (30 s, 2 speakers) is only reported, never used to choose,
    unless ``--with-sample`` adds it to the tuning files (the stored params say which: see
    ``tuning.script`` / ``tuning.tuned_on`` in specwhisper/diarize/params.json). Tuned on dev00+dev01 alone, the
    best grid point merged the two speakers of sample.wav (held-out DER 0.47), hence that option.

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
import sys
import time
import warnings
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from specwhisper.evaluation.diarization import EVAL_DIR, der_pair, pyannote_dev_files, pyannote_sample_file, total_der
from specwhisper.diarize.pipeline import DEFAULT_PARAMS, Diarizer, annotation_to_turns, build_offline_pipeline

SINGLE_SPEAKER = ["whisper.cpp/jfk.wav", "lhotse/2412-153948-0000.flac", "coqui-tts-ljspeech/LJ001-0001.wav",
                  "mfa/acoustic_corpus.wav"]
SINGLE_PENALTY = 0.05

OPTION_SETS = {
    # name: constructor options of OfflineSpeakerDiarization
    "pyannote-1s": {"segmentation_step": 0.1},
    "pyannote-3s": {"segmentation_step": 0.3},
    "sub1.5-3s": {"segmentation_step": 0.3, "subchunk_duration": 1.5, "subchunk_step": 0.75},
    "sub1.5x-3s": {"segmentation_step": 0.3, "subchunk_duration": 1.5, "subchunk_step": 0.375},
    "sub2-3s": {"segmentation_step": 0.3, "subchunk_duration": 2.0, "subchunk_step": 1.0},
    "sub3-3s": {"segmentation_step": 0.3, "subchunk_duration": 3.0, "subchunk_step": 1.0},
    "sub1.5-4.5s": {"segmentation_step": 0.45, "subchunk_duration": 1.5, "subchunk_step": 0.75},
    "sub2-5s": {"segmentation_step": 0.5, "subchunk_duration": 2.0, "subchunk_step": 1.0},
}
QUICK_SETS = ["pyannote-3s", "sub1.5-3s", "sub2-3s"]
CLUSTERINGS = ["AgglomerativeClustering", "SpectralClustering"]

# clustering grids: (fixed parameter grid, name of the swept axis, axis values)
GRIDS = {
    "AgglomerativeClustering": ({"method": ["centroid", "average"], "min_cluster_size": [1, 2, 4, 8]},
                                "threshold", [round(x, 2) for x in np.arange(0.30, 1.301, 0.05)]),
    "SpectralClustering": ({"pruning": [0.02, 0.05, 0.1, 0.2], "min_cluster_size": [1, 2, 4, 6],
                            "eigengap_ratio": [1.0, 0.7, 0.6, 0.5]},
                           "merge_similarity", [round(x, 2) for x in np.arange(0.30, 0.951, 0.05)]),
}
MIN_DURATION_OFFS = [0.0, 0.25, 0.5, 1.0, 2.0]
MIN_DURATION_ONS = [0.0, 0.25, 0.5]
TOP_CLUSTERINGS = 4


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


def _clustering_grid(clustering: str):
    fixed, axis, values = GRIDS[clustering]
    keys = sorted(fixed)
    for combo in itertools.product(*(fixed[k] for k in keys)):
        for value in values:
            yield {**dict(zip(keys, combo)), axis: value}


def evaluate_option_set(name: str, options: dict, dev, singles, log) -> list[dict]:
    t0 = time.time()
    clustering = options.get("clustering", "AgglomerativeClustering")
    first = next(_clustering_grid(clustering))
    pipeline = build_offline_pipeline({"options": {}, "params": {
        "segmentation": {"min_duration_off": 0.0, "min_duration_on": 0.0}, "clustering": first}}, **options)
    dev_states = [_prepare(pipeline, _file(audio, f.uri)) for f, audio in dev]
    single_states = [_prepare(pipeline, _file(audio, uri)) for uri, audio in singles]
    prep = time.time() - t0
    done: set[str] = set()

    def run(cparams: dict, post: list[tuple[float, float]]) -> list[dict]:
        key = json.dumps(cparams, sort_keys=True)
        post = [p for p in post if f"{key}{p}" not in done]
        done.update(f"{key}{p}" for p in post)
        if not post:
            return []
        pipeline.clustering.instantiate(cparams)
        dev_discrete = [None if s["empty"] else _cluster_and_reconstruct(pipeline, s) for s in dev_states]
        single_discrete = [None if s["empty"] else _cluster_and_reconstruct(pipeline, s) for s in single_states]
        out = []
        for mdo, mdon in post:
            def turns(d):
                return [] if d is None else annotation_to_turns(pipeline.to_annotation(d, mdon, mdo))
            pairs = [(f.reference, turns(d), f.uem) for (f, _), d in zip(dev, dev_discrete)]
            dev_der = total_der(pairs)
            misses = sum(len({t.speaker for t in turns(d)}) != 1 for d in single_discrete)
            out.append({"set": name, "options": options, "clustering": cparams,
                        "segmentation": {"min_duration_off": mdo, "min_duration_on": mdon},
                        "dev_der": dev_der, "single_misses": misses,
                        "objective": dev_der + SINGLE_PENALTY * misses})
        return out

    # stage 1: the clustering grid with light smoothing of the output; stage 2: the output
    # smoothing grid for the best clustering points of stage 1
    rows = []
    for cparams in _clustering_grid(clustering):
        rows.extend(run(cparams, [(0.0, 0.0), (0.5, 0.0)]))
    smooth(rows)
    best = sorted(rows, key=lambda r: (r["smoothed"], r["objective"]))
    seen, top = set(), []
    for r in best:
        key = json.dumps(r["clustering"], sort_keys=True)
        if key not in seen:
            seen.add(key)
            top.append(r["clustering"])
        if len(top) == TOP_CLUSTERINGS:
            break
    post = [p for p in itertools.product(MIN_DURATION_OFFS, MIN_DURATION_ONS) if p not in ((0.0, 0.0), (0.5, 0.0))]
    for cparams in top:
        # neighbours on the swept axis too, so that stage-2 points can be smoothed as well
        fixed, axis, values = GRIDS[clustering]
        i = values.index(cparams[axis])
        for v in values[max(0, i - 1):i + 2]:
            rows.extend(run({**cparams, axis: v}, post))
    log(f"  {name}: prepared in {prep:.1f} s, grid of {len(rows)} in {time.time() - t0 - prep:.1f} s")
    return rows


def _axis(row: dict) -> tuple[str, float]:
    axis = GRIDS[row["options"].get("clustering", "AgglomerativeClustering")][1]
    return axis, row["clustering"][axis]


def _key(row: dict) -> str:
    axis, _ = _axis(row)
    rest = {k: v for k, v in row["clustering"].items() if k != axis}
    return json.dumps([row["set"], rest, row["segmentation"]], sort_keys=True)


def smooth(rows: list[dict]) -> None:
    """smoothed = mean objective over the swept axis value and its two grid neighbours."""
    groups: dict[str, dict[float, dict]] = {}
    for r in rows:
        groups.setdefault(_key(r), {})[_axis(r)[1]] = r
    for group in groups.values():
        values = sorted(group)
        for i, v in enumerate(values):
            near = values[max(0, i - 1):i + 2]
            group[v]["smoothed"] = float(np.mean([group[u]["objective"] for u in near]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=DEFAULT_PARAMS)
    parser.add_argument("--quick", action="store_true", help="fewer option sets")
    parser.add_argument("--sets", nargs="*", choices=sorted(OPTION_SETS), help="option sets to try")
    parser.add_argument("--clustering", nargs="*", choices=CLUSTERINGS, help="clustering types to try")
    parser.add_argument("--exclude-overlap", choices=["both", "yes", "no"], default="both")
    parser.add_argument("--speed-tolerance", type=float, default=0.01,
                        help="prefer a faster option set whose objective is within this of the best")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default 1: shared CPUs)")
    parser.add_argument("--table", type=Path, help="also write every grid point as JSON lines here")
    parser.add_argument("--with-sample", action="store_true",
                        help="tune on the pyannote sample.wav too (instead of holding it out)")
    parser.add_argument("--with-meetings", action="store_true",
                        help="tune on the TUNE meetings built by bench/meetings.py too (3-4 speakers)")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    torch.set_num_threads(args.threads)

    from specwhisper.audio.loading import load_audio

    log = lambda msg: print(msg, flush=True)  # noqa: E731
    tuning_files = pyannote_dev_files() + ([pyannote_sample_file()] if args.with_sample else [])
    dev = [(f, load_audio(f.audio)) for f in tuning_files]
    if args.with_meetings:
        from bench.meetings import TUNE, meeting

        dev += [meeting(spec) for spec in TUNE]
    singles = [(uri, load_audio(EVAL_DIR / uri)) for uri in SINGLE_SPEAKER]
    names = args.sets or (QUICK_SETS if args.quick else list(OPTION_SETS))
    overlap_choices = {"both": [False, True], "yes": [True], "no": [False]}[args.exclude_overlap]
    rows = []
    log(f"tuning on {[f.uri for f, _ in dev]} (+{len(singles)} single-speaker constraint clips)")
    clusterings = args.clustering or CLUSTERINGS
    for name, exclude, clustering in itertools.product(names, overlap_choices, clusterings):
        options = {**OPTION_SETS[name], "embedding_exclude_overlap": exclude, "clustering": clustering}
        set_name = f"{name}{'+xo' if exclude else ''}:{clustering[:4]}"
        rows.extend(evaluate_option_set(set_name, options, dev, singles, log))
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
        log(f"  {key:24s} {r['smoothed']:.4f} {r['objective']:.4f} {r['dev_der']:.4f}  "
            f"{json.dumps(r['clustering'])} {json.dumps(r['segmentation'])}")
    overall = min(r["smoothed"] for r in best_per_set.values())
    eligible = [r for r in best_per_set.values() if r["smoothed"] <= overall + args.speed_tolerance]
    chosen = max(eligible, key=lambda r: (r["options"]["segmentation_step"], -r["smoothed"]))

    params = {"segmentation": chosen["segmentation"], "clustering": chosen["clustering"]}
    settings = {"options": chosen["options"], "params": params}
    diarizer = Diarizer(build_offline_pipeline(settings), "tuned")
    report = {}
    for f in [f for f, _ in dev] + ([] if args.with_sample else [pyannote_sample_file()]):
        audio = load_audio(f.audio)
        t = time.time()
        turns = diarizer(audio)
        report[f.uri] = {**der_pair(f.reference, turns, f.uem), "speakers": len({x.speaker for x in turns}),
                         "seconds": round(time.time() - t, 2)}
    out = {
        **settings,
        "tuning": {
            "date": datetime.now(timezone.utc).strftime("%Y-%m-%d"),
            "script": " ".join(["python -m specwhisper.evaluation.tune_diarization", *(argv if argv is not None else sys.argv[1:])]),
            "objective": "DER collar 0.25 s, overlap scored, corpus-level over the tuning files; +0.05 per single-speaker "
                         "clip not found as exactly 1 speaker; threshold scored with its grid neighbours",
            "tuned_on": [f.uri for f, _ in dev],
            "single_speaker_constraint": SINGLE_SPEAKER,
            "held_out": [] if args.with_sample else ["pyannote sample.wav"],
            "grid": {"option_sets": sorted(best_per_set), "clustering": {k: [v[0], v[1], v[2]] for k, v in GRIDS.items()},
                     "min_duration_off": MIN_DURATION_OFFS, "min_duration_on": MIN_DURATION_ONS},
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
