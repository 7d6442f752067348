"""Speaker attribution and RTTM I/O on hand-built turns (no models: these run in milliseconds)."""

from __future__ import annotations

import io

import pytest

from specwhisper.results.transcript import Segment, Transcript, Word
from specwhisper.diarize.attribution import assign_speakers, mark_word_overlaps, speaker_turns_text
from specwhisper.diarize.pipeline import SpeakerTurn, annotation_to_turns, check_speaker_counts
from specwhisper.diarize.rttm import format_rttm, parse_rttm, read_rttm, turns_to_annotation, save_rttm


def words(*spec):
    """words((0.0, 0.4, " hello"), ...) -> [Word]"""
    return [Word(s, e, t, 0.9) for s, e, t in spec]


TURNS = [SpeakerTurn(0.0, 2.0, "A"), SpeakerTurn(2.0, 4.0, "B"), SpeakerTurn(5.0, 6.0, "A")]


def test_words_take_the_speaker_with_the_largest_overlap_and_segments_split_at_changes():
    seg = Segment(0.0, 4.0, " one two three four", words=words(
        (0.1, 0.5, " one"), (0.6, 1.2, " two"), (1.8, 2.6, " three"), (2.9, 3.5, " four")))
    out = assign_speakers([seg], TURNS)
    assert [s.speaker for s in out] == ["A", "B"]
    assert [w.speaker for w in out[0].words + out[1].words] == ["A", "A", "B", "B"]  # "three": 0.2 A vs 0.6 B
    assert out[0].text.strip() == "one two" and out[1].text.strip() == "three four"
    assert out[0].start == 0.0 and out[-1].end == 4.0  # outer bounds kept
    assert out[0].end <= out[1].start
    assert not any(s.overlap for s in out)
    assert seg.speaker is None and seg.words[0].speaker is None  # input untouched


def test_word_in_a_gap_gets_the_nearest_turn():
    seg = Segment(4.0, 5.5, " gap end", words=words((4.1, 4.3, " gap"), (5.1, 5.4, " end")))
    out = assign_speakers([seg], TURNS)
    # 4.2 is 0.2 s after B ends and 0.8 s before A starts
    assert [w.speaker for s in out for w in s.words] == ["B", "A"]


def test_segments_without_words_use_segment_overlap():
    out = assign_speakers([Segment(1.5, 3.9, " x"), Segment(7.0, 8.0, " y")], TURNS)
    assert [s.speaker for s in out] == ["B", "A"]  # 0.5 s A vs 1.9 s B; nothing covers 7-8 s: nearest A
    assert all(s.words == [] for s in out)


def test_overlapping_speech_is_marked_not_dropped():
    turns = [SpeakerTurn(0.0, 4.0, "A"), SpeakerTurn(1.0, 3.0, "B")]
    seg = Segment(0.0, 4.0, " a b c", words=words((0.2, 0.8, " a"), (1.2, 2.8, " b"), (3.2, 3.8, " c")))
    out = assign_speakers([seg], turns)
    # every word overlaps A at least as much as B: one segment, speaker A, flagged as overlapped
    assert len(out) == 1 and out[0].speaker == "A" and out[0].overlap
    assert out[0].words[1].speaker == "A"
    # only the word that both speakers' turns cover is marked
    assert [w.overlap for w in out[0].words] == [False, True, False]
    short = assign_speakers([Segment(0.0, 4.0, " x")], [SpeakerTurn(0.0, 4.0, "A"), SpeakerTurn(1.0, 1.1, "B")])
    assert not short[0].overlap  # a 0.1 s backchannel is not an overlap of a 4 s segment


def test_a_word_on_a_speaker_change_is_not_an_overlap_but_a_word_half_covered_is():
    turns = [SpeakerTurn(0.0, 2.05, "A"), SpeakerTurn(2.0, 4.0, "B"), SpeakerTurn(3.0, 3.15, "A")]
    seg = Segment(0.0, 4.0, " x y z", words=words((1.8, 2.2, " x"), (2.5, 2.9, " y"), (3.0, 3.4, " z")))
    out = assign_speakers([seg], turns)
    got = [(w.speaker, w.overlap) for s in out for w in s.words]
    # x: A 0.25 s, B 0.2 s, both for 0.05 s (a boundary, not an overlap); z: both for 0.15 of 0.4 s
    assert got == [("A", False), ("B", False), ("B", True)]
    assert [s.overlap for s in out] == [False, True]  # the B piece holds an overlapped word
    # words rebuilt without flags (as the post-edit does) get them back; speakers are kept
    bare = [Segment(s.start, s.end, s.text, words=[Word(w.start, w.end, w.text, None, w.speaker) for w in s.words])
            for s in out]
    again = mark_word_overlaps(bare, turns)
    assert [(w.speaker, w.overlap) for s in again for w in s.words] == got


def test_no_turns_leaves_segments_unchanged():
    seg = Segment(0.0, 1.0, " hi", words=words((0.0, 0.5, " hi")))
    out = assign_speakers([seg], [])
    assert out == [seg] and out[0] is not seg


def test_plain_text_has_a_speaker_line_at_each_change():
    segs = [Segment(0, 1, " hi", speaker="SPEAKER_00"), Segment(1, 2, " there", speaker="SPEAKER_00"),
            Segment(2, 3, " yes", speaker="SPEAKER_01", overlap=True)]
    assert speaker_turns_text(segs) == "[SPEAKER_00]\nhi\nthere\n[SPEAKER_01] (overlap)\nyes\n"


def test_rttm_round_trip(tmp_path):
    turns = [SpeakerTurn(0.5, 1.25, "SPEAKER_00"), SpeakerTurn(1.0, 2.0, "SPEAKER_01")]
    path = tmp_path / "x.rttm"
    save_rttm(turns, "my file", path)
    assert path.read_text().splitlines()[0] == "SPEAKER my_file 1 0.500 0.750 <NA> <NA> SPEAKER_00 <NA> <NA>"
    assert read_rttm(path) == {"my_file": turns}
    buf = io.StringIO()
    save_rttm([Segment(0.0, 1.0, " a", speaker="S1"), Segment(1.0, 2.0, " b")], "u", buf)
    assert parse_rttm(buf.getvalue()) == {"u": [SpeakerTurn(0.0, 1.0, "S1")]}  # segments without speaker skipped
    assert format_rttm([], "u") == ""
    with pytest.raises(ValueError, match=":1: onset"):
        parse_rttm("SPEAKER u 1 x 1.0 <NA> <NA> s <NA> <NA>\n")


def test_annotation_round_trip_renames_by_first_appearance():
    turns = [SpeakerTurn(0.0, 1.0, "zed"), SpeakerTurn(1.0, 2.0, "amy"), SpeakerTurn(2.0, 3.0, "zed")]
    out = annotation_to_turns(turns_to_annotation(turns))
    assert [t.speaker for t in out] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]


@pytest.mark.parametrize("kwargs, message", [
    ({"num_speakers": 0}, "num_speakers must be at least 1"),
    ({"min_speakers": 3, "max_speakers": 2}, "larger than max_speakers"),
    ({"max_speakers": -1}, "max_speakers must be at least 1"),
    ({"num_speakers": 2.5}, "whole number"),
    ({"num_speakers": 4, "max_speakers": 3}, "larger than max_speakers"),
])
def test_bad_speaker_counts_are_one_line_value_errors(kwargs, message):
    args = {"num_speakers": None, "min_speakers": None, "max_speakers": None, **kwargs}
    with pytest.raises(ValueError, match=message) as err:
        check_speaker_counts(**args)
    assert "\n" not in str(err.value)


def test_rttm_and_json_come_from_the_diarizer_turns_not_the_segments():
    from specwhisper.pipeline.writers import render

    turns = [SpeakerTurn(0.0, 3.0, "SPEAKER_00"), SpeakerTurn(2.0, 5.0, "SPEAKER_01"), SpeakerTurn(6.0, 7.0, "SPEAKER_02")]
    segs = assign_speakers([Segment(0.0, 5.0, " a b", words=words((0.5, 1.0, " a"), (2.2, 2.8, " b")))], turns)
    t = Transcript(segments=segs, language="en", duration=8.0, source="/x/my talk.wav", turns=turns)
    lines = render(t, "rttm").splitlines()
    assert lines == ["SPEAKER my_talk 1 0.000 3.000 <NA> <NA> SPEAKER_00 <NA> <NA>",
                     "SPEAKER my_talk 1 2.000 3.000 <NA> <NA> SPEAKER_01 <NA> <NA>",
                     "SPEAKER my_talk 1 6.000 1.000 <NA> <NA> SPEAKER_02 <NA> <NA>"]
    data = t.to_dict()
    assert data["speaker_turns"][1] == {"start": 2.0, "end": 5.0, "speaker": "SPEAKER_01"}
    assert data["speakers"] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_02"]  # SPEAKER_02 said no transcribed word
    assert data["segments"][0]["words"][1]["overlap"] is True
    # speech without any transcript still has its turns
    empty = Transcript(segments=[], language=None, duration=8.0, source="e.wav", turns=turns)
    assert len(render(empty, "rttm").splitlines()) == 3
    # never diarized: the segments' speakers, as before; no speakers: nothing
    plain = Transcript(segments=[Segment(0.0, 1.0, " a", speaker="S1"), Segment(1.0, 2.0, " b")], language="en",
                       duration=2.0, source="p.wav")
    assert render(plain, "rttm") == "SPEAKER p 1 0.000 1.000 <NA> <NA> S1 <NA> <NA>\n"
    assert plain.to_dict()["speaker_turns"] is None


def test_eigengap_count_prefers_the_largest_k_with_a_large_enough_gap():
    import numpy as np

    from specwhisper.diarize.clustering import count_from_eigengaps

    ev = np.array([0.0, 0.0, 1.441, 2.318, 3.047, 3.142])  # s3a (3 speakers, one with 7 of 57 embeddings)
    assert count_from_eigengaps(ev, 1, 5, 1.0) == 2  # the classic largest gap under-counts
    assert count_from_eigengaps(ev, 1, 5, 0.6) == 3  # gap 0.877 >= 0.6 x 1.441
    assert count_from_eigengaps(ev, 1, 2, 0.6) == 2  # max_speakers bounds it
    assert count_from_eigengaps(ev, 4, 5, 0.6) == 4  # and min_speakers
