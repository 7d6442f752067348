"""``prepend_punctuations`` and ``append_punctuations`` (openai-whisper's and faster-whisper's): the marks a word
timestamp joins to the word after them / before them. Checked against faster-whisper on the same weights (the
words, and each word's probability, its own tokens' as faster-whisper scores it), and at the entry points."""

from __future__ import annotations

import json

import pytest

from specwhisper.asr.decoding.quality import QualityRules
from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio

CLIP = "lhotse/2412-153948-0000.flac"  # two sentences with commas in them
GREEDY = QualityRules(temperatures=(0.0,))  # faster-whisper's temperature=0.0
MARKS = ",."


@pytest.mark.parametrize("marks", [None, ("", ""), ("", ",")], ids=["default", "none-joined", "commas-joined"])
def test_the_words_faster_whisper_gives_with_the_same_marks(base_engine, faster_whisper_base, eval_root, marks):
    """Ours and faster-whisper's words are the same, and so are their probabilities (a word ending in a comma
    scored by the word alone: with the comma's probability averaged in, JFK's "you," scores 0.68, not 0.996).
    Marks left out of both sets are words of their own, as many as the text has; the default joins them all."""
    audio = load_audio(eval_root / CLIP)
    settings = {} if marks is None else dict(prepend_punctuations=marks[0], append_punctuations=marks[1])
    ours = base_engine.transcribe(audio, DecodeOptions(language="en", quality=GREEDY, word_timestamps=True,
                                                       **settings)).segments
    theirs, _ = faster_whisper_base.transcribe(audio, language="en", temperature=0.0, beam_size=1,
                                               condition_on_previous_text=False, word_timestamps=True, **settings)
    words, want = [w for s in ours for w in s.words], [w for s in theirs for w in s.words]
    assert [w.text for w in words] == [w.word for w in want]
    assert max(abs(w.probability - v.probability) for w, v in zip(words, want)) < 0.06
    text = "".join(s.text for s in ours)
    joined = MARKS if marks is None else marks[1]
    alone = [w.text for w in words if w.text in MARKS]
    assert len(alone) == sum(text.count(m) for m in MARKS if m not in joined) and text.count(",") >= 2, (alone, text)
    for s in ours:
        assert "".join(w.text for w in s.words) == s.text


def test_the_entry_points_take_them(run_cli, cli_run, eval_root, tmp_path):
    """The CLI by its own spelling and openai-whisper's (an empty set: every mark a word), faster-whisper's and
    openai-whisper's ``transcribe``; the live mode, which does not apply them, refuses them in one line."""
    from specwhisper.pipeline.faster_whisper import WhisperModel
    from specwhisper.pipeline.openai_whisper import load_model

    jfk = eval_root / "openai-whisper/jfk.flac"
    for flag in ("--append-punctuations", "--append_punctuations"):
        code, out, _ = run_cli(jfk, "-l", "en", "--word-timestamps", flag, "", "-f", "json", "-o", "-")
        words = [w["word"] for s in json.loads(out)["segments"] for w in s["words"]]
        assert code == 0 and words[-2:] == [" country", "."], words
    code, _, err = cli_run(jfk, "-o", tmp_path, "--live", "--prepend-punctuations", "")
    assert code != 0 and len(err.strip().splitlines()) == 1 and "--prepend-punctuations" in err, err
    assert not list(tmp_path.iterdir())

    segments, _ = WhisperModel("base", device="cpu").transcribe(str(jfk), language="en", beam_size=1,
                                                                word_timestamps=True, append_punctuations="")
    assert [w.word for s in segments for w in s.words][-1] == "."
    result = load_model("base").transcribe(str(jfk), word_timestamps=True, append_punctuations="")
    assert [w["word"] for s in result["segments"] for w in s["words"]][-1] == "."
