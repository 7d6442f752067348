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
    import specwhisper

    assert specwhisper.transcribe(model, audio.numpy(), language="en", temperature=0.0)["text"] == result["text"]


@pytest.mark.parametrize("arguments,message", [
    (dict(prefix="And so"), "prefix: only openai-whisper's default (None)"),
    (dict(length_penalty=11.0), "length_penalty"),
    (dict(suppress_tokens="-1,99999"), "suppress-tokens: 99999 is not a token of this model"),
    (dict(suppress_tokens="-1,x"), "suppress_tokens: token ids separated by commas"),
    (dict(made_up=1), "made_up is not one of openai-whisper's arguments"),
    (dict(temperature=(0.0, 0.3)), "temperature: a list must rise in equal steps"),
    (dict(patience=2.0), "patience requires beam_size to be given"),  # openai-whisper's own check and words
])
def test_what_it_does_not_offer_is_refused_in_one_line(model, arguments, message):
    with pytest.raises(ValueError, match=re.escape(message)) as info:
        model.transcribe(np.zeros(16000, dtype=np.float32), **arguments)
    assert "\n" not in str(info.value)


@pytest.fixture(scope="module")
def theirs(model):
    """openai-whisper's own ``Whisper`` module holding the same base weights as ``model``."""
    from bench.hallucination import openai_model

    return openai_model(model.transcriber.pipeline.asr.bundle)


def test_openai_whispers_readme_example_runs_and_decodes_as_openai_whisper(model, theirs, jfk):
    """The second example of openai-whisper's README (``load_audio``, ``pad_or_trim``, ``log_mel_spectrogram``,
    ``model.detect_language``, ``whisper.decode``), through ``import specwhisper as whisper``: openai-whisper's own
    log-mel of the same samples, its language probability, and its tokens, text and scores from its own
    ``decode`` on the same weights: greedy, beam search, without timestamps, after a prompt, translating, and
    each stopped at ``sample_len`` tokens."""
    import specwhisper as ours

    audio = ours.pad_or_trim(ours.load_audio(str(jfk.path)))
    mel = ours.log_mel_spectrogram(audio, n_mels=model.dims.n_mels).to(model.device)
    assert torch_allclose(mel, whisper.log_mel_spectrogram(audio, n_mels=80))
    _, probs = model.detect_language(mel)
    _, want_probs = theirs.detect_language(mel)
    assert max(probs, key=probs.get) == "en" and probs["en"] == pytest.approx(want_probs["en"], abs=1e-3)
    result = ours.decode(model, mel, ours.DecodingOptions())
    assert wer([jfk.reference], [result.text]) <= 0.05
    # the encoder's output, which decode and detect_language take in the mel's place: each side's own, once
    features, want_features = model.embed_audio(mel[None]), theirs.embed_audio(mel[None])
    assert features.shape == want_features.shape == (1, model.dims.n_audio_ctx, model.dims.n_audio_state)
    # the same fp32 sums in another order: within 1e-4 of the output's largest value (an AVX2 EPYC: 1.2e-3 of a
    # largest 24.3, mean 1.4e-6; the decodes below from each side's own features are what must agree exactly)
    assert torch_allclose(features, want_features, atol=1e-4 * float(want_features.abs().max()))
    assert model.detect_language(features[0])[1] == probs and model.decode(features[0]).tokens == result.tokens
    (fellow,) = model.transcriber.pipeline.asr.bundle.tokenizer.encode(" fellow", add_special_tokens=False)
    prefix = "And so, my fellow Americans,"  # commas greedy base does not write
    for options in [{}, dict(beam_size=5), dict(without_timestamps=True), dict(prompt="Kennedy's speech."),
                    dict(language="es", task="translate"), dict(suppress_tokens=f"-1,{fellow}"), dict(sample_len=10),
                    dict(sample_len=10, beam_size=5), dict(sample_len=3, without_timestamps=True),
                    dict(prefix=prefix), dict(prefix=prefix, without_timestamps=True), dict(prefix=prefix, beam_size=5),
                    dict(prefix=prefix, sample_len=220), dict(suppress_blank=False, max_initial_timestamp=None)]:
        got = model.decode(features[0], ours.DecodingOptions(**options))
        want = whisper.decode(theirs, want_features[0], whisper.DecodingOptions(fp16=False, **options))
        assert (got.tokens, got.text, got.language) == (want.tokens, want.text, want.language), options
        assert got.avg_logprob == pytest.approx(want.avg_logprob, abs=1e-3)
        assert got.no_speech_prob == pytest.approx(want.no_speech_prob, abs=1e-3)
        assert got.compression_ratio == pytest.approx(want.compression_ratio)
    batch = model.decode(mel[None].repeat(2, 1, 1), without_timestamps=True)  # a batch: a list, row by row
    want = whisper.decode(theirs, mel, whisper.DecodingOptions(fp16=False, without_timestamps=True))
    assert [r.text for r in batch] == [want.text] * 2 and batch[0].language_probs["en"] == pytest.approx(probs["en"])


def test_encoder_output_alone_decodes_with_a_drafter_of_its_own_encoder(model, jfk):
    """tiny.en drafts for base with an encoder of its own, which encoder output alone cannot feed: that
    decode runs without drafts and gives the tokens of the mel's (drafted) decode and of plain decoding."""
    import specwhisper as ours

    drafted = ours.load_model("base", device="cpu", draft="tiny.en")
    mel = ours.log_mel_spectrogram(ours.pad_or_trim(ours.load_audio(str(jfk.path))))
    want = model.decode(mel, beam_size=None).tokens
    assert drafted.decode(mel).tokens == want
    assert drafted.decode(drafted.embed_audio(mel[None])[0]).tokens == want
    with pytest.raises(ValueError, match=r"the encoder's \[batch, 1500, 512\]"):
        drafted.decode(mel[:, :1500])


@pytest.mark.parametrize("sample_len", [10, 40])
def test_transcribe_stops_each_window_at_sample_len_as_openai_whisper(model, theirs, manifest, sample_len):
    """openai-whisper's own ``transcribe`` with ``sample_len`` on the same weights (greedy, each window after
    the text before), a LibriSpeech clip of 47 tokens. At 40: three segments, the last decoded again from
    the last finished one, the same text as ours. At 10 its one window's text has no closing timestamp:
    openai-whisper keeps it and seeks past the window; ours keeps it too and decodes the rest again."""
    item = next(m for m in manifest if m.file == "lhotse/2412-153948-0000.flac")
    got = [s["text"] for s in model.transcribe(str(item.path), sample_len=sample_len, temperature=0.0)["segments"]]
    want = [s["text"] for s in whisper.transcribe(theirs, str(item.path), sample_len=sample_len, temperature=0.0,
                                                  fp16=False)["segments"]]
    if sample_len == 40:
        assert got == want and len(got) == 3
    else:
        assert want == [" If the reader will excuse me, I will"] and got[0] == want[0]
        assert wer([item.reference], [" ".join(got)]) < wer([item.reference], [" ".join(want)]) - 0.3, got


def test_carry_initial_prompt_opens_every_windows_prompt(model, manifest, monkeypatch, run_cli, tmp_path):
    """openai-whisper's ``carry_initial_prompt=True``: the initial prompt opens every window's prompt however
    long the text before the window grows (here a prompt holding 24 tokens of text, which one window's text
    fills); without it, the first window's alone. The same from the command line, in openai-whisper's
    spelling (``--carry_initial_prompt True``)."""
    import soundfile as sf

    from tests.test_no_lost_speech import spy_prompts

    engine = model.transcriber.pipeline.asr
    prompts = spy_prompts(monkeypatch, 24)
    clips = [load_audio(m.path) for m in manifest
             if m.file in ("lhotse/2412-153948-0000.flac", "openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-002.ogg")]
    audio = np.concatenate([p for clip in clips for p in (clip, np.zeros(16000, np.float32))])
    initial = engine.context_of("A reading.")
    sf.write(tmp_path / "three.wav", audio, 16000)
    for carry in (True, False):
        for how in ("python", "cli"):
            prompts.clear()
            if how == "python":
                model.transcribe(audio, initial_prompt="A reading.", carry_initial_prompt=carry, temperature=0.0)
            else:
                code, _, _ = run_cli(tmp_path / "three.wav", "--condition_on_previous_text", "True", "--initial_prompt",
                                     "A reading.", "--carry_initial_prompt", str(carry), "-f", "txt", "-o", tmp_path)
                assert code == 0
            contexts = [p[1 : p.index(engine.special.sot)] for p in prompts]  # after <|startofprev|>
            assert len(contexts) >= 2 and contexts[0][: len(initial)] == initial, how
            assert all((c[: len(initial)] == initial) == carry for c in contexts[1:]), (carry, how, contexts)


def test_bad_decoding_options_and_windows_are_one_line_errors(model, jfk):
    import specwhisper as ours

    mel = ours.log_mel_spectrogram(ours.pad_or_trim(ours.load_audio(str(jfk.path))))
    for bad, words in [(dict(sample_len=0), "max new tokens"), (dict(prompt="ab " * 300, prefix="ab " * 300), "prompt and prefix"),
                       (dict(language="Klingon"), "unknown language 'Klingon'"),
                       (dict(best_of=2), "best_of"), (dict(beam_size=2, best_of=2), "beam_size"),
                       (dict(prompt=[99999999]), r"prompt: token id 99999999 is not in the model's vocabulary"),
                       (dict(prefix=["a"]), "prefix: token ids are integers")]:
        with pytest.raises(ValueError, match=words) as error:
            ours.decode(model, mel, ours.DecodingOptions(**bad))
        assert "\n" not in str(error.value)
    for window in (mel[:, :100], mel[:40]):
        with pytest.raises(ValueError, match=r"pad_or_trim") as error:
            model.decode(window)
        assert "\n" not in str(error.value)
    with pytest.raises(ValueError, match="beam_sizes"):
        ours.decode(model, mel, beam_sizes=2)
    ids = tuple(model.transcriber.pipeline.asr.context_of("Ask not."))  # token ids as a tuple, as openai takes any sequence
    assert ours.decode(model, mel, ours.DecodingOptions(prompt=ids)).text == \
        ours.decode(model, mel, ours.DecodingOptions(prompt="Ask not.")).text
    with open(jfk.path, "rb") as f:  # a file object is read (openai-whisper takes none; this package's others do)
        assert "ask not what your country" in model.transcribe(f)["text"] and not f.closed
    for samples in (np.zeros(0, np.float32), np.zeros(100, np.float32), np.zeros((2, 16000), np.float32)):
        with pytest.raises(ValueError, match="log_mel_spectrogram: mono samples"):
            ours.log_mel_spectrogram(samples)


def torch_allclose(a, b, atol: float = 1e-5) -> bool:
    return bool((a - b).abs().max() < atol)


def test_the_fields_of_openai_whispers_own_dataclasses(model, theirs):
    from specwhisper.pipeline.openai_decoding import DecodingOptions, DecodingResult, ModelDimensions

    for mine, own in [(DecodingOptions, whisper.DecodingOptions), (DecodingResult, whisper.DecodingResult),
                      (ModelDimensions, whisper.model.ModelDimensions)]:
        assert [f.name for f in dataclasses.fields(mine)] == [f.name for f in dataclasses.fields(own)]
    assert dataclasses.asdict(model.dims) == dataclasses.asdict(theirs.dims)
    assert (model.is_multilingual, model.num_languages) == (theirs.is_multilingual, theirs.num_languages)


def test_pad_or_trim_as_openai_whispers():
    import torch

    import specwhisper as ours

    for array in (np.arange(10, dtype=np.float32), np.ones((2, 7), np.float32)):
        for length, axis in [(4, -1), (12, -1), (5, 0), (7, -1)]:
            want = whisper.pad_or_trim(array, length, axis=axis)
            np.testing.assert_array_equal(ours.pad_or_trim(array, length, axis=axis), want)
            got = ours.pad_or_trim(torch.from_numpy(array), length, axis=axis)
            assert torch.equal(got, whisper.pad_or_trim(torch.from_numpy(array), length, axis=axis))


@pytest.mark.parametrize("options", [{}, dict(max_line_width=20, max_line_count=2), dict(max_words_per_line=3),
                                     dict(highlight_words=True), dict(max_line_count=2)],
                         ids=["plain", "width-count", "words", "highlight", "count-alone"])
def test_whisper_utils_get_writer_writes_openai_whispers_files(model, jfk, tmp_path, options):
    """``whisper.utils.get_writer`` under ``import specwhisper as whisper``: each format's file, from a result
    with word timestamps, is the file openai-whisper's own ``get_writer`` writes from it with the same options
    (a line count without a width is ignored there, and here); json is the dict itself."""
    import json

    import specwhisper as ours

    result = model.transcribe(str(jfk.path), word_timestamps=True, language="en")
    (tmp_path / "ours").mkdir()
    (tmp_path / "theirs").mkdir()
    ours.utils.get_writer("all", str(tmp_path / "ours"))(result, "clip.flac", options)
    whisper.utils.get_writer("all", str(tmp_path / "theirs"))(result, "clip.flac", {**WRITER_DEFAULTS, **options})
    for fmt in ("txt", "vtt", "srt", "tsv"):
        assert (tmp_path / "ours" / f"clip.{fmt}").read_text() == (tmp_path / "theirs" / f"clip.{fmt}").read_text(), fmt
    assert json.loads((tmp_path / "ours" / "clip.json").read_text()) == json.loads(json.dumps(result))
    with pytest.raises(ValueError, match="get_writer: one of txt") as error:
        ours.utils.get_writer("docx", str(tmp_path))
    assert "\n" not in str(error.value)


WRITER_DEFAULTS = {"max_line_width": None, "max_line_count": None, "highlight_words": False, "max_words_per_line": None}
