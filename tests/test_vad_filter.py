"""--vad-filter (the speech alone, joined; the pauses unheard) and --without-timestamps, on audio built
from jfk.flac and LJ001-0001.wav with 20 s of silence between (tiny.en: what is decoded does not depend on
the model; two different sentences, as a sentence said twice is text compressed enough to be decoded again
at higher temperatures), and a window of base's that stops early."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.evaluation.transcripts import load_manifest, wer

SR = 16000


@pytest.fixture(scope="module")
def twice(eval_root):
    """JFK, 20 s of silence, LJ001-0001: the audio, JFK's length, the whole length and the references joined."""
    from specwhisper.audio.loading import load_audio

    jfk = load_audio(eval_root / "openai-whisper/jfk.flac")
    lj = load_audio(eval_root / "coqui-tts-ljspeech/LJ001-0001.wav")
    refs = {i.file: i.reference for i in load_manifest(eval_root)}
    ref = refs["openai-whisper/jfk.flac"] + " " + refs["coqui-tts-ljspeech/LJ001-0001.wav"]
    audio = np.concatenate([jfk, np.zeros(20 * SR, np.float32), lj])
    return audio, len(jfk) / SR, len(audio) / SR, ref


def _run(pipeline, audio, **values):
    from specwhisper.pipeline.options import run_options

    return pipeline.run(audio, run_options({"language": "en", **values}))


def test_vad_filter_decodes_the_speech_alone_with_the_files_times(tiny_pipeline, twice):
    audio, length, total, ref = twice
    t = _run(tiny_pipeline, audio, vad_filter=True, word_timestamps=True)
    assert t.model["mode"] == "vad-filter" and t.model["timestamps"] is True
    assert wer([ref], [t.text]) < 0.1, t.text
    # one window held both sentences (21 s of speech); the times are the file's: the second after the pause
    second = [w for s in t.segments for w in s.words if w.start >= length + 20.0 - 0.5]
    assert [w.text.strip(" ,.").lower() for w in second][:2] == ["printing", "in"]
    assert [w.text.strip(" ,.").lower() for w in second][-2:] == ["the", "exhibition"]
    assert total - 1.5 < second[-1].end <= total, (second[-1], total)
    assert not any(length + 0.5 < w.start and w.end < length + 19.5 for s in t.segments for w in s.words)  # none in the pause


def test_a_window_that_stops_early_seeks_on_in_the_joined_speech(base_pipeline, eval_root):
    """JFK, 15 s of quiet noise, then LJ001-0004 (the VAD hears both): one joined window wrote JFK's
    sentence and stopped; the speech after its last timestamp is decoded again, as faster-whisper's
    ``vad_filter`` seeks there."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.noise import pink_noise

    jfk = load_audio(eval_root / "openai-whisper/jfk.flac")
    lj = load_audio(eval_root / "coqui-tts-ljspeech/LJ001-0004.wav")
    refs = {i.file: i.reference for i in load_manifest(eval_root)}
    noise = pink_noise(15 * SR, seed=0) * np.float32(10 ** (-50 / 20))
    t = _run(base_pipeline, np.concatenate([jfk, noise, lj]).astype(np.float32), vad_filter=True)
    assert wer([refs["openai-whisper/jfk.flac"] + " " + refs["coqui-tts-ljspeech/LJ001-0004.wav"]], [t.text]) < 0.15, t.text


def test_without_timestamps_gives_one_segment_per_window(tiny_pipeline, twice):
    audio, length, total, ref = twice
    t = _run(tiny_pipeline, audio, vad_filter=True, without_timestamps=True)
    assert t.model["timestamps"] is False and t.stats.generated_tokens > 0
    assert len(t.segments) == 1 and wer([ref], [t.text]) < 0.1, t.text
    seg = t.segments[0]  # the window's speech: from the first sentence's start to the second's end
    assert seg.start < 1.0 and total - 1.0 < seg.end <= total, (seg.start, seg.end, total)
    assert not any(0 <= tok - tiny_pipeline.asr.special.timestamp_begin for tok in seg.tokens)


def test_the_vads_silence_and_padding_settings_choose_the_spans(tiny_pipeline, eval_root):
    """A LibriSpeech sentence, 1 s of silence, JFK. By default the VAD ends a span at 300 ms of silence (its
    pauses inside the sentence too) and pads each by 200 ms; ``vad_min_silence_ms=2000`` hears the whole as
    one span, ``vad_speech_pad_ms=0`` keeps the same spans 0.2 s narrower on each side; with ``vad_filter``
    too. Each transcript is the two sentences (what is decoded does not depend on where the spans end)."""
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio

    clip, jfk = load_audio(eval_root / "lhotse/2412-153948-0000.flac"), load_audio(eval_root / "whisper.cpp/jfk.wav")
    audio = np.concatenate([clip, np.zeros(SR, np.float32), jfk])
    refs = {i.file: i.reference for i in load_manifest(eval_root)}
    ref = refs["lhotse/2412-153948-0000.flac"] + " " + refs["whisper.cpp/jfk.wav"]

    def spans(**values):
        result = tiny_pipeline.asr.transcribe(audio, DecodeOptions(language="en", **values))
        assert wer([ref], [" ".join(s.text for s in result.segments)]) < 0.15, (values, result.segments)
        return sorted(v for c in result.chunks if c.depth == 0 for v in c.voiced)  # the planned chunks, not re-decodes

    default, padless = spans(), spans(vad_speech_pad_ms=0)
    gap = (len(clip), len(clip) + SR)
    assert len(default) >= 3 and any(e <= gap[0] + 0.3 * SR and s >= gap[1] - 0.3 * SR for (_, e), (s, _) in zip(default, default[1:]))
    assert spans(vad_min_silence_ms=2000) == [(default[0][0], default[-1][1])]
    assert len(padless) == len(default) and all(s - a == round(0.2 * SR) for (a, _), (s, _) in zip(default[1:], padless[1:]))
    assert len(spans(vad_filter=True)) > 1 and len(spans(vad_filter=True, vad_min_silence_ms=2000)) == 1
