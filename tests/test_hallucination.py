"""openai-whisper's ``hallucination_silence_threshold`` (specwhisper.asr.hallucination) on audio built
from real speech: two clips of ../shared/eval with 20-30 s of music-like tones between them, over
which Whisper base writes YouTube sign-offs ("Don't forget to subscribe to my channel ...",
"Thanks for watching!"). With the option the invented text is gone and the speech's words stay."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.asr.engine import DecodeOptions
from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import wer
from specwhisper.pipeline.core import RunOptions

THRESHOLD = 2.0  # seconds; the value openai-whisper's pull request was tuned with


def tones(seconds: float, db: float, seed: int = 0) -> np.ndarray:
    """Music-like: a random melody of decaying notes (a sine and two harmonics, 100 a minute, on a
    major scale from A3) over a 110 Hz drone, peaking at ``db`` dBFS."""
    rng = np.random.default_rng(seed)
    n = int(seconds * SAMPLE_RATE)
    t = np.arange(n) / SAMPLE_RATE
    out = 0.3 * np.sin(2 * np.pi * 110 * t)
    beat = 0.6
    for k in range(int(np.ceil(seconds / beat))):
        f = 220 * 2 ** ((0, 2, 4, 5, 7, 9, 11, 12)[rng.integers(8)] / 12)
        a, b = int(k * beat * SAMPLE_RATE), min(n, int((k + 1) * beat * SAMPLE_RATE))
        tt = t[a:b] - k * beat
        out[a:b] += np.exp(-3 * tt) * (np.sin(2 * np.pi * f * tt) + 0.5 * np.sin(4 * np.pi * f * tt) + 0.25 * np.sin(6 * np.pi * f * tt))
    return (out / np.abs(out).max() * 10 ** (db / 20)).astype(np.float32)


def _built(manifest, first: str, seconds: float, second: str) -> tuple[np.ndarray, str, tuple[float, float]]:
    """``first`` clip, ``seconds`` of tones at -30 dBFS, ``second`` clip: the audio, its reference and
    where the tones are (seconds)."""
    items = {i.file: i for i in manifest}
    a, b = load_audio(items[first].path), load_audio(items[second].path)
    audio = np.concatenate([a, tones(seconds, -30.0), b])
    gap = (len(a) / SAMPLE_RATE, len(a) / SAMPLE_RATE + seconds)
    return audio, f"{items[first].reference} {items[second].reference}", gap


def _words_inside(transcript, gap: tuple[float, float]) -> list[str]:
    """Words said to start over the tones (0.5 s inside them)."""
    return [w.text for s in transcript.segments for w in s.words if gap[0] + 0.5 < w.start < gap[1] - 0.5]


def _check(base_pipeline, audio: np.ndarray, reference: str, gap: tuple[float, float]) -> None:
    plain = base_pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en", word_timestamps=True)))
    guarded = base_pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en", hallucination_silence_threshold=THRESHOLD)))
    invented = _words_inside(plain, gap)
    assert len(invented) >= 2, plain.text  # what the option is for: Whisper base writes text over the tones
    assert all(s.words for s in guarded.segments)  # timed words, though word timestamps were not asked for
    assert _words_inside(guarded, gap) == [], guarded.text
    assert wer([reference], [guarded.text]) <= 0.2, guarded.text  # the speech is kept
    assert wer([reference], [guarded.text]) < wer([reference], [plain.text])


def test_text_invented_over_music_is_dropped_and_speech_kept(base_pipeline, manifest):
    """One 30 s window: 5.8 s of speech, 20 s of tones, 4.3 s of speech."""
    _check(base_pipeline, *_built(manifest, "cuttledoc-fleurs/fleurs-en-003.ogg", 20.0, "cuttledoc-fleurs/fleurs-en-004.ogg"))


@pytest.mark.slow  # the test above covers the rules; this one their mapping onto several chunks and a fallback
def test_over_several_chunks(base_pipeline, manifest):
    """51 s in three chunks: JFK, 30 s of tones ("Thanks for watching!" at temperature 0.4), LJ001-0001."""
    _check(base_pipeline, *_built(manifest, "openai-whisper/jfk.flac", 30.0, "coqui-tts-ljspeech/LJ001-0001.wav"))


@pytest.mark.parametrize("value", [0, -1.0, float("nan"), float("inf"), "2"])
def test_bad_threshold_is_a_one_line_error(value):
    with pytest.raises(ValueError) as err:
        RunOptions(decode=DecodeOptions(hallucination_silence_threshold=value)).validate()
    assert str(err.value).startswith("hallucination silence threshold must be a number of seconds > 0") and "\n" not in str(err.value)
