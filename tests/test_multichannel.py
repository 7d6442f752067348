"""``multichannel``: each channel of a call heard on its own, its words its speaker's (pipeline.channels),
each channel's bleed of the other muted first (audio.channels)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio.channels import without_bleed
from specwhisper.evaluation.calls import build_call
from specwhisper.evaluation.transcripts import wer
from specwhisper.pipeline.config import RunOptions
from specwhisper.asr.options import DecodeOptions

STEREO = "faster-whisper/stereo_diarization.wav"


def _said(transcript, speaker: str) -> str:
    return " ".join(s.text for s in transcript.segments if s.speaker == speaker)


def _references(manifest) -> tuple[str, str]:
    """LEFT and RIGHT of the stereo clip's reference ("LEFT: ... | RIGHT: ...")."""
    text = next(i for i in manifest if i.file == STEREO).reference
    left, right = text.split(" | ")
    return left.removeprefix("LEFT: "), right.removeprefix("RIGHT: ")


def test_each_channel_is_a_speaker_and_overlapping_talk_is_kept(base_pipeline, eval_root, manifest):
    """faster-whisper's stereo clip: one speaker per channel, talking over each other for 2.5 s. Downmixed,
    base hears one of them, garbled ("He could rise and seem to complain ...") and none of the other's
    words; each channel heard on its own gives both, word for word, each attributed to its channel."""
    left, right = _references(manifest)
    path = eval_root / STEREO
    mixed = base_pipeline.run_file(path, RunOptions(decode=DecodeOptions(language="en")))
    split = base_pipeline.run_file(path, RunOptions(decode=DecodeOptions(language="en"), multichannel=True))
    print(f"\nmix: {mixed.text!r}\nchannels: {[(s.speaker, s.text) for s in split.segments]}")
    assert "horizon" not in mixed.text.lower()  # what multichannel is for
    assert wer([left], [_said(split, "CHANNEL_1")]) < 0.05 and wer([right], [_said(split, "CHANNEL_2")]) < 0.05
    assert split.speakers == ["CHANNEL_1", "CHANNEL_2"] and all(w.speaker == s.speaker for s in split.segments for w in s.words)
    assert all(s.overlap for s in split.segments)  # both talk at once at the start
    assert split.model["multichannel"] == 2 and split.duration == pytest.approx(5.0)


def test_the_other_partys_bleed_is_not_transcribed(tiny_pipeline, manifest):
    """A call whose parties take turns, each voice leaking into the other channel at -20 dB: Whisper hears
    that bleed as words (it normalises its input's level), so each party's words came out in both channels;
    with the bleed muted each channel holds its own party's words alone, in time order."""
    call = build_call(manifest, bleed_db=-20.0)
    options = RunOptions(decode=DecodeOptions(language="en"))
    heard_raw = [t.text for t in tiny_pipeline.run_many(list(call.channels), options)]
    split = tiny_pipeline.run(call.channels, RunOptions(decode=DecodeOptions(language="en"), multichannel=True))
    heard = [_said(split, "CHANNEL_1"), _said(split, "CHANNEL_2")]
    print(f"\nraw: {heard_raw}\nmuted: {heard}")
    for ref, raw, text in zip(call.references, heard_raw, heard):
        assert wer([ref], [text]) < 0.15 and wer([ref], [raw]) > wer([ref], [text]) + 0.1, (raw, text)  # raw: both parties
    assert [s.start for s in split.segments] == sorted(s.start for s in split.segments)


def test_a_turn_is_cut_where_the_other_party_replies(tiny_pipeline, manifest):
    """The conversation's order, A, B, A, B: tiny.en writes A's two turns as one segment, its "1813," stretched
    over B's reply (0.0-9.4 s), which sorted both before the reply; it is cut where B says a word between two
    of its words, the stretched word ending where B starts."""
    call = build_call(manifest, bleed_db=None)
    split = tiny_pipeline.run(call.channels, RunOptions(decode=DecodeOptions(language="en"), multichannel=True))
    segments = split.segments
    turns = [s.speaker for k, s in enumerate(segments) if k == 0 or s.speaker != segments[k - 1].speaker]
    assert turns == ["CHANNEL_1", "CHANNEL_2"] * 2, [(s.speaker, s.start, s.end, s.text) for s in segments]
    assert segments[0].end <= segments[1].start + 0.1 and "1813" in segments[0].text, segments[:2]


def test_without_bleed_keeps_talk_that_overlaps():
    """Where the other channel is 10 dB louder this one is muted (its bleed); where both speak at their
    own levels, neither is."""
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal(48_000).astype(np.float32), rng.standard_normal(48_000).astype(np.float32)
    a[32_000:] = 0.0  # A speaks for 2 s, B for 3 s: they overlap from 0 to 2 s
    channels = np.stack([a + 0.05 * b, b + 0.05 * a])  # -26 dB bleed
    out = without_bleed(channels)
    assert np.array_equal(out[1], channels[1])  # B speaks throughout: never muted
    assert np.array_equal(out[0, :28_000], channels[0, :28_000])  # A's own talk, overlapping B's, kept
    assert not out[0, 36_000:].any()  # A's channel after A stopped: B's bleed alone, muted (past the 0.2 s hold)


def test_multichannel_from_the_command_line(run_cli, eval_root, tmp_path):
    """The CLI writes each channel's speaker into srt and an rttm pyannote reads; a mistake is one line."""
    from pyannote.database.util import load_rttm

    code, _, err = run_cli(eval_root / STEREO, "--multichannel", "-l", "en", "-o", tmp_path, "-f", "srt,rttm,json", "-q")
    assert code == 0, err
    srt = (tmp_path / "stereo_diarization.srt").read_text()
    assert "[CHANNEL_1]: He began" in srt and "[CHANNEL_2]: The horizon" in srt, srt
    annotation = load_rttm(tmp_path / "stereo_diarization.rttm")["stereo_diarization"]
    assert sorted(annotation.labels()) == ["CHANNEL_1", "CHANNEL_2"] and annotation.get_overlap().duration() > 2.0
    segments = json.loads((tmp_path / "stereo_diarization.json").read_text())["segments"]
    assert {s["speaker"] for s in segments} == {"CHANNEL_1", "CHANNEL_2"}
    assert all(w["speaker"] == s["speaker"] for s in segments for w in s["words"])  # words: on, for the turns
    code, _, err = run_cli(eval_root / STEREO, "--multichannel", "--diarize", "-o", tmp_path)
    assert code == 2 and err.count("\n") == 1 and "does not go with diarize (or known speakers)" in err, err
    many = tmp_path / "nine.wav"
    sf.write(many, np.zeros((16_000, 9), np.float32), 16_000)
    code, _, err = run_cli(many, "--multichannel", "-o", tmp_path)
    assert code == 1 and err.count("\n") == 1 and "9 channels" in err, err


def test_multichannel_in_the_python_api(base_pipeline, eval_root, manifest, tmp_path):
    """A path, and a (samples, channels) array with its rate, as the API takes audio; ``write`` of "all"
    includes the channels' rttm, as the CLI's -f all does."""
    from pyannote.database.util import load_rttm

    from specwhisper.pipeline.api import Transcriber

    left, right = _references(manifest)
    transcriber = Transcriber(base_pipeline)
    data, rate = sf.read(eval_root / STEREO, dtype="float32")
    for audio, rate in ((eval_root / STEREO, None), (data, rate)):
        result = transcriber.transcribe(audio, sample_rate=rate, multichannel=True, language="en")
        said = {s.speaker: s.text for s in result.segments}
        assert wer([left], [said["CHANNEL_1"]]) < 0.05 and wer([right], [said["CHANNEL_2"]]) < 0.05, said
    written = result.write(tmp_path)
    assert tmp_path / "audio.rttm" in written, written
    assert sorted(load_rttm(tmp_path / "audio.rttm")["audio"].labels()) == ["CHANNEL_1", "CHANNEL_2"]
    from specwhisper.pipeline.api import Transcription
    from specwhisper.results.transcript import Segment, Transcript

    mixed = Transcription.of(Transcript([Segment(0.0, 1.0, " hello")], "en", 1.0)).write(tmp_path / "mixed")
    assert sorted(p.suffix for p in mixed) == [".json", ".srt", ".tsv", ".txt", ".vtt"]  # no speakers: no rttm


def test_a_ray_worker_hears_each_channel(tiny_pipeline, eval_root):
    """``--engine ray --multichannel``: the actor reads the bytes it is sent as channels, as the local
    engine reads the file, not downmixed into one speaker (the actor's class, without a Ray to run it)."""
    from specwhisper.batch.ray_engine import BatchWorker

    worker = BatchWorker.__new__(BatchWorker)  # its __init__ loads a pipeline: the session's stands in
    worker.pipeline = tiny_pipeline
    opts = RunOptions(decode=DecodeOptions(language="en"), multichannel=True)
    [(transcript, error, _)] = worker.run([("calls/stereo.wav", (eval_root / STEREO).read_bytes())], opts)
    local = tiny_pipeline.run_file(eval_root / STEREO, opts)
    assert error is None and transcript.speakers == ["CHANNEL_1", "CHANNEL_2"], error
    assert transcript.segments == local.segments
