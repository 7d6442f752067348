"""How pauses are cut (``specwhisper.audio.chunking.plan_chunks``), on long files built from the public clips
(``build_long_file``: a talk and a conversation, over several seeds of their order and levels): ``middle``
(no levels), ``quietest`` (each pause cut at its quietest point, sound in a pause left inside its chunk) and
``sounding`` (the product's: also the sound in a pause a chunk of its own, ``_sounding``), each without
the pieces of a pause under a second (``to_decode``), and ``every-piece``: ``sounding`` with those
pieces decoded too.

    python bench/pause_cuts.py [--seeds 0,1,2] [--cuts middle,quietest,sounding,every-piece] [--threads 2]

A voice too quiet for the VAD can fill what the VAD calls a pause; cut in its middle, its sentence is
split across two windows and may be lost in both, and packed beside loud speech it is below Whisper's
range. Per file and cut: WER against the clips' references, ``misdated`` (segments dated away from the
clip whose words they hold: ``specwhisper.evaluation.transcripts.misdated``), windows decoded
(re-decoded stretches included) and wall seconds; the cuts of a file run back to back. Whisper base,
English given, greedy with openai's temperature fallback.

Writes bench/results/pause_cuts.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0,1,2", help="seeds of the built files (default: 0,1,2)")
    ap.add_argument("--cuts", default="middle,quietest,sounding,every-piece", help="which cuts (default: all four)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pause_cuts.json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import specwhisper.asr.engine as engine
    import specwhisper.audio.chunking as chunking
    from specwhisper.audio.chunking import MIN_PIECE_S, SOUNDING_DB, frame_levels
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, misdated, wer

    # levels None: plan_chunks cuts at the middle; an infinite SOUNDING_DB finds no sound in a pause;
    # MIN_PIECE_S 0 decodes every piece
    every = {"middle": (lambda audio: None, SOUNDING_DB, MIN_PIECE_S), "quietest": (frame_levels, float("inf"), MIN_PIECE_S),
             "sounding": (frame_levels, SOUNDING_DB, MIN_PIECE_S), "every-piece": (frame_levels, SOUNDING_DB, 0.0)}
    unknown = [name for name in args.cuts.split(",") if name not in every]
    if unknown:
        ap.error(f"--cuts: unknown {', '.join(unknown)} (choose from {', '.join(every)})")
    cuts = {name: every[name] for name in args.cuts.split(",")}
    asr = engine.AsrEngine("base")
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for kind in ("dense", "speakers"):
            long = build_long_file(kind, ROOT / "bench" / ".cache", seed=seed)
            audio = load_audio(long.path)
            for cut, (levels, sounding_db, min_piece_s) in cuts.items():
                engine.frame_levels, chunking.SOUNDING_DB, chunking.MIN_PIECE_S = levels, sounding_db, min_piece_s
                t = time.perf_counter()
                result = asr.transcribe(audio, engine.DecodeOptions(language="en"))
                wall = time.perf_counter() - t
                text = " ".join(s.text for s in result.segments)
                run = dict(name=f"{kind} seed {seed}: {cut}", kind=kind, seed=seed, cut=cut,
                           wer=round(wer([long.reference], [text]), 4), misdated=len(misdated(result.segments, long.clips)),
                           windows=len(result.chunks),
                           wall_s=round(wall, 1), rtf=round(wall / long.duration, 4))
                print(json.dumps(run), flush=True)
                runs.append(run)
    for cut in cuts:
        mine = [r for r in runs if r["cut"] == cut]
        runs.append(dict(name=f"mean: {cut}", cut=cut, files=len(mine), wer=round(sum(r["wer"] for r in mine) / len(mine), 4),
                         misdated=sum(r["misdated"] for r in mine),
                         windows=sum(r["windows"] for r in mine), wall_s=round(sum(r["wall_s"] for r in mine), 1)))
        print(json.dumps(runs[-1]), flush=True)
    args.out.write_text(json.dumps({"machine": machine(args.threads), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
