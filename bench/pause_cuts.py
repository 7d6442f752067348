"""How pauses are cut (``specwhisper.audio.chunking.plan_chunks``), on long files built from the public clips
(``build_long_file``: a talk and a conversation, over several seeds of their order and levels): ``middle``
(no levels), ``quietest`` (each pause cut at its quietest point, sound in a pause left inside its chunk),
``sounding`` (also the sound in a pause a chunk of its own, ``_sounding``), ``heard`` (the product's: also
each pause heard again alone by the VAD, ``VoiceActivityDetector.rehear`` and ``join_heard``, and a span
20 dB quieter or louder than the one before starting a chunk, ``merge_spans``), each without the pieces of
a pause under a second (``to_decode``), ``every-piece``: ``heard`` with those pieces decoded too; and
``clips-alone``, not a cut: each clip of the file transcribed on its own, the texts in the file's order
(what Whisper reads of each clip without the rest of the file around it).

    python bench/pause_cuts.py [--seeds 0,1,2] [--cuts middle,quietest,sounding,heard,every-piece,clips-alone] [--threads 2]

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
    ap.add_argument("--cuts", default="middle,quietest,sounding,heard,every-piece,clips-alone", help="which cuts (default: all)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "pause_cuts.json")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    import specwhisper.asr.engine as engine
    import specwhisper.audio.chunking as chunking
    from specwhisper.audio.chunking import LEVEL_STEP_DB, MIN_PIECE_S, SOUNDING_DB, frame_levels, join_heard
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, english_set, misdated, wer

    # levels None: plan_chunks cuts at the middle; an infinite SOUNDING_DB finds no sound in a pause;
    # heard False: the pauses heard alone are not used and no level step starts a chunk; MIN_PIECE_S 0
    # decodes every piece
    every = {"middle": (lambda audio: None, SOUNDING_DB, False, MIN_PIECE_S),
             "quietest": (frame_levels, float("inf"), False, MIN_PIECE_S),
             "sounding": (frame_levels, SOUNDING_DB, False, MIN_PIECE_S), "heard": (frame_levels, SOUNDING_DB, True, MIN_PIECE_S),
             "every-piece": (frame_levels, SOUNDING_DB, True, 0.0), "clips-alone": None}
    unknown = [name for name in args.cuts.split(",") if name not in every]
    if unknown:
        ap.error(f"--cuts: unknown {', '.join(unknown)} (choose from {', '.join(every)})")
    cuts = {name: every[name] for name in args.cuts.split(",")}
    asr = engine.AsrEngine("base")
    alone: dict[str, tuple[str, float]] = {}  # a clip's reference -> its text transcribed alone, wall seconds
    if "clips-alone" in cuts:
        for item in english_set():
            t = time.perf_counter()
            result = asr.transcribe(load_audio(item.path), engine.DecodeOptions(language="en"))
            alone[item.reference] = " ".join(s.text for s in result.segments), time.perf_counter() - t
    runs = []
    for seed in [int(s) for s in args.seeds.split(",")]:
        for kind in ("dense", "speakers"):
            long = build_long_file(kind, ROOT / "bench" / ".cache", seed=seed)
            audio = load_audio(long.path)
            for cut, setting in cuts.items():
                if setting is None:  # clips alone
                    text = " ".join(alone[c.reference][0] for c in long.clips)
                    wall = sum(alone[c.reference][1] for c in long.clips)
                    runs.append(dict(name=f"{kind} seed {seed}: {cut}", kind=kind, seed=seed, cut=cut,
                                     wer=round(wer([long.reference], [text]), 4), windows=len(long.clips),
                                     wall_s=round(wall, 1), rtf=round(wall / long.duration, 4)))
                    print(json.dumps(runs[-1]), flush=True)
                    continue
                levels, sounding_db, heard, min_piece_s = setting
                engine.frame_levels, chunking.SOUNDING_DB, chunking.MIN_PIECE_S = levels, sounding_db, min_piece_s
                engine.join_heard = join_heard if heard else (lambda spans, *_: spans)
                chunking.LEVEL_STEP_DB = LEVEL_STEP_DB if heard else float("inf")
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
                         **({"misdated": sum(r["misdated"] for r in mine)} if all("misdated" in r for r in mine) else {}),
                         windows=sum(r["windows"] for r in mine), wall_s=round(sum(r["wall_s"] for r in mine), 1)))
        print(json.dumps(runs[-1]), flush=True)
    args.out.write_text(json.dumps({"machine": machine(args.threads), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
