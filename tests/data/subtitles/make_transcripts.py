"""Writes the transcripts tests/test_subtitles.py lays out: real speech of ../shared/eval through
the base model with word timestamps (plain decoding), as our json.

- ``english.json``: English clips of the eval set one after another, with pauses of 0.4-4.5 s
  (over 3 s twice: openai-whisper's layout starts a new cue after such a pause);
- ``french.json``: a French clip (accents, elisions);
- ``meeting.json``: samples/meeting-dev00.wav diarized (two speakers).

Run from the repository root: ``python tests/data/subtitles/make_transcripts.py``."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import eval_dir
from specwhisper.pipeline.core import Pipeline
from specwhisper.pipeline.config import PipelineConfig, RunOptions
from specwhisper.pipeline.writers import render

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
ENGLISH = [  # (clip, pause after it in seconds)
    ("openai-whisper/jfk.flac", 1.0),
    ("coqui-tts-ljspeech/LJ001-0001.wav", 4.0),
    ("mfa/acoustic_corpus.wav", 0.5),
    ("cuttledoc-fleurs/fleurs-en-002.ogg", 3.5),
    ("lhotse/2412-153948-0000.flac", 0.4),
    ("mfa/mfa_thoughts.flac", 4.5),
    ("coqui-tts-ljspeech/LJ001-0003.wav", 0.0),
]


def main() -> None:
    pipeline = Pipeline(PipelineConfig(model="base", draft="none", device="cpu"))
    words = RunOptions(decode=DecodeOptions(word_timestamps=True))
    pieces = []
    for clip, pause in ENGLISH:
        pieces += [load_audio(eval_dir() / clip), np.zeros(int(pause * SAMPLE_RATE), np.float32)]
    runs = {
        "english": pipeline.run(np.concatenate(pieces), words, source="english.wav"),
        "french": pipeline.run_file(eval_dir() / "cuttledoc-fleurs/fleurs-fr-000.ogg", words),
        "meeting": pipeline.run_file(ROOT / "samples/meeting-dev00.wav",
                                     RunOptions(decode=DecodeOptions(word_timestamps=True), diarize=True)),
    }
    for name, transcript in runs.items():
        transcript.source = f"{name}.wav"
        (HERE / f"{name}.json").write_text(render(transcript, "json"), encoding="utf-8")


if __name__ == "__main__":
    main()
