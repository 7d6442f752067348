"""The pipeline's reports between decoder batches (pipeline.core.BETWEEN_BATCHES) are points where other
work may use the model: the HTTP server and the web UI run short requests there, inside a long one's run.
With the embedded Whisper tiny.en on real audio (what may run between batches does not depend on the
model), for several option sets: a 42 s file transcribed with a short transcription of jfk.wav run inside
its first two reports between batches gets the segments it gets alone (tokens, times, words), and so does
each short one; the time they took is not in its timings."""

from __future__ import annotations

import time

import pytest

from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import build_long_file
from specwhisper.pipeline.core import BETWEEN_BATCHES
from specwhisper.pipeline.config import RunOptions

OPTION_SETS = {
    "defaults": DecodeOptions(batch_size=1),
    "conditioned on the text before": DecodeOptions(condition_on_previous_text=True),
    "beam search": DecodeOptions(batch_size=1, beam_size=2),
    "vad filter": DecodeOptions(batch_size=1, vad_filter=True),
    # word timestamps, and the skipping that reads them
    "silence threshold": DecodeOptions(batch_size=1, word_timestamps=True, hallucination_silence_threshold=2.0),
}


def _facts(transcript) -> list[tuple]:
    return [(s.tokens, s.start, s.end, [(w.text, w.start, w.end, w.probability) for w in s.words]) for s in transcript.segments]


@pytest.fixture(scope="module")
def audio(eval_root, tmp_path_factory):
    long = build_long_file("dense", tmp_path_factory.mktemp("long"), 42, seed=0)
    return load_audio(long.path), load_audio(eval_root / "whisper.cpp/jfk.wav")


INNER = RunOptions(decode=DecodeOptions(batch_size=1, word_timestamps=True, language="en"))  # the short transcription's


@pytest.fixture(scope="module")
def short_alone(tiny_pipeline, audio):
    return _facts(tiny_pipeline.run(audio[1], INNER))


# "defaults" is slow: every other batch_size=1 set runs the same reports between batches with more on top
# (the default run's "beam search", "vad filter" and "silence threshold" cover it)
@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.slow) if name == "defaults" else name for name in OPTION_SETS])
def test_work_run_between_batches_leaves_both_transcripts_as_alone(tiny_pipeline, audio, short_alone, name):
    long, short = audio
    outer, inner = RunOptions(decode=OPTION_SETS[name]), INNER
    alone = _facts(tiny_pipeline.run(long, outer))
    inside: list = []
    paused = [0.0]

    def report(stage: str, fraction: float) -> None:
        if stage in BETWEEN_BATCHES and 0 < fraction < 1 and len(inside) < 2:  # the first two reports
            t = time.perf_counter()
            inside.append(_facts(tiny_pipeline.run(short, inner)))
            time.sleep(0.5)
            paused[0] += time.perf_counter() - t

    t = time.perf_counter()
    shared = tiny_pipeline.run(long, outer, report)
    wall = time.perf_counter() - t
    assert inside, "no report between batches"
    assert _facts(shared) == alone
    assert all(facts == short_alone for facts in inside)
    assert shared.timings["asr"] <= wall - paused[0] + 0.05, (shared.timings, wall, paused)
