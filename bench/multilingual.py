"""A language per window: ``--multilingual`` against one language per file, on files built from the
public clips in five languages (issue 38).

    python bench/multilingual.py [--threads 2]

Two layouts of the same nine clips (English, French, German, Spanish, Portuguese; each trimmed to
its speech; specwhisper.evaluation.transcripts.build_multilingual_file):
- ``windows``: the pause after a clip is long enough that the next one starts a window of its own;
  each window holds one language, so the figures are those of the detection;
- ``turns``: 1.5 s between clips, as a meeting's turns: a window may hold two languages, and
  ``--multilingual`` cuts it between them.

Systems (one engine, base, greedy, plain decoding, taking turns file by file):
- ``one language``: detected once per file (the default);
- ``multilingual``: detected per window, a detection below 0.5 keeps the language before it;
- ``multilingual, no floor``: every window's detection taken, however unsure (faster-whisper's
  ``multilingual``).

Figures: ``language_share``: the share of segments (over a clip) whose language is the clip's;
``wer``: corpus WER of the clips (each clip's text: the segments over it, each normalised in its
language: Whisper's English normaliser, its basic one elsewhere); ``wer_by_language``; wall seconds.

Writes bench/results/multilingual.json.
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

CLIPS = [
    "cuttledoc-fleurs/fleurs-en-001.ogg", "cuttledoc-fleurs/fleurs-fr-000.ogg", "lhotse/2412-153948-0000.flac",
    "cuttledoc-fleurs/fleurs-de-000.ogg", "cuttledoc-fleurs/fleurs-en-002.ogg", "cuttledoc-fleurs/fleurs-es-000.ogg",
    "openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-pt-000.ogg", "coqui-tts-ljspeech/LJ001-0001.wav",
]
LAYOUTS = {"windows": dict(gap_s=1.5, window_s=30.0), "turns": dict(gap_s=1.5)}
SYSTEMS = {"one language": {}, "multilingual": {"multilingual": True},
           "multilingual, no floor": {"multilingual": True, "language_threshold": 0.0}}


def score(mixed, segments) -> dict:
    import jiwer

    from specwhisper.evaluation.transcripts import normalize

    labelled = [(s.language, mixed.clip_at(s.start, s.end)) for s in segments]
    labelled = [(got, clip) for got, clip in labelled if clip is not None]
    texts = {id(c): " ".join(s.text for s in segments if mixed.clip_at(s.start, s.end) is c) for c in mixed.clips}
    refs = [normalize(c.reference, c.language) for c in mixed.clips]
    hyps = [normalize(texts[id(c)], c.language) for c in mixed.clips]
    by_language = {}
    for lang in sorted({c.language for c in mixed.clips}):
        keep = [k for k, c in enumerate(mixed.clips) if c.language == lang]
        by_language[lang] = round(jiwer.wer([refs[k] for k in keep], [hyps[k] for k in keep]), 4)
    return dict(language_share=round(sum(got == clip.language for got, clip in labelled) / max(1, len(labelled)), 4),
                segments=len(labelled), wer=round(jiwer.wer(refs, hyps), 4), wer_by_language=by_language,
                languages_per_segment=[got for got, _ in labelled])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "multilingual.json")
    args = ap.parse_args(argv)

    from specwhisper.hardware.threads import configure

    configure(args.threads)
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_multilingual_file
    from specwhisper.pipeline.options import run_options

    engine = AsrEngine("base")
    runs, turn = [], 0
    for layout, shape in LAYOUTS.items():
        mixed = build_multilingual_file(CLIPS, ROOT / "bench" / ".cache", name=f"multilingual-{layout}", **shape)
        audio = load_audio(mixed.path)
        names = list(SYSTEMS)
        for system in names[turn % len(names):] + names[: turn % len(names)]:  # a rotating order: the machine drifts
            t = time.perf_counter()
            result = engine.transcribe(audio, run_options(SYSTEMS[system]).decode)
            wall = time.perf_counter() - t
            row = dict(name=f"{system}, {layout}", system=system, file=layout, audio_s=round(mixed.duration, 1),
                       clips=len(mixed.clips), wall_s=round(wall, 2), rtf=round(wall / mixed.duration, 4),
                       windows=len(result.chunks), **score(mixed, result.segments))
            runs.append(row)
            print(f"{row['name']:>34}: share {row['language_share']:.3f} of {row['segments']} segments, WER {row['wer']:.3f} "
                  f"{row['wer_by_language']}, {wall:.1f} s", flush=True)
        turn += 1
        one = next(r for r in runs if r["name"] == f"one language, {layout}")
        for r in runs:
            if r["file"] == layout and r is not one:
                r["wer_vs_one_language"] = round(r["wer"] - one["wer"], 4)
                r["speedup"] = round(one["wall_s"] / r["wall_s"], 3)
    args.out.write_text(json.dumps({
        "machine": machine(args.threads),
        "clips": CLIPS,
        "note": "one engine (base, greedy, plain decoding), systems interleaved; language_share: segments over a clip "
                "labelled with the clip's language; wer: corpus WER of the clips, each normalised in its language; "
                "speedup and wer_vs_one_language: against the one-language run of the same file",
        "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
