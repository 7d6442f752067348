"""Known speakers: the diarizer's speakers named after reference clips of their voices, on real recordings.

The references are other recordings than the audio diarized (the same voices elsewhere): an AMI meeting
excerpt named with clips cut from the meeting's other excerpt, and a conversation joined from read
speech named with other clips of its readers; a voice with no clip keeps its SPEAKER_NN label, and a
clip of a voice that is not there names nobody."""

from __future__ import annotations

import base64

import numpy as np
import pytest

from specwhisper.audio.loading import AudioError, load_audio
from specwhisper.diarize.known import KnownSpeaker, load_reference, name_speakers, rename
from specwhisper.evaluation.diarization import pyannote_dev_files
from specwhisper.results.transcript import SpeakerTurn

SR = 16000


def _clip(path, start=None, end=None):
    audio = load_audio(path)
    return audio if start is None else audio[int(start * SR):int(end * SR)]


def _named_share(turns, reference, uem=None) -> float:
    """The share of the reference's speech (outside overlaps) whose hypothesis turn has the reference's
    own speaker name, on a 10 ms grid."""
    end = max(t.end for t in reference)
    grid = np.arange(uem[0] if uem else 0.0, uem[1] if uem else end, 0.01)
    right = total = 0
    for t in grid:
        truth = {r.speaker for r in reference if r.start <= t < r.end}
        if len(truth) != 1:
            continue
        total += 1
        right += truth <= {h.speaker for h in turns if h.start <= t < h.end}
    return right / total


def test_names_follow_the_closest_reference_above_the_threshold():
    e = np.eye(4)
    centroids = {"SPEAKER_00": e[0], "SPEAKER_01": e[1] + 0.1 * e[2], "SPEAKER_02": e[3], "SPEAKER_03": e[0] + 0.2 * e[1]}
    refs = {"ann": e[0], "bob": e[1], "cy": e[2] * -1}
    assert name_speakers(centroids, refs) == {"SPEAKER_00": "ann", "SPEAKER_01": "bob", "SPEAKER_03": "ann"}
    assert name_speakers(centroids, refs, threshold=0.999) == {"SPEAKER_00": "ann"}
    assert name_speakers({"SPEAKER_00": np.zeros(4)}, refs) == {}  # an embedding of nothing names nobody
    turns = [SpeakerTurn(0, 2, "SPEAKER_00"), SpeakerTurn(1.5, 3, "SPEAKER_03"), SpeakerTurn(3, 4, "SPEAKER_02"),
             SpeakerTurn(5, 6, "SPEAKER_03")]
    assert rename(turns, {"SPEAKER_00": "ann", "SPEAKER_03": "ann"}) == [
        SpeakerTurn(0, 3, "ann"), SpeakerTurn(3, 4, "SPEAKER_02"), SpeakerTurn(5, 6, "ann")]


@pytest.mark.parametrize("target, clips", [
    ("dev01", {"MEE009": ("dev00", 1.5, 11.5), "MEE012": ("dev00", 13.2, 16.9)}),
    ("dev00", {"MEE009": ("dev01", 7.05, 11.75), "MEE012": ("dev01", 4.3, 6.75)}),
])
def test_a_meeting_named_with_clips_from_its_other_excerpt(diarizer, target, clips):
    files = {f.uri: f for f in pyannote_dev_files()}
    known = [KnownSpeaker(name, _clip(files[uri].audio, a, b)) for name, (uri, a, b) in clips.items()]
    f = files[target]
    turns = diarizer(load_audio(f.audio), known=known)
    assert {t.speaker for t in turns} == {"MEE009", "MEE012"}
    assert _named_share(turns, f.reference, f.uem) > 0.8  # the reference speakers' own names, no mapping


def test_read_speech_named_and_unknown_voices_left_alone(diarizer, eval_root):
    pieces = [("coqui-tts-ljspeech/LJ001-0003.wav", "linda"), ("mfa/mfa_surround.flac", "michael"),
              ("coqui-tts-ljspeech/LJ001-0004.wav", "linda"), ("mfa/mfa_laughter.flac", "michael"),
              ("cuttledoc-fleurs/fleurs-en-001.ogg", None)]
    audio, truth, t = [], [], 0.0
    for path, who in pieces:
        x = load_audio(eval_root / path)
        audio += [x, np.zeros(SR // 2, np.float32)]
        truth.append((t, t + len(x) / SR, who))
        t += len(x) / SR + 0.5
    known = [KnownSpeaker("linda", load_audio(eval_root / "coqui-tts-ljspeech/LJ001-0001.wav")),
             KnownSpeaker("michael", load_audio(eval_root / "mfa/mfa_uhum.flac")),
             KnownSpeaker("john", load_audio(eval_root / "whisper.cpp/jfk.wav"))]  # not in the conversation
    turns = diarizer(np.concatenate(audio), known=known)
    assert "john" not in {t.speaker for t in turns}
    for start, end, who in truth:
        heard = {}
        for turn in turns:
            heard[turn.speaker] = heard.get(turn.speaker, 0.0) + max(0.0, min(end, turn.end) - max(start, turn.start))
        main = max(heard, key=heard.get)
        if who is None:
            assert main.startswith("SPEAKER_"), (start, heard)
        else:
            assert main == who and heard[main] > 0.9 * sum(heard.values()), (who, heard)


def test_speaker_embeddings_tell_the_same_voice_in_another_recording(diarizer):
    """``Diarizer.run``'s embeddings (WhisperX's ``speaker_embeddings``): one unit vector per speaker of the
    turns; each AMI speaker of dev00 is closer to the same speaker in dev01 than to the other one."""
    by_voice = {}
    for f in pyannote_dev_files():
        turns, embeddings = diarizer.run(load_audio(f.audio))
        assert set(embeddings) == {t.speaker for t in turns}
        for label, vector in embeddings.items():
            assert len(vector) == 192 and abs(np.linalg.norm(vector) - 1) < 1e-4
            mine = [t for t in turns if t.speaker == label]
            voice = max({r.speaker for r in f.reference}, key=lambda v: sum(
                max(0.0, min(r.end, t.end) - max(r.start, t.start)) for r in f.reference if r.speaker == v for t in mine))
            by_voice[f.uri, voice] = np.array(vector)
    for voice, other in (("MEE009", "MEE012"), ("MEE012", "MEE009")):
        same = by_voice["dev00", voice] @ by_voice["dev01", voice]
        assert same > 0.5 and same > by_voice["dev00", voice] @ by_voice["dev01", other], voice


def test_bad_reference_clips_are_one_line_errors(eval_root, tmp_path):
    jfk = (eval_root / "whisper.cpp/jfk.wav").read_bytes()
    url = "data:audio/wav;base64," + base64.b64encode(jfk).decode()
    assert len(load_reference("ann", url).audio) == 11 * SR  # a data URL, as OpenAI's clients send a clip
    import soundfile as sf

    sf.write(tmp_path / "silent.wav", np.zeros(3 * SR, np.float32), SR)
    cases = [("data:audio/wav," + "x" * 10, "a data URL must be base64"),
             ("data:audio/wav;base64,@@@", "the data URL's base64 is not valid"),
             ("data:audio/wav;base64," + base64.b64encode(jfk[:2000]).decode(), "the reference clip is 0.1 s (give 2 to 30 s"),
             (str(tmp_path / "silent.wav"), "the reference clip is silent"),
             (str(eval_root / "pyannote-audio/tests_data/dev00.wav") + "x", "file not found")]
    for source, message in cases:
        with pytest.raises(AudioError) as err:
            load_reference("ann", source)
        assert message in str(err.value) and "\n" not in str(err.value), (source[:40], str(err.value))


def test_known_speakers_on_the_command_line_take_the_speaker_count(run_cli, eval_root, tmp_path):
    """--known-speakers turns diarization on, so --num-speakers goes with it without --diarize (the CLI
    refused it as if diarization were off): JFK's excerpt, one speaker, named after a clip of his voice."""
    import json

    jfk = eval_root / "whisper.cpp/jfk.wav"
    code, _, err = run_cli(jfk, "-o", tmp_path, "-f", "json", "-l", "en", "--known-speakers", f"jfk={eval_root / 'openai-whisper/jfk.flac'}",
                           "--num-speakers", "1")
    assert code == 0, err
    segments = json.loads((tmp_path / "jfk.json").read_text())["segments"]
    assert segments and {s["speaker"] for s in segments} == {"jfk"}, segments
