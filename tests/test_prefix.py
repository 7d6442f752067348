"""``prefix`` (faster-whisper's): the text a file's transcript starts with. Its first window is decoded on
from the prefix, which the transcript keeps; Whisper's rules read the prefix as text it wrote itself.
Checked against faster-whisper on the same weights, for speculative decoding against plain decoding, for
the windows after the first (untouched), and at every entry point."""

from __future__ import annotations

import numpy as np
import pytest

from specwhisper.asr.decoding.quality import QualityRules
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer

PREFIX = "And so, my fellow Americans,"  # the commas base does not write on this clip
GREEDY = QualityRules(temperatures=(0.0,))  # faster-whisper's temperature=0.0


def _text(segments) -> str:
    return " ".join(s.text.strip() for s in segments)


@pytest.mark.parametrize("how", [dict(), dict(without_timestamps=True), dict(beam_size=5)],
                         ids=["greedy", "without-timestamps", "beam-5"])
def test_the_text_faster_whisper_writes_after_the_same_prefix(base_engine, faster_whisper_base, eval_root, how):
    """JFK with a prefix greedy decoding does not write on its own (two commas): our transcript starts with it
    and is faster-whisper's word for word, with its segment times."""
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    opts = dict(language="en", quality=GREEDY, **how)
    ours = base_engine.transcribe(audio, DecodeOptions(prefix=PREFIX, **opts)).segments
    theirs = list(faster_whisper_base.transcribe(audio, language="en", temperature=0.0, prefix=PREFIX,
                                                 condition_on_previous_text=False,
                                                 **{"beam_size": 1, **how})[0])
    unprefixed = _text(base_engine.transcribe(audio, DecodeOptions(**opts)).segments)
    assert _text(ours) == _text(theirs) and _text(ours).startswith(PREFIX), (_text(ours), _text(theirs))
    assert unprefixed.startswith(PREFIX) == ("beam_size" in how), unprefixed  # a beam of 5 writes the commas too
    assert [round(s.end, 2) for s in ours] == [round(s.end, 2) for s in theirs]
    forced = base_engine.context_of(PREFIX)  # segment tokens: ours are the text's, faster-whisper's its timestamps too
    assert ours[0].tokens[: len(forced)] == forced == [t for t in theirs[0].tokens if t < base_engine.special.eot][: len(forced)]


@pytest.fixture(scope="module")
def three_clips(manifest):
    """Three clips with pauses between (36 s: two chunks), and their reference text."""
    items = {m.file: m for m in manifest}
    files = ["whisper.cpp/jfk.wav", "lhotse/2412-153948-0000.flac", "cuttledoc-fleurs/fleurs-en-000.ogg"]
    pause = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for f in files for p in (load_audio(items[f].path), pause)])
    return audio, " ".join(items[f].reference for f in files)


@pytest.mark.parametrize("condition", [False, True], ids=["batched", "conditioned"])
def test_only_the_first_window_starts_with_it_and_speculation_changes_nothing(base_engine, three_clips, condition):
    """A two-chunk file: the prefix starts the first chunk's text only; the second chunk's segments are those
    of the transcript without a prefix (decoded side by side: batched; after the first chunk's text:
    conditioned, where they may differ); a drafter (n-gram; tiny.en, another vocabulary) gives plain
    decoding's tokens, times and words."""
    audio, reference = three_clips
    opts = DecodeOptions(language="en", batch_size=4, prefix=PREFIX, word_timestamps=True,
                         condition_on_previous_text=condition)
    plain = base_engine.transcribe(audio, opts, decoder=decoder_factory("none")(base_engine))
    text = _text(plain.segments)
    assert text.startswith(PREFIX) and text.count("fellow Americans") == 1, text
    assert wer([reference], [text]) < 0.15, text
    key = lambda r: [(s.start, s.end, s.tokens, [(w.text, w.start, w.end) for w in s.words]) for s in r.segments]  # noqa: E731
    for draft in ("ngram", "tiny.en"):
        spec = base_engine.transcribe(audio, opts, decoder=decoder_factory(draft)(base_engine))
        assert key(spec) == key(plain), draft
    if not condition:
        bare = base_engine.transcribe(audio, DecodeOptions(language="en", batch_size=4, word_timestamps=True),
                                      decoder=decoder_factory("none")(base_engine))
        later = lambda r: key(r)[-2:]  # noqa: E731  (the second chunk: the clips after the first pause)
        assert plain.segments[-1].start > 13 and later(plain) == later(bare)


def test_the_entry_points_take_it_and_refuse_what_does_not_apply_in_one_line(run_cli, cli_run, eval_root, tmp_path):
    """The CLI (a long prefix refused before any decoding; the live mode does not apply it), faster-whisper's
    ``WhisperModel``, and the peers whose prefix means something else (openai-whisper's transcribe, on every window, left
    out of the text; WhisperX's on every chunk): refused, saying why."""
    from specwhisper.pipeline.faster_whisper import WhisperModel
    from specwhisper.pipeline.openai_whisper import load_model

    jfk = eval_root / "openai-whisper/jfk.flac"
    code, out, _ = run_cli(jfk, "-l", "en", "--prefix", PREFIX, "-f", "txt", "-o", "-")
    assert code == 0 and out.startswith(PREFIX + " ask not what"), out
    for bad, message in [(["--prefix", "ab " * 250], "prefix is 250 tokens long; at most 223 fit"),
                         (["--prefix", "x" * 1001], "--prefix: must be at most 1000 characters, got 1001"),
                         (["--live", "--prefix", PREFIX], "--prefix does not apply to --live")]:
        code, _, err = cli_run(jfk, "-o", tmp_path, *bad)
        lines = err.strip().splitlines()
        assert code != 0 and len(lines) == 1 and message in lines[0], (bad, err)
    assert not list(tmp_path.iterdir())

    segments, _ = WhisperModel("base", device="cpu").transcribe(str(jfk), language="en", beam_size=1, prefix=PREFIX)
    assert next(iter(segments)).text.startswith(" " + PREFIX)
    with pytest.raises(ValueError, match="prefix: .*openai-whisper's transcribe forces it on every window"):
        load_model("base").transcribe(str(jfk), prefix=PREFIX)
