"""Tokens the decoder never writes (``suppress_numerals``, ``suppress_tokens``): numbers come out spelled, the
words otherwise as before, and a speculative decode still gives the plain decode's tokens."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from specwhisper.asr.decoding.suppress import NUMERAL_SYMBOLS
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import wer
from specwhisper.pipeline.options import check_values

SAID = "In 2024 the shop sold 250 bikes at 15 percent off, and 3 of them came back on March 12."


@pytest.fixture(scope="module")
def spoken_numbers(tmp_path_factory):
    path = tmp_path_factory.mktemp("numbers") / "numbers.wav"
    subprocess.run(["espeak-ng", "-v", "en-us", "-s", "150", "-w", str(path), SAID], check=True)
    return path


@pytest.fixture(scope="module")
def spelled(tiny_engine):
    """tiny.en with numerals suppressed, plain and with the n-gram drafter (the session's weights; which tokens
    are never written does not depend on the model)."""
    return {d: AsrEngine("tiny.en", bundle=tiny_engine.bundle, decoder_factory=decoder_factory(d), suppress_numerals=True)
            for d in ("none", "ngram")}


def _text(result) -> str:
    return " ".join(s.text.strip() for s in result.segments)


def test_numbers_come_out_spelled(tiny_engine, spelled, spoken_numbers, manifest):
    items = {i.file: i for i in manifest}
    cases = [(spoken_numbers, "en", SAID), *((items[f].path, items[f].language, items[f].reference)
                                             for f in ("cuttledoc-fleurs/fleurs-en-000.ogg",))]
    drafted, spelled_texts = 0, {}
    for path, language, reference in cases:
        audio, opts = load_audio(path), DecodeOptions(language=language)
        digits = _text(tiny_engine.transcribe(audio, opts))
        plain, ngram = (spelled[d].transcribe(audio, opts) for d in ("none", "ngram"))
        text = spelled_texts[path] = _text(plain)
        print(f"\n{path.name}: {digits!r}\n  -> {text!r}")
        assert any(ch in NUMERAL_SYMBOLS for ch in digits)  # tiny.en writes digits here...
        assert not any(ch in NUMERAL_SYMBOLS for ch in text)  # ...and spells them when told not to
        # Whisper's normaliser writes spelled numbers as digits: the words are as right as before
        assert wer([reference], [text], language) <= wer([reference], [digits], language) + 0.1
        assert [s.tokens for s in ngram.segments] == [s.tokens for s in plain.segments]  # exact
        drafted += ngram.stats.drafted_tokens
    assert drafted > 0
    assert "fifteen percent" in spelled_texts[spoken_numbers]


def test_suppress_tokens_values(base_engine):
    gc = base_engine.bundle.generation_config
    assert base_engine.suppressed == sorted(gc.suppress_tokens)  # -1, the default: the model's own set
    assert AsrEngine("base", bundle=base_engine.bundle, suppress_tokens="").suppressed == []
    assert AsrEngine("base", bundle=base_engine.bundle, suppress_tokens="-1,50").suppressed == sorted({*gc.suppress_tokens, 50})
    assert check_values({"suppress_tokens": " 220, -1 ,7"}, "cli")["suppress_tokens"] == "-1,7,220"
    for value, message in (("1,two", "got 'two'"), ("-5", "token ids are >= 0 (-1: the model's own set), got -5")):
        with pytest.raises(ValueError, match=re.escape(message)):
            check_values({"suppress_tokens": value}, "cli")
    with pytest.raises(ValueError, match=r"^suppress-tokens: 99999 is not a token of this model \(its ids are 0 to 51864\)$"):
        AsrEngine("base", bundle=base_engine.bundle, suppress_tokens="-1,99999")  # checked where the vocabulary is known
    for entry in ("http", "ui"):
        with pytest.raises(ValueError, match="built into the decoder when the model loads"):
            check_values({"suppress_numerals": True}, entry)


def test_cli_suppress_flags(spoken_numbers, tmp_path):
    """WhisperX's switch on the command line, in a fresh process (the model loads with it; tiny.en)."""
    run = [sys.executable, "-m", "specwhisper.serving.cli.main", str(spoken_numbers), "-o", str(tmp_path), "-f", "txt",
           "--language", "en", "-m", "tiny.en"]
    proc = subprocess.run([*run, "--suppress_numerals"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    text = (tmp_path / "numbers.txt").read_text()
    assert "fifteen percent" in text and not any(ch in NUMERAL_SYMBOLS for ch in text)


def test_suppress_tokens_per_call(spelled, spoken_numbers, tiny_engine):
    """``suppress_tokens`` per call: a token the plain decode writes is never written, the speculative decode
    gives the plain decode's tokens, the model's numerals stay suppressed, and the next call without it
    decodes as before. Not a request's over HTTP or the web page (rules kept per set), one line each."""
    audio = load_audio(spoken_numbers)
    before = spelled["none"].transcribe(audio, DecodeOptions(language="en"))
    written = [t for s in before.segments for t in s.tokens]
    percent = next(t for t in written if tiny_engine.bundle.tokenizer.decode([t]) == " percent")
    opts = DecodeOptions(language="en", suppress_tokens=f"-1,{percent}")
    plain, ngram = (spelled[d].transcribe(audio, opts) for d in ("none", "ngram"))
    tokens = [t for s in plain.segments for t in s.tokens]
    assert percent not in tokens and tokens != written
    assert [s.tokens for s in ngram.segments] == [s.tokens for s in plain.segments] and ngram.stats.drafted_tokens > 0
    assert not any(ch in NUMERAL_SYMBOLS for ch in _text(plain))
    again = spelled["none"].transcribe(audio, DecodeOptions(language="en"))
    assert [s.tokens for s in again.segments] == [s.tokens for s in before.segments]
    for entry in ("http", "ui"):
        with pytest.raises(ValueError, match="a set per request") as info:
            check_values({"suppress_tokens": "-1,5"}, entry)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"^suppress-tokens: 99999 is not a token of this model"):
        DecodeOptions(suppress_tokens="-1,99999").validate(tiny_engine.special)
