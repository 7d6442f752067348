"""``specwhisper.WhisperModel``, faster-whisper's class over ours, against faster-whisper itself on the same
embedded base weights: the same segments' text, language and probability, with faster-whisper's defaults (beam
search, conditioning) and with greedy decoding and word timestamps; the same fields as faster-whisper's own
dataclasses; its arguments we do not offer refused in one line."""

from __future__ import annotations

import dataclasses
import inspect
import re

import numpy as np
import pytest

faster_whisper = pytest.importorskip("faster_whisper")

from specwhisper.pipeline.faster_whisper import (BatchedInferencePipeline, FwSegment, FwWord,  # noqa: E402
                                                  TranscriptionInfo, WhisperModel)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from specwhisper.asr.weights.loader import write_ct2_folder

    theirs = faster_whisper.WhisperModel(str(write_ct2_folder("base", tmp_path_factory.mktemp("ct2"))), device="cpu",
                                         compute_type="float32", cpu_threads=2)
    return WhisperModel("base", device="cpu"), theirs


@pytest.mark.parametrize("clip,arguments", [
    ("openai-whisper/jfk.flac", {}),  # faster-whisper's defaults: beam 5, each window after the text before
    ("cuttledoc-fleurs/fleurs-es-000.ogg", dict(beam_size=1, condition_on_previous_text=False, word_timestamps=True)),
], ids=["defaults-english", "greedy-words-spanish"])
def test_the_segments_and_info_faster_whisper_gives(models, eval_root, clip, arguments):
    ours, theirs = models
    path = str(eval_root / clip)
    segments, info = ours.transcribe(path, **arguments)
    assert inspect.isgenerator(segments)  # lazy, as faster-whisper's
    got = list(segments)
    want_segments, want = theirs.transcribe(path, **arguments)
    want_segments = list(want_segments)
    assert [s.text for s in got] == [s.text for s in want_segments]
    assert [s.id for s in got] == [s.id for s in want_segments]
    assert (info.language, info.duration) == (want.language, pytest.approx(want.duration, abs=0.01))
    assert info.language_probability == pytest.approx(want.language_probability, abs=0.01)
    assert info.all_language_probs[0][0] == want.all_language_probs[0][0]
    if arguments.get("word_timestamps"):
        assert [w.word for s in got for w in s.words] == [w.word for s in want_segments for w in s.words]
        starts = [w.start for s in got for w in s.words]
        assert max(abs(a - w.start) for a, w in zip(starts, (w for s in want_segments for w in s.words))) < 0.5
    else:
        assert all(s.words is None for s in got)


def test_the_fields_of_faster_whispers_own_dataclasses():
    from faster_whisper.transcribe import Segment, TranscriptionInfo as Info, Word

    for mine, theirs in [(FwSegment, Segment), (FwWord, Word), (TranscriptionInfo, Info)]:
        assert [f.name for f in dataclasses.fields(mine)] == [f.name for f in dataclasses.fields(theirs)]


def test_what_it_does_not_offer_is_refused_in_one_line(models, eval_root):
    ours, _ = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    for arguments, message in [(dict(length_penalty=-2.0), "length_exponent: must be between 0 and 10, got -2"),
                               (dict(max_initial_timestamp=-1.0), "max_initial_timestamp: must be between 0 and 30"),
                               (dict(beam_size=5, made_up=1), "made_up is not one of faster-whisper's arguments"),
                               (dict(temperature=[0.0, 0.5, 0.6]), "temperature: a list must rise in equal steps"),
                               (dict(beam_size=0), "beam_size")]:
        with pytest.raises(ValueError, match=re.escape(message)) as info:
            ours.transcribe(path, **arguments)
        assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="compute_type: one of"):
        WhisperModel("base", compute_type="int16")
    # faster-whisper's README GPU type on a CPU: CTranslate2 falls back to int8_float32, and so does this
    assert WhisperModel("tiny.en", device="cpu", compute_type="int8_float16").transcriber.pipeline.asr.model_name == "tiny.en:int8"
    # and on a GPU, where CTranslate2 runs int8 and this does not, every int8 type takes half-precision weights
    # with a warning, not a refusal (no GPU needed to check the choice)
    from specwhisper.pipeline.faster_whisper import compute_weights

    assert compute_weights("int8", "cpu") == ("auto", True, None)
    assert compute_weights("float16", "cuda") == ("float16", False, None)
    for compute_type, dtype in [("int8", "float16"), ("int8_float32", "float16"), ("int8_float16", "float16"),
                                ("int8_bfloat16", "bfloat16")]:
        assert compute_weights(compute_type, "cuda") == (dtype, False, f"compute_type {compute_type}: int8 weights "
                                                         f"run on the CPU only here; {dtype} weights on the GPU")


def test_two_transcriptions_iterated_together_take_turns(models, eval_root):
    """faster-whisper lets a program hold several lazy transcriptions at once; here they take turns on the
    models (``Transcriber.turn``): two of them iterated side by side give what each gives alone."""
    ours, _ = models
    paths = [str(eval_root / "openai-whisper/jfk.flac"), str(eval_root / "lhotse/2412-153948-0000.flac")]
    alone = [[s.text for s in ours.transcribe(p, language="en", beam_size=1)[0]] for p in paths]
    first, second = (ours.transcribe(p, language="en", beam_size=1)[0] for p in paths)
    together: list[list[str]] = [[], []]
    for a, b in zip(first, second):
        together[0].append(a.text)
        together[1].append(b.text)
    together[0] += [s.text for s in first]
    together[1] += [s.text for s in second]
    assert together == alone


def test_the_batched_pipeline_gives_faster_whispers_batched_text(models, eval_root):
    """``BatchedInferencePipeline(model).transcribe(audio, batch_size=4)`` on four clips with 2 s pauses (51 s):
    the VAD's speech in batched windows without timestamps, the same segments' text as faster-whisper's own
    batched pipeline on the same weights (both leave the FLEURS clip out: their VADs reject it)."""
    import numpy as np

    from specwhisper.audio.loading import load_audio
    from specwhisper.pipeline.faster_whisper import BatchedInferencePipeline

    ours, theirs = models
    clips = ["openai-whisper/jfk.flac", "lhotse/2412-153948-0000.flac", "cuttledoc-fleurs/fleurs-en-000.ogg",
             "coqui-tts-ljspeech/LJ001-0001.wav"]
    pause = np.zeros(32000, dtype=np.float32)
    audio = np.concatenate([p for c in clips for p in (load_audio(eval_root / c), pause)])
    got, info = BatchedInferencePipeline(ours).transcribe(audio, batch_size=4)
    want, _ = faster_whisper.BatchedInferencePipeline(model=theirs).transcribe(audio, batch_size=4)
    texts = [s.text for s in got]
    assert texts == [s.text for s in want] and len(texts) == 2  # windows of up to 30 s of speech
    assert info.transcription_options["vad_filter"] and info.transcription_options["without_timestamps"]


def test_faster_whispers_vad_options_dataclass_is_taken(models, eval_root):
    """``vad_parameters=VadOptions(...)`` (faster-whisper's own dataclass) is taken as its dict is: the VAD
    settings it holds, JFK's words with it (not compared with faster-whisper's text: its VAD is silero 6.0,
    ours 6.2, which cut this clip elsewhere); a field we do not offer, away from its default, is refused in
    one line."""
    from faster_whisper.vad import VadOptions

    ours, _ = models
    decode = ours.transcriber.options(vad_parameters=VadOptions(threshold=0.4, min_silence_duration_ms=500)).decode
    assert (decode.vad_threshold, decode.vad_min_silence_ms, decode.vad_speech_pad_ms) == (0.4, 500, 400)
    path = str(eval_root / "openai-whisper/jfk.flac")
    arguments = dict(language="en", beam_size=1, vad_filter=True, vad_parameters=VadOptions(min_silence_duration_ms=500))
    segments, info = ours.transcribe(path, **arguments)
    text = " ".join(s.text for s in segments).lower()
    assert "ask not what your country can do for you" in text and "what you can do for your country" in text
    assert info.vad_options == VadOptions(min_silence_duration_ms=500)
    with pytest.raises(ValueError, match="neg_threshold") as info:
        ours.transcribe(path, vad_filter=True, vad_parameters=VadOptions(neg_threshold=0.2))
    assert "\n" not in str(info.value)


def test_vad_filter_takes_faster_whispers_vad_defaults(models, eval_root):
    """``vad_filter=True`` alone applies faster-whisper's ``VadOptions()`` (a span ends at 2 s of silence), the
    batched pipeline its own 160 ms, and what a dict leaves out is at ``VadOptions``' defaults, as there."""
    from faster_whisper.vad import VadOptions

    ours, _ = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    keys = ("threshold", "min_silence_duration_ms", "speech_pad_ms")
    theirs = {k: getattr(VadOptions(), k) for k in keys}
    segments, info = ours.transcribe(path, language="en", beam_size=1, vad_filter=True)
    assert info.vad_options == theirs and "country" in " ".join(s.text for s in segments)
    _, info = ours.transcribe(path, language="en", vad_filter=True, vad_parameters={"threshold": 0.4})
    assert info.vad_options == {**theirs, "threshold": 0.4}
    decode = ours.transcriber.options(vad_filter=True, vad_parameters=info.vad_options).decode
    assert (decode.vad_threshold, decode.vad_min_silence_ms, decode.vad_speech_pad_ms) == (0.4, 2000, 400)
    _, info = BatchedInferencePipeline(ours).transcribe(path, language="en", batch_size=2)
    assert info.vad_options == {**theirs, "min_silence_duration_ms": 160}


def test_duration_after_vad_is_the_speech_faster_whisper_keeps(models, eval_root):
    """``info.duration_after_vad`` with ``vad_filter``: the VAD's speech alone, known before any segment is
    decoded, as faster-whisper's; JFK, 8 s of silence, JFK again: the silence gone, what silero-vad's own
    ``get_speech_timestamps`` keeps with faster-whisper's ``VadOptions()``, within a second of what faster-whisper
    keeps (its silero 6.0 ends JFK's span 0.5 s sooner than silero 6.2); without the filter, the whole duration."""
    import silero_vad
    import torch

    from specwhisper.audio.loading import load_audio

    ours, theirs = models
    jfk = load_audio(str(eval_root / "openai-whisper/jfk.flac"))
    audio = np.concatenate([jfk, np.zeros(8 * 16000, np.float32), jfk])
    _, info = ours.transcribe(audio, language="en", vad_filter=True)
    _, want = theirs.transcribe(audio, language="en", vad_filter=True)
    assert info.duration == pytest.approx(want.duration, abs=0.01) == pytest.approx(30.0, abs=0.1)
    silero = silero_vad.get_speech_timestamps(torch.from_numpy(audio), silero_vad.load_silero_vad(), threshold=0.5,
                                              min_silence_duration_ms=2000, speech_pad_ms=400, min_speech_duration_ms=0)
    assert info.duration_after_vad == pytest.approx(sum(t["end"] - t["start"] for t in silero) / 16000, abs=0.05)
    assert info.duration_after_vad == pytest.approx(want.duration_after_vad, abs=1.0)
    assert info.duration_after_vad < info.duration - 6
    _, info = ours.transcribe(audio, language="en")
    assert info.duration_after_vad == info.duration
    spans = ours.transcriber.speech_spans(audio, sample_rate=16000, vad_filter=True)
    assert len(spans) >= 2 and spans[0][0] < 1 and any(a > 18 for a, _ in spans)  # each JFK heard, the gap not


def test_faster_whispers_log_lines(models, eval_root, caplog):
    """The INFO lines faster-whisper writes on its ``faster_whisper`` logger, which programs read: the duration,
    what the VAD filter removed (faster-whisper's own ``format_timestamp``), the language detected."""
    import logging

    from faster_whisper.utils import format_timestamp

    ours, _ = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    with caplog.at_level(logging.INFO, logger="faster_whisper"):
        _, info = ours.transcribe(path, vad_filter=True)
    lines = [r.getMessage() for r in caplog.records if r.name == "faster_whisper"]
    assert f"Processing audio with duration {format_timestamp(info.duration)}" in lines
    assert f"VAD filter removed {format_timestamp(info.duration - info.duration_after_vad)} of audio" in lines
    assert f"Detected language 'en' with probability {info.language_probability:.2f}" in lines


@pytest.mark.parametrize("clips", [[{"start": 0.0, "end": 4.0}, {"start": 4.0, "end": 11.0}], [{"start": 1.0, "end": 7.5}]],
                         ids=["two-clips", "inner-clip"])
def test_batched_clip_timestamps_as_faster_whispers_dicts(models, eval_root, clips):
    """The batched pipeline's ``clip_timestamps``, faster-whisper's list of ``{"start", "end"}`` seconds: each clip
    transcribed, no VAD, faster-whisper's own text on the same weights, its ``duration_after_vad`` (the clips'
    seconds); a clip without its keys refused in one line."""
    ours, theirs = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    segments, info = BatchedInferencePipeline(ours).transcribe(path, language="en", clip_timestamps=clips)
    got = list(segments)
    want_segments, want = faster_whisper.BatchedInferencePipeline(theirs).transcribe(path, language="en",
                                                                                    clip_timestamps=clips)
    assert [s.text for s in got] == [s.text for s in want_segments]
    assert info.duration_after_vad == pytest.approx(want.duration_after_vad, abs=0.01)
    assert all(clips[0]["start"] <= s.start < s.end <= clips[-1]["end"] for s in got)
    with pytest.raises(ValueError, match="clip_timestamps") as error:
        BatchedInferencePipeline(ours).transcribe(path, clip_timestamps=[{"start": 1.0}])
    assert "\n" not in str(error.value)


def test_faster_whispers_module_functions(eval_root):
    """``decode_audio`` (its samples and split channels against faster-whisper's own PyAV decoding),
    ``available_models`` (every name faster-whisper's and openai-whisper's list is taken) and
    ``format_timestamp`` (their own's strings), from ``specwhisper`` as from ``faster_whisper``."""
    import io

    import specwhisper
    from faster_whisper.utils import format_timestamp as theirs

    stereo = str(eval_root / "faster-whisper/stereo_diarization.wav")
    left, right = specwhisper.decode_audio(stereo, split_stereo=True)
    want_left, want_right = faster_whisper.decode_audio(stereo, split_stereo=True)
    for got, want in [(left, want_left), (right, want_right)]:
        assert got.dtype == np.float32 and len(got) == len(want) and np.abs(got - want).max() < 1e-3
    with open(stereo, "rb") as f:
        mono = specwhisper.decode_audio(f)
    want = faster_whisper.decode_audio(io.BytesIO(open(stereo, "rb").read()))
    assert len(mono) == len(want) and np.abs(mono - want).max() < 1e-3
    low, want = specwhisper.decode_audio(stereo, sampling_rate=8000), faster_whisper.decode_audio(stereo, sampling_rate=8000)
    assert abs(len(low) - len(want)) <= 1 and np.corrcoef(low[:len(want)], want[:len(low)])[0, 1] > 0.99
    assert set(faster_whisper.available_models()) <= set(specwhisper.available_models())
    whisper = pytest.importorskip("whisper")
    assert set(whisper.available_models()) <= set(specwhisper.available_models())
    for seconds in (0.0, 1.0005, 61.25, 3725.5):
        for hours, marker in [(False, "."), (True, ","), (True, ".")]:
            assert specwhisper.format_timestamp(seconds, hours, marker) == theirs(seconds, hours, marker)
            assert specwhisper.format_timestamp(seconds, always_include_hours=hours, decimal_marker=marker) == \
                whisper.utils.format_timestamp(seconds, always_include_hours=hours, decimal_marker=marker)


def test_suppress_tokens_per_call_as_faster_whisper(models, eval_root):
    """``suppress_tokens`` per call, faster-whisper's list: with the token of " fellow" suppressed besides the
    model's own set, JFK's text loses that token and is faster-whisper's own text with the same list; ``[]``
    (nothing suppressed) is faster-whisper's too; the next call without it decodes as before."""
    ours, theirs = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    tokenizer = ours.transcriber.pipeline.asr.bundle.tokenizer
    (fellow,) = tokenizer.encode(" fellow", add_special_tokens=False)
    arguments = dict(language="en", beam_size=1, condition_on_previous_text=False)
    plain = [s for s in ours.transcribe(path, **arguments)[0]]
    assert any(fellow in s.tokens for s in plain)
    for suppress in ([-1, fellow], []):
        got = list(ours.transcribe(path, suppress_tokens=suppress, **arguments)[0])
        want = list(theirs.transcribe(path, suppress_tokens=suppress, **arguments)[0])
        assert [s.text for s in got] == [s.text for s in want], suppress
        if fellow in suppress:
            assert not any(fellow in s.tokens for s in got) and [s.text for s in got] != [s.text for s in plain]
    assert [s.tokens for s in ours.transcribe(path, **arguments)[0]] == [s.tokens for s in plain]


def test_vad_max_speech_duration_cuts_the_spans(models, eval_root, manifest):
    """faster-whisper's ``max_speech_duration_s`` (a dict's key or ``VadOptions``' field): every VAD span at most that
    long, its pads included, as faster-whisper's own spans are; the spans silero-vad's own ``get_speech_timestamps``
    gives with the same settings (not cut a pad's width short of the limit), the sentence still transcribed whole; at or above a chunk it changes
    nothing (every span fits one already); below twice the pad plus a second, one line."""
    import torch
    from faster_whisper.vad import VadOptions
    from faster_whisper.vad import get_speech_timestamps as fw_timestamps
    from silero_vad import get_speech_timestamps, load_silero_vad

    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import wer

    ours, _ = models
    item = next(i for i in manifest if i.file == "lhotse/2412-153948-0000.flac")
    audio = load_audio(item.path)
    vad = {"min_silence_duration_ms": 2000, "speech_pad_ms": 400}
    whole = ours.transcriber.speech_spans(audio, sample_rate=16000, vad_filter=True, vad_parameters=vad)
    assert len(whole) == 1 and whole[0][1] - whole[0][0] > 10
    silero = load_silero_vad()
    for limit in (5, VadOptions(**vad, max_speech_duration_s=5), 8):
        given = {**vad, "max_speech_duration_s": limit} if isinstance(limit, int) else limit
        seconds = limit if isinstance(limit, int) else limit.max_speech_duration_s
        spans = ours.transcriber.speech_spans(audio, sample_rate=16000, vad_filter=True, vad_parameters=given)
        # silero-vad's own spans with faster-whisper's settings and this limit (its pads inside the limit)
        want = get_speech_timestamps(torch.from_numpy(audio), silero, threshold=0.5, min_speech_duration_ms=0,
                                     min_silence_duration_ms=2000, speech_pad_ms=400, max_speech_duration_s=seconds)
        assert spans == [(c["start"] / 16000, c["end"] / 16000) for c in want], limit
        assert len(spans) > 1 and all(b - a <= seconds for a, b in spans)
    theirs = fw_timestamps(audio, VadOptions(**vad, max_speech_duration_s=5))
    assert len(theirs) > 1 and all(c["end"] - c["start"] <= 5 * 16000 for c in theirs)
    segments, info = ours.transcribe(audio, beam_size=1, vad_filter=True,  # the language detected on those spans too
                                     vad_parameters={**vad, "max_speech_duration_s": 5})
    assert wer([item.reference], [" ".join(s.text for s in segments)]) < 0.15 and info.language == "en"
    same = ours.transcriber.speech_spans(audio, sample_rate=16000, vad_filter=True,
                                         vad_parameters={**vad, "max_speech_duration_s": 30})
    assert same == whole
    with pytest.raises(ValueError, match="vad max speech must be at least 1 s more than twice the speech pad") as error:
        ours.transcriber.speech_spans(audio, vad_filter=True, vad_parameters={**vad, "max_speech_duration_s": 1.5})
    assert "\n" not in str(error.value)


def test_a_file_object_is_read_once(models, eval_root):
    """A binary file object (faster-whisper takes them) is read once: the language detected, the VAD's spans and
    the segments all come from it (it was read to its end by the language detection, then found empty)."""
    ours, _ = models
    with open(eval_root / "openai-whisper/jfk.flac", "rb") as f:
        segments, info = ours.transcribe(f, beam_size=1, vad_filter=True)
        text = " ".join(s.text for s in segments)
    assert info.language == "en" and "what your country can do" in text and 0 < info.duration_after_vad <= 11.0


def test_vad_filter_hears_the_file_once(models, eval_root, monkeypatch):
    """``transcribe(vad_filter=True)`` without a language runs silero over the file once, though the language,
    ``duration_after_vad`` and the plan each need its spans (three passes before, on this 11 s file); other samples of the same
    length are heard again, and the probabilities kept are those a fresh pass gives."""
    from specwhisper.audio.loading import load_audio

    ours, _ = models
    vad = ours.transcriber.pipeline.asr.vad
    audio = load_audio(str(eval_root / "openai-whisper/jfk.flac"))
    vad._last = None  # what an earlier test heard
    heard = []
    windows = vad._windows
    monkeypatch.setattr(vad, "_windows", lambda *a: heard.append(1) or windows(*a))
    segments, info = ours.transcribe(audio, beam_size=1, vad_filter=True)
    assert "ask not what your country" in " ".join(s.text for s in segments) and info.language == "en"
    assert len(heard) == 1  # one block: JFK's 11 s is one call of the network
    kept = vad.speech_probs(audio)
    assert len(heard) == 1
    other = audio.copy()
    other[: len(other) // 2] = 0.0
    assert vad.speech_probs(other) != kept and len(heard) == 2
    vad._last = None
    assert vad.speech_probs(audio) == kept and len(heard) == 3


def test_faster_whisper_code_that_ran_there_runs_here(models, eval_root, caplog):
    """Calls faster-whisper takes, against faster-whisper on the same weights where it runs them: a prompt of
    token ids, ``chunk_length=None`` (its default), a clip past the end (no segment), its deprecated ``_asdict``,
    ``supported_languages``; a language name is given back as its code."""
    ours, theirs = models
    path = str(eval_root / "openai-whisper/jfk.flac")
    ids = theirs.hf_tokenizer.encode(" Ask not, Americans.", add_special_tokens=False).ids
    got = [s.text for s in ours.transcribe(path, beam_size=1, initial_prompt=ids, chunk_length=None)[0]]
    assert got == [s.text for s in theirs.transcribe(path, beam_size=1, initial_prompt=ids, chunk_length=None)[0]]
    assert list(theirs.transcribe(path, clip_timestamps=[20, 30])[0]) == []
    segments, info = ours.transcribe(path, clip_timestamps=[20, 30])
    assert list(segments) == [] and info.duration_after_vad == 0.0
    segment = next(iter(ours.transcribe(path, beam_size=1, word_timestamps=True, language="English")[0]))
    want = next(iter(theirs.transcribe(path, beam_size=1, word_timestamps=True, language="en")[0]))
    assert segment._asdict().keys() == want._asdict().keys() and segment.words[0]._asdict().keys() == want.words[0]._asdict().keys()
    assert segment._asdict()["words"][0]["word"] == want._asdict()["words"][0]["word"]
    assert ours.transcribe(path, beam_size=1, language="English")[1].language == "en"
    assert ours.supported_languages == sorted(set(theirs.supported_languages) - {"yue"})  # base has no Cantonese
    with pytest.raises(ValueError, match=r"initial_prompt: token id 99999999 is not in the model's vocabulary \(0 to 51864\)"):
        ours.transcribe(path, initial_prompt=[99999999])


def test_an_english_only_model_transcribes_english_as_faster_whisper_does(eval_root, caplog):
    """A language other than English, translation and ``multilingual`` on an English-only model: faster-whisper
    warns and transcribes English (its tokenizer has no task or language tokens); so do the three peers' ways in."""
    import specwhisper as whisper
    import specwhisper.whisperx as whisperx
    from specwhisper.evaluation.transcripts import wer

    path = str(eval_root / "openai-whisper/jfk.flac")
    reference = "And so my fellow Americans ask not what your country can do for you ask what you can do for your country"
    model = WhisperModel("tiny.en", device="cpu")
    with caplog.at_level("WARNING", logger="faster_whisper"):
        segments, info = model.transcribe(path, beam_size=1, language="fr", task="translate", multilingual=True)
        assert wer([reference], [" ".join(s.text for s in segments)]) < 0.1 and info.language == "en"
        assert info.all_language_probs is None  # as there: nothing detected
        english = whisper.load_model("tiny.en")
        assert wer([reference], [english.transcribe(path, language="fr")["text"]]) < 0.1
        mel = whisper.log_mel_spectrogram(whisper.pad_or_trim(whisper.load_audio(path)))
        assert wer([reference], [whisper.decode(english, mel, whisper.DecodingOptions(language="fr")).text]) < 0.1
        wx = whisperx.load_model("tiny.en", "cpu", task="translate", asr_options={"beam_size": 1})
        assert wer([reference], [" ".join(s["text"] for s in wx.transcribe(path)["segments"])]) < 0.1
    said = [r.getMessage() for r in caplog.records]
    assert "The current model is English-only but the language parameter is set to 'fr'; using 'en' instead." in said
    assert "The current model is English-only and cannot translate; transcribing instead." in said
    assert any("multilingual parameter is set to True" in line for line in said)


def test_no_sign_off_is_written_over_the_silence_after_the_speech(models, eval_root):
    """A German FLEURS clip translated with faster-whisper's defaults: its 4 s of silence after the speech,
    a stretch the first decode skipped, is decoded again (nothing is lost here) and read as YouTube sign-offs
    ("Thank you for watching, see you next time!", then "Thank you for watching. Don't forget to like and
    subscribe."): Whisper's stock phrases where the VAD hears no speech are silence. faster-whisper writes
    the one segment too."""
    ours, theirs = models
    path = str(eval_root / "cuttledoc-fleurs/fleurs-de-000.ogg")
    want = [s.text for s in theirs.transcribe(path, task="translate")[0]]
    got = [s.text for s in ours.transcribe(path, task="translate")[0]]
    assert len(want) == len(got) == 1 and "Hong Kong" in got[0], (got, want)
