"""Every word with speech under it has a speaker, and the RTTM holds that speech
(specwhisper.diarize.coverage), on recordings built from real conversations: short turns, -50/-55 dBFS."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.signal import lfilter

from specwhisper.asr.options import DecodeOptions
from specwhisper.diarize.coverage import cover_words, embedding_of, speech_heard_by, uncovered
from specwhisper.diarize.rttm import format_rttm, parse_rttm
from specwhisper.evaluation.diarization import real_recordings

SR = 16000


@pytest.fixture(scope="module")
def built(eval_root):
    return {f.uri: (f, audio) for f, audio in real_recordings() if f.uri in ("sample", "sample-short-quiet", "ami+headset-3spk")}


def test_words_the_diarizer_missed_get_the_speaker_of_their_voice(diarizer, built):
    """The pyannote sample (30 s, two telephone speakers). Each reference turn of 0.8 s or more
    in turn is taken out of the diarizer's output, as if it had missed it; its words get a turn again,
    and its speaker is the one the diarizer gives that voice elsewhere in the file."""
    f, audio = built["sample"]
    turns, centroids = diarizer.diarize(audio)
    assert len(centroids) == len({t.speaker for t in turns}) >= 2

    def label_of(voice: str, skip) -> str:  # the diarizer's speaker for this voice, outside the missed turn
        seconds: dict[str, float] = {}
        for r in f.reference:
            if r.speaker != voice or r is skip:
                continue
            for t in turns:
                seconds[t.speaker] = seconds.get(t.speaker, 0.0) + max(0.0, min(r.end, t.end) - max(r.start, t.start))
        return max(seconds, key=seconds.get)

    checked = 0
    for missed in (r for r in f.reference if r.end - r.start >= 0.8):
        words = [(missed.start + 0.1, missed.end - 0.1)]
        kept = [t for t in turns if t.end <= missed.start or t.start >= missed.end]
        covered = cover_words(audio, kept, words, centroids, embedding_of(diarizer.pipeline), speech_heard_by(diarizer.pipeline))
        new = [t for t in covered if t not in kept]
        assert len(new) == 1 and (new[0].start, new[0].end) == pytest.approx(words[0])
        assert new[0].speaker == label_of(missed.speaker, missed), missed
        checked += 1
    assert checked >= 2


def test_with_no_turn_at_all_the_heard_words_are_one_speaker_in_the_rttm(diarizer, built):
    f, audio = built["sample-short-quiet"]
    words = [(r.start, r.end) for r in f.reference]
    turns = cover_words(audio, [], words, {}, embedding_of(diarizer.pipeline), speech_heard_by(diarizer.pipeline))
    assert {t.speaker for t in turns} == {"SPEAKER_00"}
    assert not uncovered(turns, words)
    rttm = parse_rttm(format_rttm(turns, "x"))["x"]
    assert [x for t in rttm for x in (t.start, t.end)] == pytest.approx([x for t in turns for x in (t.start, t.end)], abs=1e-3)


def test_words_over_noise_alone_get_no_turn(diarizer):
    """Whisper writes words over brown noise ("1 Bd" at -50 dBFS); the segmentation model hears no
    speech there, so they make no turn."""
    noise = lfilter([1.0], [1.0, -0.95], np.random.default_rng(3).normal(0, 1, 10 * SR)).astype(np.float32)
    noise *= 10 ** (-50 / 20) / np.sqrt(np.mean(noise ** 2))
    assert diarizer(noise) == []
    assert diarizer(noise, words=[(2.0, 2.6), (7.5, 7.7)]) == []


def test_every_transcribed_word_has_a_speaker_and_an_rttm_turn(base_pipeline, diarizer, built, monkeypatch):
    """ami+headset-3spk: 14 s of an AMI meeting then 6 s of another meeting's headset, 3 speakers,
    turns of 0.3-4 s, through the whole pipeline with word timings."""
    from specwhisper.pipeline.config import RunOptions

    monkeypatch.setattr(base_pipeline, "_diarizer", diarizer)
    f, audio = built["ami+headset-3spk"]
    out = base_pipeline.run(audio, RunOptions(decode=DecodeOptions(language="en", word_timestamps=True), diarize=True))
    words = [w for s in out.segments for w in s.words]
    assert len(words) >= 20
    assert all(w.speaker is not None for w in words)
    rttm = parse_rttm(format_rttm(out.turns, "x"))["x"]
    spoken = [w for w in words if any(r.start <= (w.start + w.end) / 2 < r.end for r in f.reference)]
    assert len(spoken) >= 0.8 * len(words)
    assert not uncovered(rttm, [(w.start, w.end) for w in spoken])  # each word the reference calls speech
    assert len({t.speaker for t in rttm}) >= 2
