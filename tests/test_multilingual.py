"""A language per window (``--multilingual``) on a file built from the public clips: French, then
Spanish, then English, each in a window of its own (specwhisper.evaluation.transcripts.build_multilingual_file)."""

from __future__ import annotations

import json

import pytest

from specwhisper.evaluation.transcripts import build_multilingual_file, normalize, wer
from specwhisper.results.stats import DecodeStats

CLIPS = ["cuttledoc-fleurs/fleurs-fr-000.ogg", "cuttledoc-fleurs/fleurs-en-001.ogg"]


@pytest.fixture(scope="module")
def mixed(tmp_path_factory, eval_root):
    return build_multilingual_file(CLIPS, tmp_path_factory.mktemp("multilingual"), window_s=30.0)


@pytest.fixture(scope="module")
def audio(mixed):
    from specwhisper.audio.loading import load_audio

    return load_audio(mixed.path)


def _run(engine, audio, **values):
    from specwhisper.pipeline.options import run_options

    # no temperature fallback: a window decoded in the wrong language (the floor's run) would sample 5 times
    return engine.transcribe(audio, run_options({"temperature_increment_on_fallback": None, **values}).decode)


def _labelled(mixed, segments):
    """(segment language, the language of the clip under it) of every segment over a clip."""
    out = []
    for s in segments:
        clip = mixed.clip_at(s.start, s.end)
        if clip is not None:
            out.append((s.language, clip.language))
    return out


def test_each_window_gets_its_language(base_engine, mixed, audio):
    result = _run(base_engine, audio, multilingual=True)
    pairs = _labelled(mixed, result.segments)
    assert {clip for _, clip in pairs} == {"fr", "en"}, pairs  # both clips were transcribed
    assert sum(got == want for got, want in pairs) / len(pairs) >= 0.9, pairs
    for clip in mixed.clips:  # each clip's words, in its own language
        text = " ".join(s.text for s in result.segments if mixed.clip_at(s.start, s.end) is clip)
        assert wer([clip.reference], [text], clip.language) < 0.35, (clip.language, normalize(text, clip.language))


def test_a_window_of_two_languages_is_cut_between_them(base_engine, tmp_path):
    """An English clip, 1.5 s of silence, a German one: one window, detected English (p=0.79) as a whole,
    where Whisper then translates the German. Its turns, detected alone, part it: each clip is written
    in its own language, with --vad-filter's joined window too."""
    turns = build_multilingual_file(["lhotse/2412-153948-0000.flac", "cuttledoc-fleurs/fleurs-de-000.ogg"], tmp_path)
    from specwhisper.audio.loading import load_audio

    audio = load_audio(turns.path)
    for vad_filter in (False, True):  # the window as planned, and the speech alone, joined
        result = _run(base_engine, audio, multilingual=True, vad_filter=vad_filter)
        assert all(got == want for got, want in _labelled(turns, result.segments)), (vad_filter, _labelled(turns, result.segments))
        for clip in turns.clips:
            text = " ".join(s.text for s in result.segments if turns.clip_at(s.start, s.end) is clip)
            assert wer([clip.reference], [text], clip.language) < 0.35, (vad_filter, clip.language, normalize(text, clip.language))


def test_below_the_floor_the_language_before_is_kept(base_engine, mixed, audio):
    """No detection reaches a floor of 1: every window keeps the file's language, its windows with speech
    heard together as without ``multilingual`` (the French window and the English one, pooled: English)."""
    from specwhisper.asr.options import DecodeOptions

    result = _run(base_engine, audio, multilingual=True, language_threshold=1.0)
    found = base_engine.detect_language(audio, DecodeOptions(language_threshold=1.0))
    assert found.chunks == 2 and found.language in {"fr", "en"}, found
    assert result.segments and {s.language for s in result.segments} == {found.language}


def test_segments_carry_their_language_in_the_json():
    from specwhisper.results.transcript import Segment, Transcript

    t = Transcript([Segment(0.0, 1.0, " Bonjour.", language="fr"), Segment(2.0, 3.0, " Hello.", language="en")], "fr", 3.0)
    segments = json.loads(json.dumps(t.to_dict()))["segments"]
    assert [s["language"] for s in segments] == ["fr", "en"]


def test_multilingual_needs_a_multilingual_model(tiny_engine, audio):
    with pytest.raises(ValueError, match="English-only: --multilingual needs a multilingual model"):
        _run(tiny_engine, audio[:16000], multilingual=True)


def test_a_long_files_language_is_detected_on_the_window_transcribe_takes(base_engine, eval_root, monkeypatch):
    """``detect_language`` plans a long file's first minutes only: on 130 s
    of silence, a German clip, an English one and silence to 300 s it plans the first 120 s (silence
    alone), then 240 s, and finds what the file's whole plan gives ``transcribe_many``'s detection
    (``file_detections``): the same window, language and probabilities."""
    import numpy as np

    from specwhisper.asr.languages import file_detections
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import SAMPLE_RATE, load_audio

    de, en = (load_audio(eval_root / f"cuttledoc-fleurs/fleurs-{lang}-000.ogg") for lang in ("de", "en"))
    silence = lambda s: np.zeros(int(s * SAMPLE_RATE), np.float32)  # noqa: E731
    audio = np.concatenate([silence(130), de, silence(1), en])
    audio = np.concatenate([audio, silence(300 - len(audio) / SAMPLE_RATE)])
    planned, plan = [], base_engine._plan
    monkeypatch.setattr(base_engine, "_plan", lambda a, *rest: planned.append(len(a) / SAMPLE_RATE) or plan(a, *rest))
    found = base_engine.detect_language(audio)
    monkeypatch.undo()
    assert planned == [120.0, 240.0], planned
    whole = base_engine._plan(audio, DecodeOptions(), lambda f: None)[0]
    expected = file_detections(base_engine, [audio], [whole], 1, {}, [DecodeStats()], DecodeOptions())[0]
    print(f"\n{found.language} {found.probability:.4f} on {found.start}-{found.end} s")
    assert found == expected and found.language == "de" and found.speech and 129 <= found.start < 131 + 18
