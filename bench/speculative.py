"""Speculative decoding benchmark: ours with each drafter vs the target alone, transformers' assisted
generation, and faster-whisper on the same weights, side by side in one run.

    python bench/speculative.py [--files N] [--threads 2] [--hf-files 6] [--drafters ngram,tiny.en,early-exit:3]
    python bench/speculative.py --drafters early-exit:1,early-exit:3 --no-external --out /tmp/early_exit.json

Each configuration runs in its own process (so peak RSS is its own); all share the thread count.
Our configurations' times come from one more process that runs them in turn on every file
(``--no-interleave``: from the isolated runs), since this machine's speed drifts over minutes.
Early-exit rows (``early-exit:k``: the target's first k layers + trained exit adapter; ``:raw``
without it) add the memory overhead over the target alone. Writes bench/results/speculative.json
(or ``--out``). Timings are only comparable within one run on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, set_clock, faster_whisper, machine, ours, ours_interleaved, peak_rss_mb, run_isolated  # noqa: E402


def _ours(draft: str, files: list[str], threads: int, q) -> None:
    ours("base", draft, files, threads, 1, q)


def _interleaved(drafts: list[str], files: list[str], threads: int, q) -> None:
    ours_interleaved("base", drafts, files, threads, 1, q)


def _transformers(assistant: str | None, files: list[str], threads: int, q) -> None:
    import torch

    torch.set_num_threads(threads)
    import transformers

    transformers.utils.logging.set_verbosity_error()
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.weights.loader import load_whisper

    from transformers import WhisperForConditionalGeneration

    def hf_model(bundle):  # transformers' own model over the same folder: its generate() is the reference here
        return WhisperForConditionalGeneration.from_pretrained(bundle.path, attn_implementation="sdpa").eval()

    target = load_whisper("base")
    target_model = hf_model(target)
    kwargs = dict(language="en", task="transcribe", num_beams=1, do_sample=False, max_new_tokens=440)
    if assistant:
        helper = load_whisper(assistant)
        kwargs.update(assistant_model=hf_model(helper), tokenizer=target.tokenizer, assistant_tokenizer=helper.tokenizer)
    fe = target.feature_extractor
    out, total, audio_s = [], 0.0, 0.0
    for i, f in enumerate(files):
        audio = load_audio(f)
        feats = fe(audio, sampling_rate=16000, return_tensors="pt").input_features
        t = time.perf_counter()
        with torch.inference_mode():
            ids = target_model.generate(feats, **kwargs)
        if i:  # the first file warms up
            total += time.perf_counter() - t
            audio_s += len(audio) / 16000
        out.append(ids[0].tolist())
    q.put(dict(tokens=out, total=total, decoder=None, audio_s=audio_s, peak_rss_mb=peak_rss_mb()))


def external(args, files: list[str], report, runs: list[dict]) -> None:
    """transformers' greedy and assisted generation, and faster-whisper on the same weights."""
    hf_files = files[: args.hf_files + 1]
    hf_plain = run_isolated(_transformers, None, hf_files, args.threads)
    ours_small = run_isolated(_ours, "none", hf_files[1:], args.threads)  # our target alone on the same files
    for name, r in (("transformers greedy (no timestamps)", hf_plain),
                    ("transformers assisted, tiny.en universal (no timestamps)", run_isolated(_transformers, "tiny.en", hf_files, args.threads))):
        report(name, r, r["tokens"] == hf_plain["tokens"], ref=ours_small)
    runs[-1]["note"] = ("token_identical compares with transformers' own greedy output; assisted generation "
                        "refuses batches and changes output once timestamps are on, so both run without timestamps")
    fw = run_isolated(faster_whisper, "base", files, args.threads)
    report("faster-whisper (CTranslate2, same weights, fp32)", fw, None)
    runs[-1]["note"] = "different runtime: tokens not comparable (it pads mel frames, HF pads audio)"


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=0, help="first N public English files (0: all)")
    ap.add_argument("--hf-files", type=int, default=6, help="files for transformers' (slow) assisted generation")
    ap.add_argument("--threads", type=int, default=2, help="torch CPU threads (2: the CLI default)")
    ap.add_argument("--drafters", default="ngram,tiny.en," + ",".join(f"early-exit:{k}" for k in range(1, 6)) + ",early-exit:3:raw")
    ap.add_argument("--no-external", action="store_true", help="skip transformers and faster-whisper")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "speculative.json")
    ap.add_argument("--interleave", action=argparse.BooleanOptionalAction, default=True,
                    help="time our configurations file by file in turn in one process (default), not one after another")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall",
                    help="cpu: time by process CPU seconds (steadier while other jobs share the machine)")
    args = ap.parse_args()
    set_clock(args.clock)
    from specwhisper.evaluation.transcripts import english_set

    items = english_set()
    files = [str(i.path) for i in (items[: args.files] if args.files else items)]
    runs = []
    drafts = ["none", *args.drafters.split(",")]
    # each configuration in a process of its own: its peak RSS (and, without --interleave, its times)
    isolated = {d: run_isolated(_ours, d, files, args.threads) for d in drafts}
    timed = run_isolated(_interleaved, drafts, files, args.threads) if args.interleave else isolated
    results = {d: {**timed[d], "peak_rss_mb": isolated[d]["peak_rss_mb"]} for d in drafts}
    base = results["none"]
    print(f"{len(files)} files, {base['audio_s']:.0f} s audio, {args.threads} thread(s)")

    def report(name, r, identical, ref=None):
        """One row; speedups against ``ref`` (default: our target alone on the same files)."""
        ref = ref or base
        row = {"name": name, "token_identical": identical,
               "end_to_end_speedup": round(ref["total"] / r["total"], 3) if r.get("total") else None,
               "rtf": round(r["total"] / r["audio_s"], 4), "peak_rss_mb": round(r["peak_rss_mb"], 1)}
        if r.get("decoder") is not None:
            row["decoder_speedup"] = round(ref["decoder"] / r["decoder"], 3)
            # where the time goes: the encoder (a 30 s window per chunk) and everything else are the
            # same for every drafter, so a decoder phase of share s bounds the end-to-end speedup of
            # any drafter by 1 / (1 - s) (a decoder that took no time at all)
            row["encoder_s"] = round(r["encoder"], 2)
            row["decoder_s"] = round(r["decoder"], 2)
            row["total_s"] = round(r["total"], 2)
            row["end_to_end_bound"] = round(r["total"] / (r["total"] - r["decoder"]), 3)
            row["acceptance_rate"] = round(r["acceptance_rate"], 4)
            row["tokens_per_target_pass"] = round(r["tokens_per_target_pass"], 3)
        if name.startswith("ours + early-exit"):  # no second model: what it adds to the target's process
            row["rss_overhead_mb"] = round(r["peak_rss_mb"] - base["peak_rss_mb"], 1)
            row["rss_overhead_pct"] = round(100 * (r["peak_rss_mb"] - base["peak_rss_mb"]) / base["peak_rss_mb"], 2)
        runs.append(row)
        print("  ".join(f"{k}={v}" for k, v in row.items()), flush=True)

    def identical(d):
        """Token-identical to the target alone, in the isolated and in the interleaved runs."""
        return timed[d]["tokens"] == timed["none"]["tokens"] and isolated[d]["tokens"] == isolated["none"]["tokens"]

    report("ours target alone (base)", base, identical("none"))
    for d in drafts[1:]:
        report(f"ours + {d} drafter", results[d], identical(d))

    if not args.no_external:
        external(args, files, report, runs)

    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(args.threads) + ("; our rows timed interleaved file by file"
                                                                   if args.interleave else ""), "files": len(files), "audio_seconds": round(base["audio_s"], 1),
                               "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
