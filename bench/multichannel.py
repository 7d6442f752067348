"""Channels as speakers (``--multichannel``) against diarizing the downmix, on recordings with one speaker
per channel: faster-whisper's stereo clip (two speakers talking over each other) and two-party calls
built from the eval clips (``specwhisper.evaluation.calls``) whose voices leak into each other's channel
at -30, -20 and -12 dB (none in one), the parties taking turns or talking over each other for 1.5 s.

    python bench/multichannel.py [--model base] [--out FILE]

Per recording and way:
- ``mix, diarized``: the downmix transcribed with ``--diarize`` (what a mono pipeline does);
- ``channels, bleed kept``: each channel transcribed as it is, its channel its speaker;
- ``multichannel``: the product's, each channel's bleed of the other muted first.

``wer``: each party's words (by speaker: the channel, or the diarizer's speaker mapped to the party it
overlaps most) against what the party said, pooled (a word heard in the wrong party counts twice: missing
from one, inserted into the other); ``der``: the speakers' turns (segments) against each party's speech by
silero-vad on its clean voice (collar 0.25 s, overlap scored); ``rtf``: wall seconds per audio second.
Writes bench/results/multichannel.json.
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


def party_texts(transcript, speakers: list[str], reference_turns) -> list[str]:
    """Each party's words: segments of speaker ``speakers[p]``; a diarizer's labels mapped to the party whose
    reference turns they overlap most."""
    if any(s.speaker not in speakers for s in transcript.segments):
        overlap: dict[str, dict[str, float]] = {}
        for s in transcript.segments:
            for t in reference_turns:
                shared = max(0.0, min(s.end, t.end) - max(s.start, t.start))
                overlap.setdefault(s.speaker, {}).setdefault(t.speaker, 0.0)
                overlap[s.speaker][t.speaker] += shared
        mapping = {k: max(v, key=v.get) if v else None for k, v in overlap.items()}
    else:
        mapping = {k: k for k in speakers}
    return [" ".join(s.text for s in transcript.segments if mapping.get(s.speaker) == p) for p in speakers]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="base")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "multichannel.json"))
    args = ap.parse_args()

    import soundfile as sf
    import torch

    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.calls import build_call
    from specwhisper.evaluation.diarization import EVAL_DIR, der, vad_turns
    from specwhisper.evaluation.transcripts import load_manifest, wer
    from specwhisper.pipeline.config import PipelineConfig, RunOptions
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.results.transcript import SpeakerTurn

    items = load_manifest()
    pipeline = Pipeline(PipelineConfig(model=args.model, draft="none"))
    decode = DecodeOptions(language="en")
    speakers = ["CHANNEL_1", "CHANNEL_2"]
    recordings = []
    stereo = EVAL_DIR / "faster-whisper" / "stereo_diarization.wav"
    left, right = next(i for i in items if i.file == "faster-whisper/stereo_diarization.wav").reference.split(" | ")
    clean = sf.read(str(stereo), dtype="float32", always_2d=True)[0].T
    recordings.append(("stereo clip (overlap 2.5 s)", load_audio(stereo, channels=True), clean,
                       (left.removeprefix("LEFT: "), right.removeprefix("RIGHT: "))))
    for bleed in (None, -30.0, -20.0, -12.0):
        for overlap in (0.0, 1.5):
            call = build_call(items, bleed_db=bleed, overlap_s=overlap)
            name = f"call, bleed {'none' if bleed is None else f'{bleed:.0f} dB'}, {'turns' if not overlap else f'overlap {overlap} s'}"
            recordings.append((name, call.channels, call.voices, call.references))
    runs = []
    for name, channels, voices, references in recordings:
        reference_turns = [t for k, v in enumerate(voices) for t in vad_turns(v, speakers[k])]
        seconds = channels.shape[1] / 16000
        ways = {
            "mix, diarized": lambda: pipeline.run(channels.mean(axis=0), RunOptions(decode=decode, diarize=True,
                                                                                   num_speakers=2)),
            "channels, bleed kept": lambda: _channels_as_they_are(pipeline, channels, decode),
            "multichannel": lambda: pipeline.run(channels, RunOptions(decode=decode, multichannel=True)),
        }
        for way, run in ways.items():
            t = time.perf_counter()
            transcript = run()
            wall = time.perf_counter() - t
            texts = party_texts(transcript, speakers, reference_turns)
            turns = [SpeakerTurn(s.start, s.end, s.speaker) for s in transcript.segments if s.speaker]
            row = {"name": f"{name}: {way}", "wer": round(wer(list(references), texts), 4),
                   "der": round(float(der(reference_turns, turns)), 4), "rtf": round(wall / seconds, 3)}
            runs.append(row)
            print(json.dumps(row), flush=True)
    Path(args.out).write_text(json.dumps({"machine": machine(torch.get_num_threads()), "model": args.model,
                                          "runs": runs}, indent=1) + "\n")


def _channels_as_they_are(pipeline, channels, decode):
    from specwhisper.pipeline.channels import merge_channels
    from specwhisper.pipeline.config import RunOptions

    return merge_channels(pipeline.run_many(list(channels), RunOptions(decode=decode)))


if __name__ == "__main__":
    main()
