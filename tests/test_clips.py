"""``clip_timestamps`` (openai-whisper's and faster-whisper's): only the clips of a file are heard, and
the transcript keeps the file's times. On three public clips back to back with a second of silence
between them, clipping the first and the last gives their words alone, dated inside the clips (tiny.en:
which audio is heard does not depend on the model)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import normalize, wer
from specwhisper.pipeline.api import Transcriber

NAMES = ("coqui-tts-ljspeech/LJ001-0001.wav", "openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-003.ogg")


@pytest.fixture(scope="module")
def three(manifest):
    """The three clips with a second of silence after each: the audio, each clip's (start, end) and reference."""
    items = {i.file: i for i in manifest}
    pieces, where, t = [], [], 0.0
    for name in NAMES:
        audio = load_audio(items[name].path)
        where.append((t, t + len(audio) / SAMPLE_RATE, items[name].reference))
        pieces += [audio, np.zeros(SAMPLE_RATE, np.float32)]
        t += len(audio) / SAMPLE_RATE + 1.0
    return np.concatenate(pieces), where


def test_only_the_clips_are_transcribed_at_the_files_times(tiny_pipeline, three):
    audio, ((a0, b0, first), (_, _, middle), (a2, _, last)) = three
    api = Transcriber(tiny_pipeline)
    clips = f"{a0},{b0 + 0.5},{a2 - 0.5}"  # the last clip runs to the end
    # openai-whisper's string and faster-whisper's list are the same clips: the same run
    listed = [a0, b0 + 0.5, a2 - 0.5]
    assert api.options(clip_timestamps=listed) == api.options(clip_timestamps=clips)
    assert api.options(clip_timestamps=listed) != api.options(clip_timestamps=[a0, b0 + 0.5])
    got = api.transcribe(audio, sample_rate=SAMPLE_RATE, language="en", word_timestamps=True, clip_timestamps=clips)
    assert wer([first + " " + last], [got.text]) <= 0.1, got.text
    assert "fellow americans" not in normalize(got.text) and "fellow americans" in normalize(middle)
    for seg in got.segments:
        assert a0 <= seg.start < seg.end <= b0 + 0.5 or a2 - 0.5 <= seg.start < seg.end <= len(audio) / SAMPLE_RATE, seg
        assert all(seg.start <= w.start <= w.end <= seg.end for w in seg.words), seg


def test_a_clip_past_the_end_transcribes_nothing_and_says_so(base_pipeline, three, caplog):
    audio, _ = three
    with caplog.at_level(logging.WARNING):
        got = Transcriber(base_pipeline).transcribe(audio, sample_rate=SAMPLE_RATE, language="en",
                                                    clip_timestamps="500,600")
    assert got.segments == [] and got.text == ""
    assert any("no clip is within" in r.getMessage() for r in caplog.records), caplog.text


def test_a_clip_past_the_end_among_others_is_left_out_with_a_warning(tiny_pipeline, three, caplog):
    """The clips in the file are heard; the one past its end is named in one warning line."""
    audio, ((a0, b0, first), _, _) = three
    seconds = len(audio) / SAMPLE_RATE
    with caplog.at_level(logging.WARNING):
        got = Transcriber(tiny_pipeline).transcribe(audio, sample_rate=SAMPLE_RATE, language="en",
                                                    clip_timestamps=[a0, b0 + 0.5, 500, 520])
    assert wer([first], [got.text]) <= 0.1, got.text
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warned == [f"clip_timestamps: the clip from 500 s past the {seconds:.1f} s of audio left out"], warned


@pytest.mark.parametrize("clips, message", [
    ("", "needs start,end seconds (e.g. 0,30 or 0,30,60,90)"),
    ("1,x", "must be start,end seconds separated by commas, got 'x'"),
    ("-1,3", "must be finite seconds >= 0, got -1"),
    ("5,3", "each clip must end after it starts, got 5,3"),
    ("0,10,5,20", "clips must be in order and not overlap: 5 starts before 10"),
    ([0, "nan"], "must be finite seconds >= 0, got nan"),
])
def test_bad_clips_are_a_one_line_error(base_pipeline, clips, message):
    with pytest.raises(ValueError) as info:
        Transcriber(base_pipeline).options(clip_timestamps=clips)
    assert str(info.value) == f"clip_timestamps: {message}"


def test_speakers_come_from_the_clips_alone(tiny_pipeline, diarizer, monkeypatch):
    """pyannote's dev00 (AMI, two speakers, 30 s) with --diarize: the diarization hears the clips back to
    back, so every turn lies inside a clip, and within one clip (5-25 s) the speakers are about as right
    as when the whole file is heard (DER 0.146 against 0.133 there; tiny.en: the speakers do not depend on
    the model)."""
    from specwhisper.evaluation.diarization import der, pyannote_dev_files

    monkeypatch.setattr(tiny_pipeline, "_diarizer", diarizer)  # the session's diarizer
    dev00 = next(f for f in pyannote_dev_files() if f.uri == "dev00")
    api = Transcriber(tiny_pipeline)
    one = api.transcribe(str(dev00.audio), language="en", diarize=True, clip_timestamps="5,25")
    assert one.turns and all(5.0 <= t.start < t.end <= 25.0 for t in one.turns), one.turns
    assert der(dev00.reference, one.turns, uem=(5.0, 25.0)) <= 0.25
    assert all(w.speaker for s in one.segments for w in s.words)
    two = api.transcribe(str(dev00.audio), language="en", diarize=True, clip_timestamps="0,12,18,30")
    assert all(t.end <= 12.0 or t.start >= 18.0 for t in two.turns), two.turns
