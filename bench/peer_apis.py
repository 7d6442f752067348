"""faster-whisper's Python API on this package (``from specwhisper import WhisperModel``) against faster-whisper
itself, on the same embedded base weights (float32, CPU), side by side in one process, interleaved file by file:

    python bench/peer_apis.py [--long dense] [--out FILE]

- ``defaults``: ``WhisperModel("base").transcribe(path)`` with faster-whisper's defaults (beam search of 5,
  conditioning), on the public English clips of 30 s or less;
- ``greedy``: ``beam_size=1, condition_on_previous_text=False`` on the same clips (where our drafter, ``auto``,
  may run);
- ``batched``: ``BatchedInferencePipeline(model).transcribe(path, batch_size=8)`` on bench/longform.py's
  10-minute talk (``--long``). The VADs differ (silero-vad 6.2 here, silero 6.0 bundled with faster-whisper
  1.2), so the two cut the talk into other windows and ``same_text`` compares different decodings.

Figures: ``wer`` (ours) and ``faster_whisper_wer``, ``same_text`` (the share of files whose text is
faster-whisper's, normalized), ``speedup`` (faster-whisper's seconds over ours: above 1, ours is faster;
the first call of each is a warm-up, not counted). Writes bench/results/peer_apis.json.
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

from bench.common import embedded_ct2_folder, machine  # noqa: E402

CACHE = ROOT / "bench" / ".cache"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--long", default="dense", help="bench/longform.py's file for the batched row ('' for none)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "peer_apis.json"))
    args = ap.parse_args()

    import faster_whisper

    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, english_set, normalize, wer
    from specwhisper.pipeline.faster_whisper import BatchedInferencePipeline, WhisperModel

    ours = WhisperModel("base", device="cpu", cpu_threads=args.threads)
    theirs = faster_whisper.WhisperModel(str(embedded_ct2_folder("base")), device="cpu",
                                         compute_type="float32", cpu_threads=args.threads)
    items = [i for i in english_set() if i.duration <= 30.0]
    audios = [load_audio(i.path) for i in items]

    def text(segments) -> str:
        return " ".join(s.text.strip() for s in segments)

    def timed(model, audio, **kw) -> tuple[str, float]:
        t = time.perf_counter()
        segments, _ = model.transcribe(audio, **kw)
        out = text(segments)  # lazy: the decoding happens here
        return out, time.perf_counter() - t

    runs = []
    for name, kw in [("defaults", {}), ("greedy", dict(beam_size=1, condition_on_previous_text=False))]:
        timed(ours, audios[0], language="en", **kw)  # warm-up
        timed(theirs, audios[0], language="en", **kw)
        got, want, ours_s, theirs_s = [], [], 0.0, 0.0
        for k, audio in enumerate(audios):
            pair = [(ours, got), (theirs, want)]
            for model, texts in (pair if k % 2 == 0 else pair[::-1]):
                t, s = timed(model, audio, language="en", **kw)
                texts.append(t)
                if model is ours:
                    ours_s += s
                else:
                    theirs_s += s
        refs = [i.reference for i in items]
        run = dict(name=f"WhisperModel {name}", files=len(items), wer=round(wer(refs, got), 4),
                   faster_whisper_wer=round(wer(refs, want), 4),
                   same_text=round(sum(normalize(a) == normalize(b) for a, b in zip(got, want)) / len(items), 3),
                   speedup=round(theirs_s / ours_s, 3), seconds=round(ours_s, 2), faster_whisper_seconds=round(theirs_s, 2))
        runs.append(run)
        print(json.dumps(run), flush=True)

    if args.long:
        long = build_long_file(args.long, CACHE)
        audio = load_audio(long.path)
        batched, theirs_batched = BatchedInferencePipeline(ours), faster_whisper.BatchedInferencePipeline(model=theirs)
        timed(batched, audios[0], language="en", batch_size=8)  # warm-up
        timed(theirs_batched, audios[0], language="en", batch_size=8)
        got, ours_s = timed(batched, audio, language="en", batch_size=8)
        want, theirs_s = timed(theirs_batched, audio, language="en", batch_size=8)
        run = dict(name=f"BatchedInferencePipeline batch 8, {args.long}", batch=8, audio_s=round(len(audio) / 16000, 1),
                   wer=round(wer([long.reference], [got]), 4), faster_whisper_wer=round(wer([long.reference], [want]), 4),
                   same_text=float(normalize(got) == normalize(want)), speedup=round(theirs_s / ours_s, 3),
                   rtf=round(ours_s / (len(audio) / 16000), 4))
        runs.append(run)
        print(json.dumps(run), flush=True)

    out = {"machine": machine(args.threads), "model": "base (embedded weights), English given; faster-whisper "
           f"{faster_whisper.__version__} float32 on the same weights", "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
