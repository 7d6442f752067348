"""openai-whisper's ``hallucination_silence_threshold`` (specwhisper.asr.hallucination) on audio built
from real speech: two clips of ../shared/eval with 20-30 s of music-like tones between them
(specwhisper.evaluation.music_gap), over which Whisper base writes YouTube sign-offs ("Don't forget
to subscribe to my channel!", "Thanks for watching!"). With the option the invented text is gone and
the speech's words stay."""

from __future__ import annotations

import pytest

from specwhisper.asr.engine import DecodeOptions
from specwhisper.evaluation.music_gap import MusicGap, music_gap
from specwhisper.evaluation.transcripts import wer
from specwhisper.pipeline.core import RunOptions

THRESHOLD = 2.0  # seconds


def _built(manifest, first: str, seconds: float, second: str) -> MusicGap:
    items = {i.file: i for i in manifest}
    return music_gap(items[first], seconds, items[second])


def _starts(transcript) -> list[float]:
    return [w.start for s in transcript.segments for w in s.words]


def _check(base_pipeline, built: MusicGap) -> None:
    plain = base_pipeline.run(built.audio, RunOptions(decode=DecodeOptions(language="en", word_timestamps=True)))
    guarded = base_pipeline.run(built.audio, RunOptions(decode=DecodeOptions(language="en", hallucination_silence_threshold=THRESHOLD)))
    assert built.inside(_starts(plain)) >= 2, plain.text  # what the option is for: Whisper base writes text over the tones
    assert all(s.words for s in guarded.segments)  # timed words, though word timestamps were not asked for
    assert built.inside(_starts(guarded)) == 0, guarded.text
    assert wer([built.reference], [guarded.text]) <= 0.2, guarded.text  # the speech is kept
    assert wer([built.reference], [guarded.text]) < wer([built.reference], [plain.text])


def test_text_invented_over_music_is_dropped_and_speech_kept(base_pipeline, manifest):
    """One 30 s window: 5.8 s of speech, 20 s of tones, 4.3 s of speech."""
    _check(base_pipeline, _built(manifest, "cuttledoc-fleurs/fleurs-en-003.ogg", 20.0, "cuttledoc-fleurs/fleurs-en-004.ogg"))


@pytest.mark.slow  # the test above covers the rules; this one their mapping onto several chunks and a fallback
def test_over_several_chunks(base_pipeline, manifest):
    """51 s in three chunks: JFK, 30 s of tones ("Thanks for watching!" at temperature 0.4), LJ001-0001."""
    _check(base_pipeline, _built(manifest, "openai-whisper/jfk.flac", 30.0, "coqui-tts-ljspeech/LJ001-0001.wav"))


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "2", True])
def test_bad_threshold_is_a_one_line_error(value):
    with pytest.raises(ValueError) as err:
        RunOptions(decode=DecodeOptions(hallucination_silence_threshold=value)).validate()
    assert str(err.value).startswith("hallucination silence threshold must be a number of seconds > 0") and "\n" not in str(err.value)
