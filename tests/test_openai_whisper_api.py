"""``import specwhisper as whisper``: openai-whisper's ``load_model(...).transcribe(...)``, its result written by
openai-whisper's own writers, every argument of openai-whisper's ``transcribe`` and ``DecodingOptions`` taken at
its default, its verbose lines, and what this package does not offer refused in one line."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest

whisper = pytest.importorskip("whisper")

from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.evaluation.transcripts import wer  # noqa: E402


@pytest.fixture(scope="module")
def model():
    import specwhisper

    return specwhisper.load_model("base")


@pytest.fixture(scope="module")
def jfk(manifest):
    return next(item for item in manifest if item.file == "openai-whisper/jfk.flac")


def test_the_result_openai_whispers_writers_write(model, jfk, tmp_path, capsys):
    result = model.transcribe(str(jfk.path), verbose=True)
    assert set(result) == {"text", "segments", "language"} and result["language"] == "en"
    assert wer([jfk.reference], [result["text"]]) <= 0.05
    lines = capsys.readouterr().out.splitlines()  # openai-whisper's verbose lines, one per segment as it is final
    assert len(lines) == len(result["segments"]) >= 1
    for line, segment in zip(lines, result["segments"]):
        assert re.fullmatch(r"\[\d\d:\d\d\.\d{3} --> \d\d:\d\d\.\d{3}\]  ?" + re.escape(segment["text"]), line), line
    for fmt in ("txt", "srt", "vtt", "tsv", "json"):
        whisper.utils.get_writer(fmt, str(tmp_path))(result, "jfk.flac")
    cues = (tmp_path / "jfk.srt").read_text().strip().split("\n\n")
    assert [c.splitlines()[2] for c in cues] == [s["text"].strip() for s in result["segments"]]


def test_every_argument_of_openai_whispers_transcribe_is_taken_at_its_default(model, jfk):
    """The parameters of openai-whisper's own ``transcribe`` and ``DecodingOptions``, each at openai-whisper's
    default, on a tensor of the clip's first 5 s (openai-whisper takes tensors and arrays of 16 kHz samples)."""
    import torch

    taken = {name: p.default for name, p in inspect.signature(whisper.transcribe).parameters.items()
             if name not in ("model", "audio", "decode_options")}
    taken.update({f.name: f.default for f in dataclasses.fields(whisper.DecodingOptions) if f.name != "temperature"})
    audio = torch.from_numpy(load_audio(jfk.path)[: 5 * 16000])
    result = model.transcribe(audio, **taken)
    assert "fellow americans" in result["text"].lower()
    arrays = model.transcribe(audio.numpy(), language="en", condition_on_previous_text=False, temperature=0.0)
    assert arrays["text"] == result["text"]


@pytest.mark.parametrize("arguments,message", [
    (dict(prefix="And so"), "prefix: only openai-whisper's default (None)"),
    (dict(length_penalty=11.0), "length_penalty"),
    (dict(suppress_tokens="-1,123"), "suppress_tokens: only openai-whisper's default ('-1')"),
    (dict(made_up=1), "made_up is not one of openai-whisper's arguments"),
    (dict(temperature=(0.0, 0.3)), "temperature: a list must rise in equal steps"),
])
def test_what_it_does_not_offer_is_refused_in_one_line(model, arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        model.transcribe(np.zeros(16000, dtype=np.float32), **arguments)
    assert "\n" not in str(info.value)
