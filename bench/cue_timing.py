"""When segments (subtitle cues) start and end, against the clips whose words they hold, on long files built
from the public clips (``build_long_file``): ``paused`` (English clips with 1-20 s of silence between them,
two seeds) and the talk and the conversation of bench/longform.py.

    python bench/cue_timing.py [--kinds paused,dense,speakers] [--seeds 0,1] [--out FILE]

Three datings of the same decode (Whisper base, English given, the product's defaults):

- ``whisper``: Whisper's own timestamps (what openai-whisper and faster-whisper without ``vad_filter``
  write when word timestamps are off);
- ``speech``: the product's default, each segment narrowed to the VAD's speech inside it
  (``specwhisper.asr.decoding.segments.dated``);
- ``words``: ``--word-timestamps``, each segment from its first word to its last (a second decode).

A segment is matched to the clip holding 70% or more of its words (the nearest such clip in time; segments
of under 3 words are left out). ``early``: segments that start over 1 s before their clip; ``late``: those
that end over 1 s after it (the clips' own edges hold up to 1 s of silence); ``lead_max_s`` / ``lag_max_s``:
the worst; ``rtf``: wall seconds per audio second of the decode. Writes bench/results/cue_timing.json.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402

CACHE = ROOT / "bench" / ".cache"


def matched(segments, clips, min_words: int = 3, share: float = 0.7) -> list[tuple[object, object]]:
    """(segment, clip) for each segment of ``min_words`` or more whose words are ``share`` in one clip's
    reference; of several such clips, the nearest in time."""
    from specwhisper.evaluation.transcripts import normalize

    refs = [set(normalize(c.reference).split()) for c in clips]
    out = []
    for seg in segments:
        words = normalize(seg.text).split()
        holding = [c for c, ref in zip(clips, refs) if len(words) >= min_words and sum(w in ref for w in words) >= share * len(words)]
        if holding:
            out.append((seg, min(holding, key=lambda c: abs((c.start + c.end) - (seg.start + seg.end)))))
    return out


def figures(segments, clips) -> dict:
    pairs = matched(segments, clips)
    leads = [c.start - s.start for s, c in pairs]
    lags = [s.end - c.end for s, c in pairs]
    return dict(segments=len(pairs), early=sum(x > 1.0 for x in leads), late=sum(x > 1.0 for x in lags),
                lead_max_s=round(max(leads, default=0.0), 2), lag_max_s=round(max(lags, default=0.0), 2))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default="paused,dense,speakers")
    ap.add_argument("--seeds", default="0,1", help="seeds of the paused files (the talk and the conversation: seed 0)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "cue_timing.json"))
    args = ap.parse_args()

    import torch

    import specwhisper.asr.engine as engine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, wer
    from specwhisper.pipeline.config import PipelineConfig, RunOptions
    from specwhisper.pipeline.core import Pipeline

    pipeline = Pipeline(PipelineConfig(model="base", draft="none"))
    narrow, raw = engine.dated, []

    def recording(segments, speech):  # Whisper's own times, kept before the segments are narrowed
        raw.append(copy.deepcopy(segments))
        return narrow(segments, speech)

    runs = []
    for kind in args.kinds.split(","):
        for seed in [int(s) for s in args.seeds.split(",")] if kind == "paused" else [0]:
            long = build_long_file(kind, CACHE, 300.0 if kind == "paused" else 600.0, seed)
            audio = load_audio(long.path)
            raw.clear()
            engine.dated = recording
            try:
                t0 = time.perf_counter()
                plain = pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en")))
                seconds = time.perf_counter() - t0
            finally:
                engine.dated = narrow
            words = pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en", word_timestamps=True)))
            score = round(wer([long.reference], [plain.text]), 4)
            for dating, segments in (("whisper", raw[0]), ("speech", plain.segments), ("words", words.segments)):
                run = dict(name=f"{kind}-{seed} {dating}", file=long.path.name, seconds=round(long.duration, 1), dating=dating,
                           wer=score, rtf=round(seconds / long.duration, 4), **figures(segments, long.clips))
                print(json.dumps(run), flush=True)
                runs.append(run)
    Path(args.out).write_text(json.dumps({"machine": machine(torch.get_num_threads()), "runs": runs}, indent=1) + "\n")


if __name__ == "__main__":
    main()
