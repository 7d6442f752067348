"""``import specwhisper.whisperx as whisperx``: WhisperX's README flow (load_model, load_audio, transcribe, align,
DiarizationPipeline, assign_word_speakers) on two speakers with their references; the speakers assigned as
WhisperX's own ``assign_word_speakers`` (its diarize.py, vendored) assigns them; the result written by WhisperX's
own writers; the diarizer's DataFrame scored against dev00's RTTM; what is not offered refused in one line."""

from __future__ import annotations

import io
import re
import sys
import types

import numpy as np
import pytest

import specwhisper.whisperx as whisperx
from specwhisper.evaluation.diarization import der_pair, pyannote_dev_files
from specwhisper.evaluation.transcripts import normalize, wer
from specwhisper.results.transcript import SpeakerTurn
from tests.test_interop import _peer, whisperx_schema, whisperx_utils  # the vendored peers' loader and modules

PAUSE_S = 1.5
COLUMNS = ["segment", "label", "speaker", "start", "end"]  # WhisperX's DataFrame


@pytest.fixture(scope="module")
def whisperx_diarize():
    """WhisperX 3.8.6's diarize.py, its imports of WhisperX's own modules stood in for (its audio loader is
    not used by ``assign_word_speakers``; its schema is the vendored one)."""
    package = types.ModuleType("whisperx")
    audio = types.SimpleNamespace(load_audio=None, SAMPLE_RATE=16000)
    logs = types.SimpleNamespace(get_logger=lambda name: __import__("logging").getLogger(name))
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "whisperx", package)
        mp.setitem(sys.modules, "whisperx.audio", audio)
        mp.setitem(sys.modules, "whisperx.log_utils", logs)
        mp.setitem(sys.modules, "whisperx.schema", whisperx_schema)
        return _peer("whisperx_diarize")


@pytest.fixture(scope="module")
def two_speakers(manifest, tmp_path_factory):
    """JFK, 1.5 s of silence, then an LJSpeech reader (another voice): a file, its reference, the boundary."""
    import soundfile as sf

    from specwhisper.audio.loading import load_audio

    items = {m.file: m for m in manifest}
    first, second = items["openai-whisper/jfk.flac"], items["coqui-tts-ljspeech/LJ001-0001.wav"]
    a, b = load_audio(first.path), load_audio(second.path)
    path = tmp_path_factory.mktemp("whisperx") / "two.wav"
    sf.write(path, np.concatenate([a, np.zeros(int(PAUSE_S * 16000), np.float32), b]), 16000)
    return path, f"{first.reference} {second.reference}", len(a) / 16000 + PAUSE_S


@pytest.fixture(scope="module")
def flow(two_speakers):
    """WhisperX's README, step by step (a copy of each result kept before the next step changes it)."""
    import copy

    path, _, _ = two_speakers
    model = whisperx.load_model("base", "cpu", compute_type="float32", language="en")
    audio = whisperx.load_audio(str(path))
    result = model.transcribe(audio, batch_size=4)
    transcribed = copy.deepcopy(result)
    model_a, metadata = whisperx.load_align_model(language_code=result["language"], device="cpu")
    aligned = whisperx.align(result["segments"], model_a, metadata, audio, "cpu", return_char_alignments=False)
    kept = copy.deepcopy(aligned)
    diarize_segments = whisperx.diarize.DiarizationPipeline(device="cpu")(audio, min_speakers=1, max_speakers=3)
    assigned = whisperx.assign_word_speakers(diarize_segments, aligned)
    return dict(audio=audio, transcribed=transcribed, aligned=kept, frame=diarize_segments, assigned=assigned)


def test_transcribe_gives_whisperx_segments(flow, two_speakers):
    _, reference, boundary = two_speakers
    result = flow["transcribed"]
    assert result["language"] == "en" and result["segments"]
    for s in result["segments"]:
        assert set(s) == {"text", "start", "end", "avg_logprob"} and s["start"] < s["end"]
        assert s["start"] == round(s["start"], 3)
    assert wer([reference], [" ".join(s["text"] for s in result["segments"])]) <= 0.1


def test_align_dates_each_word_of_the_text(flow, two_speakers):
    _, reference, boundary = two_speakers
    aligned = flow["aligned"]
    words = aligned["word_segments"]
    assert words == [w for s in aligned["segments"] for w in s["words"]]
    assert all(set(w) == {"word", "start", "end", "score"} and 0 <= w["score"] <= 1 for w in words)
    starts = [w["start"] for w in words]
    assert starts == sorted(starts) and all(w["start"] <= w["end"] for w in words)
    said = normalize(" ".join(s["text"] for s in flow["transcribed"]["segments"])).split()
    assert [normalize(w["word"]) for w in words if normalize(w["word"])] == said  # the text given, word for word
    country = [w for w in words if normalize(w["word"]) == "country"]
    assert len(country) == 2 and country[-1]["end"] < boundary  # JFK's words before the pause
    assert all(w["start"] > boundary - 0.5 for w in words[len(words) - 5 :])  # the reader's after it
    assert len(aligned["segments"]) == 2  # a segment per sentence: JFK's, the reader's


def test_align_keeps_what_it_cannot_date_and_refuses_what_is_not_segments(flow, two_speakers):
    """WhisperX's ``[1, n]`` tensor of the audio is taken; a segment with no text, or past the audio's end, is kept
    as given without words ("resorting to original" there), in its place; the result dict itself, a segment
    without times or with text for times: one line each."""
    import torch

    _, _, boundary = two_speakers
    model_a, metadata = whisperx.load_align_model(language_code="en", device="cpu")
    n = len(flow["aligned"]["segments"])
    extra = [{"text": " ", "start": 1.0, "end": 2.0}, {"text": " gone", "start": 90.0, "end": 95.0}]
    given = [dict(s) for s in flow["transcribed"]["segments"]] + [dict(s) for s in extra]
    aligned = whisperx.align(given, model_a, metadata, torch.from_numpy(flow["audio"])[None], "cpu")
    assert aligned["segments"][:n] == flow["aligned"]["segments"]  # as from the 1-D array
    assert aligned["segments"][n:] == [{**s, "words": []} for s in extra]
    for transcript, message in [(flow["transcribed"], "transcript is the list of segments (result['segments']), got a dict"),
                                ([{"text": " so"}], "segment 1 is not a dict with 'start', 'end' and 'text'"),
                                ([{"text": " so", "start": "0", "end": 1.0}], "segment 1: start and end are seconds")]:
        with pytest.raises(ValueError, match=re.escape(message)) as error:
            whisperx.align(transcript, model_a, metadata, flow["audio"], "cpu")
        assert "\n" not in str(error.value)


def test_speakers_are_assigned_as_whisperx_assigns_them(flow, whisperx_diarize, two_speakers):
    import copy

    _, _, boundary = two_speakers
    frame = flow["frame"]
    assert list(frame.columns) == COLUMNS and frame["speaker"].nunique() == 2
    theirs = whisperx_diarize.assign_word_speakers(frame, copy.deepcopy(flow["aligned"]))
    assert flow["assigned"] == theirs
    nearest = whisperx_diarize.assign_word_speakers(frame, copy.deepcopy(flow["aligned"]), fill_nearest=True)
    assert whisperx.assign_word_speakers(frame, copy.deepcopy(flow["aligned"]), fill_nearest=True) == nearest
    words = flow["assigned"]["word_segments"]
    jfk = {w.get("speaker") for w in words if w["end"] < boundary} - {None}
    reader = {w.get("speaker") for w in words if w["start"] > boundary} - {None}
    assert len(jfk) == 1 and len(reader) == 1 and jfk != reader


def test_whisperxs_writers_write_the_result(flow, two_speakers):
    result = {**flow["assigned"], "language": "en"}
    for fmt in ("srt", "vtt", "txt", "tsv", "json"):
        buf = io.StringIO()
        whisperx_utils.get_writer(fmt, ".").write_result(
            result, file=buf, options={"max_line_width": None, "max_line_count": None, "highlight_words": True})
        assert "fellow" in buf.getvalue().lower(), fmt


def test_the_diarization_frame_scores_against_the_rttm():
    dev00 = next(f for f in pyannote_dev_files() if f.uri == "dev00")
    frame = whisperx.DiarizationPipeline()(str(dev00.audio), num_speakers=2)
    turns = [SpeakerTurn(s, e, who) for s, e, who in zip(frame["start"], frame["end"], frame["speaker"])]
    assert der_pair(dev00.reference, turns, dev00.uem)["der"] <= 0.14  # test_api.py's bound for dev00


@pytest.mark.parametrize("call,fragment", [
    (lambda: whisperx.load_model("base", "cpu", asr_options={"prefix": "And so"}), "prefix only at WhisperX's default"),
    (lambda: whisperx.load_model("base", "cpu", asr_options={"length_penalty": -1}), "length_exponent: must be between 0 and 10"),
    (lambda: whisperx.load_model("base", "cpu", asr_options={"beams": 2}), "'beams' is not one of WhisperX's"),
    (lambda: whisperx.load_model("base", "cpu", vad_options={"vad_offset": 0.2}), "vad_offset only"),
    (lambda: whisperx.load_model("base", "cpu", vad_method="webrtc"), "vad_method: one of pyannote, silero"),
    (lambda: whisperx.load_model("base", "cpu", compute_type="int16"), "compute_type: one of"),
    (lambda: whisperx.align([], None, {"language": "en"}, np.zeros(16000, np.float32), "cpu", return_char_alignments=True),
     "return_char_alignments"),
    (lambda: whisperx.align([], None, {"language": "en"}, np.zeros(16000, np.float32), "cpu", interpolate_method="linear"),
     "interpolate_method: only 'nearest'"),
])
def test_what_is_not_offered_is_refused_in_one_line(call, fragment):
    with pytest.raises(ValueError) as info:
        call()
    assert fragment in str(info.value) and "\n" not in str(info.value)


def test_options_whisperxs_batched_pipeline_reads_nowhere_are_taken(flow):
    """``temperatures`` and the thresholds are in WhisperX's options and unused by its batched decoding:
    taken, as there; the beam of 1 decodes greedily (where a drafter runs)."""
    model = whisperx.load_model("base", "cpu", compute_type="float32", language="en",
                                asr_options={"temperatures": [0.0], "no_speech_threshold": 0.3, "beam_size": 1})
    result = model.transcribe(flow["audio"][: 11 * 16000], batch_size=2)
    assert "ask not what your country" in normalize(" ".join(s["text"] for s in result["segments"]))
