"""OpenAI's audio API on our server (/v1/audio/transcriptions, /v1/audio/translations, /v1/models), over
loopback with the official `openai` package as the client, and the API key on every route. Real models
(the embedded Whisper base; tiny.en, which the server also offers, where the check is of the protocol: a
format, the streaming, the shared pass, the speakers, not of base's text), real audio from the evaluation set;
transcripts are checked against their
references (WER), answers against the client's own types, every failure against OpenAI's error body,
and no upload may stay in the spool. One server for the module, short clips."""

from __future__ import annotations

import asyncio
import base64
import gc
import io
import json
import logging
import math
import os
import re
import subprocess
import threading
import time

import httpx
import numpy as np
import openai
import pytest
import soundfile as sf
from openai.types.audio import (Transcription, TranscriptionDiarized, TranscriptionTextDeltaEvent, TranscriptionTextDoneEvent,
                                TranscriptionTextSegmentEvent, TranscriptionVerbose, TranslationVerbose)
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.diarization import EVAL_DIR
from specwhisper.evaluation.transcripts import build_long_file, load_manifest, wer
from specwhisper.serving.http import serve
from specwhisper.serving.http.form_upload import FORM_OVERHEAD
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.params import Choices
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.service import ServiceSettings
from specwhisper.serving.http.config import RequestLimits
from tests.test_abuse import server_log  # noqa: F401 - a fixture: no traceback in the server's log

KEY = "sk-test-" + "0123456789abcdef"
MAX_UPLOAD = 2 * 2**20
MAX_WER = 0.05  # Whisper base on these clips: 0 after normalisation


def _item(root, name: str):
    return next(i for i in load_manifest(root) if i.file == name)


@pytest.fixture(scope="module")
def jfk(eval_root):
    item = _item(eval_root, "whisper.cpp/jfk.wav")
    return item.path.read_bytes(), item.reference


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    settings = ServiceSettings(choices=Choices(models=("base", "tiny.en"), drafters=("auto", "none"),
                                               aliases=(("gpt-4o-mini-transcribe", "tiny.en"),)), max_audio_s=60,
                               max_upload_bytes=MAX_UPLOAD)
    config = ServerConfig(port=0, requests=RequestLimits(max_upload_bytes=MAX_UPLOAD), access_log=False,
                          spool_dir=tmp_path_factory.mktemp("spool"), api_key=KEY)
    with serving(Endpoint(settings), config) as srv:
        yield srv
    assert srv.spool.files() == []


@pytest.fixture(scope="module")
def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)


@pytest.fixture(autouse=True)
def nothing_left(request):
    """After each case: no upload left in the spool (a request's file goes once its answer is out)."""
    yield
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        for _ in range(50):
            if not srv.spool.files():
                break
            time.sleep(0.1)
        assert srv.spool.files() == []


def _openai_error(exc: openai.APIStatusError, status: int, fragment: str, param: str | None = None, code: str | None = None) -> None:
    """OpenAI's error body: {"error": {"message", "type", "param", "code"}}, one line, with the status."""
    body = exc.response.json()
    assert exc.status_code == status and set(body) == {"error"}, body
    error = body["error"]
    assert set(error) == {"message", "type", "param", "code"}, error
    assert error["type"] == ("server_error" if status >= 500 else "invalid_request_error"), error
    assert fragment in error["message"] and "\n" not in error["message"] and "Traceback" not in error["message"], error
    assert error["param"] == param and error["code"] == code, error


def _cue_text(subtitles: str) -> str:
    """The text lines of an srt or vtt file (no counters, times or header)."""
    lines = [line for line in subtitles.splitlines() if line and line != "WEBVTT" and "-->" not in line and not line.isdigit()]
    return " ".join(lines)


@pytest.mark.parametrize("fmt", ["json", "text", "srt", "vtt", "verbose_json"])
def test_transcription_formats(client, jfk, fmt):
    """Each response format of JFK: OpenAI's model name (base, the default) and base by name for json and srt;
    tiny.en, a third of base's time, for the other formats' layout. verbose_json also takes chunking_strategy's
    server_vad object (its threshold, silence and padding are the VAD's), the transcript as good."""
    audio, reference = jfk
    model = {"json": "whisper-1", "srt": "base"}.get(fmt, "tiny.en")  # a model the deployment offers, by name, or OpenAI's
    vad = {"chunking_strategy": {"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 500, "prefix_padding_ms": 300}
           } if fmt == "verbose_json" else {}
    raw = client.audio.transcriptions.with_raw_response.create(file=("jfk.wav", audio), model=model, response_format=fmt, **vad)
    answer = raw.parse()
    if fmt in ("text", "srt", "vtt"):
        assert raw.headers["content-type"] == "text/plain; charset=utf-8" and isinstance(answer, str)
        text = answer.strip() if fmt == "text" else _cue_text(answer)
        # cues from the speech's start (under 0.5 s) to its end (10-11 s); base splits it where faster-whisper does, at 7.6 s
        if fmt == "srt":
            assert re.match(r"1\n00:00:00,[0-4]\d\d --> 00:00:\d\d,\d{3}\n\w", answer), answer
            assert re.search(r" --> 00:00:1\d,\d{3}\n[^\n]+\n+$", answer), answer
        if fmt == "vtt":
            assert re.match(r"WEBVTT\n\n00:00\.[0-4]\d\d --> 00:\d\d\.\d{3}\n\w", answer), answer
            assert re.search(r" --> 00:1\d\.\d{3}\n[^\n]+\n+$", answer), answer
    else:
        body = raw.http_response.json()
        typed = (Transcription if fmt == "json" else TranscriptionVerbose).model_validate(body)  # the client's own schema
        text = typed.text
        assert body["usage"] == {"type": "duration", "seconds": 11}
        if fmt == "json":
            assert set(body) == {"text", "usage"}
        else:
            assert body["task"] == "transcribe" and body["language"] == "english" and body["duration"] == pytest.approx(11.0)
            assert "words" not in body and len(typed.segments) >= 1
            for i, seg in enumerate(body["segments"]):
                assert set(seg) == {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob",
                                    "compression_ratio", "no_speech_prob"}, seg
                assert seg["id"] == i and seg["text"].startswith(" ") and seg["tokens"] and seg["start"] < seg["end"]
            assert " ".join(s.text.strip() for s in typed.segments) == text
    assert wer([reference], [text]) <= MAX_WER, text


def test_word_timestamps(client, jfk):
    audio, reference = jfk
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="verbose_json",
                                                timestamp_granularities=["word"], language="en")
    assert answer.segments is None and len(answer.words) >= 20  # only words were asked for
    assert wer([reference], [" ".join(w.word for w in answer.words)]) <= MAX_WER
    assert all(w.word == w.word.strip() and 0 <= w.start <= w.end <= 11.0 for w in answer.words)
    assert all(a.start <= b.start for a, b in zip(answer.words, answer.words[1:]))
    americans = next(w for w in answer.words if w.word.startswith("Americans"))
    assert 1.0 < americans.start < 3.5  # "And so my fellow Americans" is said in the first 3.5 s of the clip


def test_logprobs_when_included(client, jfk):
    """include[]=logprobs (OpenAI's, json only): a log-probability per word, read by the client's own types;
    the entries' tokens joined are the text, their bytes its UTF-8; a clean clip is heard with confidence
    (base on JFK: the mean over 0.8) but for the word it doubts; streamed or not (without include[], no
    logprobs: test_transcription_formats[json]'s body is text and usage alone)."""
    audio, reference = jfk
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="whisper-1", include=["logprobs"], language="en")
    entries = answer.logprobs
    assert wer([reference], [answer.text]) <= MAX_WER and len(entries) >= 20
    assert "".join(e.token for e in entries) == answer.text
    assert all(bytes(map(int, e.bytes)).decode() == e.token and e.logprob <= 0 for e in entries)  # its type: floats
    assert sum(e.logprob for e in entries) / len(entries) > math.log(0.8)
    assert min(entries, key=lambda e: e.logprob).token == " ask"  # "ask not" or "asked not": base's doubt (0.28)
    events = list(client.audio.transcriptions.create(file=("jfk.wav", audio), model="whisper-1", include=["logprobs"],
                                                     language="en", stream=True))
    done = events[-1]
    assert isinstance(done, TranscriptionTextDoneEvent) and done.text == answer.text
    TranscriptionTextDoneEvent.model_validate(done.to_dict())  # the schema's own check (its usage: the token kind)
    assert [e.token for e in done.logprobs] == [e.token for e in entries]
    assert [e.token for d in events[:-1] for e in d.logprobs] == [e.token for e in entries]


def test_clip_timestamps_through_the_openai_client(client, jfk):
    """openai-whisper's clip_timestamps as an extra form field: the last 4.5 s of JFK alone, at the file's times."""
    audio, _ = jfk
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="verbose_json",
                                                language="en", extra_body={"clip_timestamps": "6.5"})
    assert "ask what you can do for your country" in answer.text.lower() and "americans" not in answer.text.lower()
    assert answer.segments and all(6.5 <= s.start < s.end <= 11.0 for s in answer.segments), answer.segments


def test_a_text_aligned_through_the_openai_client(client, jfk):
    """align_text as an extra form field: the answer's words are the text's, word for word (Whisper hears
    "Americans" where the text says "Martians"), dated in the clip; the text's lines are its segments (tiny.en:
    the alignment does not depend on the model)."""
    audio, _ = jfk
    text = "And so, my fellow Martians:\nask not what your country can do for you;\nask what you can do for your country."
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="verbose_json",
                                                timestamp_granularities=["word", "segment"], extra_body={"align_text": text})
    assert [w.word for w in answer.words] == text.split()
    assert [s.text.strip() for s in answer.segments] == text.splitlines()
    assert answer.text == " ".join(text.split())
    assert 1.0 < answer.words[4].start < 3.5 and answer.words[-1].end <= 11.0  # "Martians" where "Americans" is said


def test_speakers_in_verbose_json(client, jfk):
    """Speakers in verbose_json's segments and words, and in diarized_json (tiny.en: the speakers do not
    depend on the model)."""
    audio, reference = jfk
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="verbose_json",
                                                timestamp_granularities=["word", "segment"],
                                                extra_body={"diarize": True, "max_speakers": 2, "draft": "none"})
    body = answer.model_dump()
    assert body["segments"] and body["words"]
    assert {s["speaker"] for s in body["segments"]} == {"SPEAKER_00"}  # one man speaks
    assert {w["speaker"] for w in body["words"]} == {"SPEAKER_00"}
    assert wer([reference], [answer.text]) <= MAX_WER
    diarized = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="diarized_json",
                                                  chunking_strategy="auto")  # OpenAI's diarizer wants it past 30 s
    assert isinstance(diarized, TranscriptionDiarized) and diarized.task == "transcribe"
    assert [s.speaker for s in diarized.segments] == ["SPEAKER_00"] * len(diarized.segments)
    assert {s.type for s in diarized.segments} == {"transcript.text.segment"} and diarized.text == answer.text


def test_channels_as_speakers(client, eval_root):
    """``multichannel``: each channel of a call its own speaker in verbose_json (tests/test_multichannel.py)."""
    item = _item(eval_root, "faster-whisper/stereo_diarization.wav")
    answer = client.audio.transcriptions.create(file=("call.wav", item.path.read_bytes()), model="tiny.en",
                                                response_format="verbose_json", extra_body={"multichannel": True})
    said = {s["speaker"]: s["text"] for s in answer.model_dump()["segments"]}
    assert sorted(said) == ["CHANNEL_1", "CHANNEL_2"] and "horizon" in said["CHANNEL_2"].lower(), said
    # diarized_json's speakers are the channels too (no diarizer runs: the channels are the speakers)
    diarized = client.audio.transcriptions.create(file=("call.wav", item.path.read_bytes()), model="tiny.en",
                                                  response_format="diarized_json", extra_body={"multichannel": True})
    assert isinstance(diarized, TranscriptionDiarized)
    assert {s.speaker: s.text for s in diarized.segments} == {k: v.strip() for k, v in said.items()}


def _data_url(path) -> str:
    return "data:audio/wav;base64," + base64.b64encode(path.read_bytes()).decode()


def test_known_speakers_named_from_reference_clips(client, eval_root):
    """OpenAI's known_speaker_names[] / known_speaker_references[]: a reader and a president, each named after
    another clip of the voice (data URLs, as the client sends them); the diarized segments carry the names
    (tiny.en: the names do not depend on the model)."""
    parts = ["coqui-tts-ljspeech/LJ001-0003.wav", "whisper.cpp/jfk.wav", "coqui-tts-ljspeech/LJ001-0004.wav"]
    audio = np.concatenate([np.concatenate([load_audio(eval_root / p), np.zeros(8000, np.float32)]) for p in parts])
    wav = io.BytesIO()
    sf.write(wav, audio, 16000, format="WAV", subtype="PCM_16")
    answer = client.audio.transcriptions.create(
        file=("talk.wav", wav.getvalue()), model="tiny.en", response_format="diarized_json",
        known_speaker_names=["reader", "president"],
        known_speaker_references=[_data_url(eval_root / "coqui-tts-ljspeech/LJ001-0001.wav"),
                                  _data_url(eval_root / "openai-whisper/jfk.flac")])
    assert isinstance(answer, TranscriptionDiarized)
    who = [s.speaker for s in answer.segments]
    assert [k for i, k in enumerate(who) if i == 0 or who[i - 1] != k] == ["reader", "president", "reader"], who
    president = " ".join(s.text for s in answer.segments if s.speaker == "president")
    assert "fellow Americans" in president and president.count("your country") == 2, president
    unknown = client.audio.transcriptions.create(  # a clip of nobody in the file names nobody
        file=("talk.wav", wav.getvalue()), model="tiny.en", response_format="diarized_json",
        known_speaker_names=["somebody"], known_speaker_references=[_data_url(eval_root / "mfa/mfa_uhum.flac")],
        extra_body={"speaker_embeddings": True})  # WhisperX's, beside OpenAI's fields
    assert {s.speaker for s in unknown.segments} == {"SPEAKER_00", "SPEAKER_01"}
    assert set(unknown.model_extra["speaker_embeddings"]) == {"SPEAKER_00", "SPEAKER_01"}


STREAMED = {"batch_size": 1, "chunk_length": 8}  # a batch, so a delta, every 8 s of speech or less


def test_streamed_transcription(server, client, tmp_path, server_log):  # noqa: F811
    """stream=true: OpenAI's transcription events through the client, the text of each segment as it becomes
    final (a chunk of at most 8 s per batch here: several deltas), then the whole text; the deltas joined are
    that text, and it is the answer without stream. A client that leaves mid-stream leaves no task behind."""
    long = build_long_file("dense", tmp_path, 25, seed=0)  # 30 s of the public clips, four chunks and more
    audio = long.path.read_bytes()
    plain = client.audio.transcriptions.create(file=("talk.wav", audio), model="tiny.en", extra_body=STREAMED)
    t = time.perf_counter()
    events = list(client.audio.transcriptions.create(file=("talk.wav", audio), model="tiny.en", stream=True,
                                                     extra_body=STREAMED))
    whole_s = time.perf_counter() - t
    assert all(isinstance(e, TranscriptionTextDeltaEvent) for e in events[:-1]) and len(events) >= 4, events
    done = events[-1]
    assert isinstance(done, TranscriptionTextDoneEvent) and done.text == plain.text
    assert "".join(e.delta for e in events[:-1]) == done.text and wer([long.reference], [done.text]) <= 0.15, done.text

    # a client that leaves after the first event: the transcription stops at its next progress report
    with httpx.stream("POST", server.url + "/v1/audio/transcriptions", files={"file": ("talk.wav", audio)},
                      data={"model": "tiny.en", "stream": "true", **{k: str(v) for k, v in STREAMED.items()}},
                      headers={"Authorization": f"Bearer {KEY}"}, timeout=60) as answer:
        assert answer.headers["content-type"].startswith("text/event-stream")
        assert next(answer.iter_lines()).startswith('data: {"type": "transcript.text.delta"')
    left = time.perf_counter()
    while server.worker.busy and time.perf_counter() - left < whole_s:
        time.sleep(0.05)
    assert time.perf_counter() - left < 0.6 * whole_s, whole_s  # a chunk or so, not the rest of the file
    server.worker.submit(lambda token: None)[0].result(30)  # the worker lets go of the stream's job (its last)
    gc.collect()  # the stream's garbage: a task it left pending would be logged as destroyed
    assert not [line for line in server_log.lines if "destroyed but it is pending" in line], server_log.lines


def test_streamed_diarized_transcription(client, tmp_path):
    """stream=true with diarized_json: the text deltas as the segments become final, then, once the file is
    diarized, a transcript.text.segment event for each segment (the diarized_json answer's segments, speakers
    included), then the whole text."""
    talk = build_long_file("speakers", tmp_path, 25, seed=0)  # a conversation of 30 s, every clip another voice
    audio = talk.path.read_bytes()
    whole = client.audio.transcriptions.create(file=("talk.wav", audio), model="tiny.en", response_format="diarized_json",
                                               extra_body=STREAMED)
    events = list(client.audio.transcriptions.create(file=("talk.wav", audio), model="tiny.en", stream=True,
                                                     response_format="diarized_json", extra_body=STREAMED))
    kinds = [e.type for e in events]
    deltas = kinds.count("transcript.text.delta")
    assert deltas >= 2 and kinds == ["transcript.text.delta"] * deltas + ["transcript.text.segment"] * len(whole.segments) + [
        "transcript.text.done"], kinds
    segments = [e for e in events if isinstance(e, TranscriptionTextSegmentEvent)]
    assert [s.model_dump(exclude={"type"}) for s in segments] == [s.model_dump(exclude={"type"}) for s in whole.segments]
    assert len({s.speaker for s in segments}) >= 2, segments
    done = events[-1]
    assert isinstance(done, TranscriptionTextDoneEvent) and done.text == whole.text
    assert "".join(e.delta for e in events[:deltas]) == done.text and wer([talk.reference], [done.text]) <= 0.15


SHARED_PASS = ("whisper.cpp/jfk.wav", "coqui-tts-ljspeech/LJ001-0001.wav", "lhotse/2412-153948-0000.flac",
               "mfa/61-70968-0000.flac")


def _nan_wav() -> bytes:
    """3 s of float samples that are all NaN: its header says 3 s, its decode fails."""
    out = io.BytesIO()
    sf.write(out, np.full(48000, np.nan, np.float32), 16000, format="WAV", subtype="FLOAT")
    return out.getvalue()


def _lying_adts(folder) -> bytes:
    """2 s of noise at 128 kb/s, then 40 s of silence at 8 kb/s: ffprobe reads 4.3 s from its first frames."""
    parts = []
    for name, source, seconds, rate in (("head", "anoisesrc=r=16000:a=0.5", 2, "128k"), ("tail", "anullsrc=r=16000:cl=mono", 40, "8k")):
        out = folder / f"{name}.aac"
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-f", "lavfi", "-i", source, "-t", str(seconds),
                        "-c:a", "aac", "-b:a", rate, "-f", "adts", str(out)], check=True)
        parts.append(out.read_bytes())
    return b"".join(parts)


def test_uploads_waiting_together_share_a_pass(server, client, eval_root, caplog, tmp_path):
    """Uploads with the same model and options that wait for the model together are transcribed in one pass,
    their chunks batched across files: each answer is the one it gets alone (tokens and times), a bad upload
    among them gets its own error, one holding far more audio than its container claims is transcribed alone
    after the pass (whole), one with other options gets a pass of its own, and a client that goes away during
    the pass does not stop the others'."""
    caplog.set_level(logging.INFO, logger="specwhisper.serving")
    liar = _lying_adts(tmp_path)
    items = [_item(eval_root, name) for name in SHARED_PASS]

    def create(c, name: str, audio: bytes, **fields):
        return c.audio.transcriptions.create(file=(name, audio), model="tiny.en", response_format="verbose_json",
                                             language="en", **fields)

    alone = [create(client, i.path.name, i.path.read_bytes()) for i in items]
    release, held = threading.Event(), threading.Event()
    server.worker.submit(lambda token: (held.set(), release.wait(60)))  # the model is busy while they arrive
    assert held.wait(30)

    async def together():
        c = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key=KEY, max_retries=0, timeout=300)
        tasks = [asyncio.ensure_future(create(c, items[0].path.name, items[0].path.read_bytes()))]
        while server.worker.waiting < 1:  # the first in line: the others join its pass
            await asyncio.sleep(0.05)
        tasks += [asyncio.ensure_future(create(c, i.path.name, i.path.read_bytes())) for i in items[1:]]
        tasks.append(asyncio.ensure_future(create(c, "nan.wav", _nan_wav())))
        tasks.append(asyncio.ensure_future(create(c, "liar.aac", liar)))
        tasks.append(asyncio.ensure_future(create(c, "jfk.wav", items[0].path.read_bytes(), prompt="President Kennedy.")))
        leaving = asyncio.ensure_future(create(c, "jfk.wav", items[0].path.read_bytes()))
        while server.worker.waiting < len(tasks) + 1:
            await asyncio.sleep(0.05)
        release.set()
        await asyncio.sleep(0.5)
        leaving.cancel()  # its client goes away while the pass runs
        return await asyncio.gather(*tasks, return_exceptions=True)

    answers = asyncio.run(together())
    passes = [r.getMessage() for r in caplog.records if "in one pass" in r.getMessage()]
    assert passes == ["7 uploads in one pass"], passes  # the four, the bad one, the liar, the one that left; not the prompted one
    assert ["file holds more audio than its container says: transcribed alone, after the others"] == [
        r.getMessage() for r in caplog.records if "container" in r.getMessage()]
    for item, one, shared in zip(items, alone, answers):
        assert isinstance(shared, TranscriptionVerbose), shared
        assert [(s.tokens, s.start, s.end) for s in shared.segments] == [(s.tokens, s.start, s.end) for s in one.segments]
        assert shared.text == one.text and wer([item.reference], [shared.text]) <= 0.1, (item.file, shared.text)
    bad, lying, prompted = answers[len(items):]
    assert isinstance(bad, openai.BadRequestError) and "file: the audio holds NaN" in bad.message, bad
    assert isinstance(lying, TranscriptionVerbose) and lying.duration == pytest.approx(42.2, abs=0.3), lying
    assert isinstance(prompted, TranscriptionVerbose) and wer([items[0].reference], [prompted.text]) <= MAX_WER


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client marks OpenAI's translations so
def test_translation_and_language_names(client, eval_root):
    item = _item(eval_root, "cuttledoc-fleurs/fleurs-fr-000.ogg")  # "l'accident a eu lieu en terrain montagneux..."
    audio = item.path.read_bytes()
    # a field sent empty is a field not sent (FastAPI's rule for HTML forms, so speaches'): the language is detected
    heard = client.audio.transcriptions.create(file=("fr.ogg", audio), model="whisper-1", response_format="verbose_json",
                                               language="", prompt="")
    assert heard.language == "french"
    assert wer([item.reference], [heard.text], language="fr") <= 0.35, heard.text
    raw = client.audio.translations.with_raw_response.create(file=("fr.ogg", audio), model="whisper-1",
                                                             response_format="verbose_json")
    body = raw.http_response.json()
    translated = TranslationVerbose.model_validate(body)
    assert body["task"] == "translate" and translated.language == "english"
    words = set(re.findall(r"[a-z]+", translated.text.lower()))
    assert {"the", "accident"} <= words and not words & {"le", "la", "montagneux", "incendie", "semblerait"}, translated.text
    text = client.audio.translations.create(file=("fr.ogg", audio), model="whisper-1", response_format="text")
    assert text.endswith("\n") and "accident" in text.lower() and "montagneux" not in text, text


def test_a_deployment_alias_names_an_offered_model(client, eval_root):
    """SPECWHISPER_MODEL_ALIASES: an app written for OpenAI's model names (here gpt-4o-mini-transcribe, set to
    tiny.en) gets that model's transcript (the meeting clip's "Claflin": tiny.en "Claphlin", base, the default,
    "Claferm"); a name neither offered nor aliased is still OpenAI's 404."""
    audio = _item(eval_root, "lhotse/ES2011a.Headset-0-40s-46s.wav").path.read_bytes()
    aliased, named, default = (client.audio.transcriptions.create(file=("clip.wav", audio), model=m, language="en")
                               for m in ("gpt-4o-mini-transcribe", "tiny.en", "whisper-1"))
    assert aliased.text == named.text != default.text, (aliased.text, default.text)
    _openai_error(_create(client, model="gpt-4o-transcribe"), 404, "offered: whisper-1, gpt-4o-mini-transcribe, base, tiny.en",
                  "model", "model_not_found")


def test_models(client):
    assert [m.id for m in client.models.list().data] == ["whisper-1", "gpt-4o-mini-transcribe", "base", "tiny.en"]
    model = client.models.retrieve("tiny.en")
    assert (model.id, model.object, model.owned_by) == ("tiny.en", "model", "specwhisper")
    with pytest.raises(openai.NotFoundError) as info:
        client.models.retrieve("gpt-4o-transcribe")
    _openai_error(info.value, 404, "does not exist here", param="model", code="model_not_found")


def test_models_in_memory_are_listed_loaded_and_unloaded(server, client, jfk):
    """speaches' /api/ps: the models in memory; POST loads an offered one (by its name or an alias), DELETE
    unloads it, and the next request loads it again; an unknown or unloaded model is a one-line 404."""
    auth = {"Authorization": f"Bearer {KEY}"}

    def ps(method: str, name: str = "") -> httpx.Response:
        return httpx.request(method, server.url + "/api/ps" + (f"/{name}" if name else ""), headers=auth, timeout=120)

    listing = ps("GET").json()
    assert "base" in listing["models"] and listing["ttl_s"] is None
    assert {"model": "base", "drafter": "auto"} in [{k: e[k] for k in ("model", "drafter")} for e in listing["loaded"]]
    if "tiny.en" in listing["models"]:
        assert ps("DELETE", "tiny.en").status_code == 200
    missing = ps("DELETE", "tiny.en")
    assert (missing.status_code, missing.json()) == (404, {"error": "the model 'tiny.en' is not loaded", "status": 404})
    loaded = ps("POST", "gpt-4o-mini-transcribe")  # the deployment's alias of tiny.en
    assert (loaded.status_code, loaded.json()) == (201, {"model": "tiny.en", "drafter": "auto", "loaded": True})
    assert ps("POST", "tiny.en").status_code == 200  # already loaded
    assert "tiny.en" in ps("GET").json()["models"]
    unloaded = ps("DELETE", "tiny.en")
    assert (unloaded.status_code, unloaded.json()) == (200, {"model": "tiny.en", "drafters": ["auto"], "loaded": False})
    assert "tiny.en" not in ps("GET").json()["models"]
    text = client.audio.transcriptions.create(file=("jfk.wav", jfk[0]), model="tiny.en").text  # loads it again
    assert wer([jfk[1]], [text]) <= MAX_WER, text
    unknown = ps("POST", "large-v9")
    assert unknown.status_code == 404 and unknown.json()["error"].startswith("no model 'large-v9' here (offered: whisper-1,")
    assert httpx.get(server.url + "/api/ps", timeout=30).status_code == 401  # the key guards these routes too


def _create(client, **overrides):
    args = {"file": ("jfk.wav", b"RIFF"), "model": "whisper-1", **overrides}
    with pytest.raises(openai.APIStatusError) as info:
        client.audio.transcriptions.create(**args)
    return info.value


@pytest.mark.parametrize("overrides, status, fragment, param, code", [
    ({"response_format": "xml"}, 400, "Invalid value: 'xml'", "response_format", "invalid_value"),
    ({"include": ["logprobs"], "response_format": "verbose_json"}, 400, "must be `json` if `include[]=logprobs`", "include[]",
     "invalid_value"),
    ({"include": ["tokens"]}, 400, "Invalid value: 'tokens'", "include[]", "invalid_value"),
    ({"response_format": "verbose_json", "timestamp_granularities": ["char"]}, 400, "Invalid value: 'char'",
     "timestamp_granularities[]", "invalid_value"),
    ({"timestamp_granularities": ["word"]}, 400, "must be `verbose_json`", "timestamp_granularities[]", "invalid_value"),
    ({"model": "gpt-4o-transcribe"}, 404, "The model 'gpt-4o-transcribe' does not exist here", "model", "model_not_found"),
    ({"language": "klingon"}, 400, "unknown language 'klingon'", "language", None),
    ({"temperature": 1.5}, 400, "temperature: must be between 0 and 1, got 1.5", "temperature", None),
    ({"prompt": "x" * 50_001}, 400, "prompt: must be at most 50000 characters, got 50001", "prompt", None),
    ({"extra_body": {"num_speakers": "two"}}, 400, "num_speakers: must be a whole number, got 'two'", "num_speakers", None),
    ({"extra_body": {"colour": "blue"}}, 400, "Unrecognized request argument supplied: colour", "colour", "unknown_parameter"),
    ({"extra_body": {"stream": "no"}}, 400, "stream: must be true or false, got 'no'", "stream", "invalid_value"),
    ({"extra_body": {"word_timestamps": True}}, 400, "send timestamp_granularities[]=word", "word_timestamps", "unknown_parameter"),
    ({"extra_body": {"task": "translate"}}, 400, "send the /v1/audio/translations route", "task", "unknown_parameter"),
    ({"stream": True, "extra_body": {"diarize": True}}, 400, "speakers come only in diarized_json's segment events",
     "stream", "unsupported_value"),
    ({"stream": True, "extra_body": {"diarize": True, "postedit": False}}, 400, "send response_format diarized_json, or stream=false",
     "stream", "unsupported_value"),
    ({"stream": True, "response_format": "diarized_json", "extra_body": {"postedit": True}}, 400,
     "the post-edit needs the whole file first", "stream", "unsupported_value"),
    ({"stream": True, "extra_body": {"align_text": "and so my fellow americans"}}, 400,
     "the text's times come once the whole file is heard", "stream", "unsupported_value"),
    ({"stream": True, "extra_body": {"align_text": "and so my fellow americans " * 8000}}, 400,  # a 216 KB script passes the form
     "the text's times come once the whole file is heard", "stream", "unsupported_value"),
    ({"chunking_strategy": "manual"}, 400, "Invalid value: 'manual'", "chunking_strategy", "invalid_value"),
    ({"chunking_strategy": {"type": "server_vad", "prefix_padding_ms": 20000}}, 400, "chunking_strategy[prefix_padding_ms]: must be",
     "chunking_strategy[prefix_padding_ms]", None),
    ({"chunking_strategy": {"type": "server_vad", "silence_duration_ms": 500}, "extra_body": {"vad_min_silence_ms": 500}}, 400,
     "given twice", "chunking_strategy[silence_duration_ms]", None),
    ({"chunking_strategy": {"type": "client_vad"}}, 400, "Invalid value: 'client_vad'", "chunking_strategy[type]",
     "invalid_value"),
    ({"chunking_strategy": {"type": "server_vad", "threshold": 1.5}}, 400, "chunking_strategy[threshold]: must be between 0 and 1",
     "chunking_strategy[threshold]", None),
    ({"chunking_strategy": {"type": "server_vad", "threshold": 0.6}, "extra_body": {"vad_threshold": 0.6}}, 400,
     "given twice", "chunking_strategy[threshold]", None),
    ({"chunking_strategy": '{"type": "server_vad", "threshold": 1.5}'}, 400,  # the object as a JSON string
     "chunking_strategy[threshold]: must be between 0 and 1", "chunking_strategy[threshold]", None),
    ({"chunking_strategy": '{"type": "server_vad", "speed": 2}'}, 400, "Unrecognized request argument supplied: "
     "chunking_strategy[speed]", "chunking_strategy[speed]", "unknown_parameter"),
    ({"chunking_strategy": '{"type": "client_vad"}'}, 400, "Invalid value: 'client_vad'", "chunking_strategy[type]", "invalid_value"),
    ({"chunking_strategy": '{"type": "server_vad", "threshold": 0.6}', "extra_body": {"vad_threshold": 0.6}}, 400,
     "given twice", "chunking_strategy[threshold]", None),
    ({"chunking_strategy": '{"type": "server_vad",'}, 400, "not 'auto' nor a JSON object", "chunking_strategy", "invalid_value"),
    ({"keywords": ["Americans"], "extra_body": {"hotwords": "Martians"}}, 400, "keywords[] and hotwords say different words",
     "keywords[]", "invalid_value"),
    ({"keywords": ["x" * 2001]}, 400, "keywords[]: must be at most 2000 characters", "keywords[]", None),
    ({"languages": ["en", "fr"]}, 400, "one language is taken here, got 2 (en, fr)", "languages[]", "unsupported_value"),
    ({"languages": ["fr"], "language": "en"}, 400, "languages[] and language say different languages", "languages[]",
     "invalid_value"),
    ({"languages": ["klingon"]}, 400, "unknown language 'klingon'", "languages[]", None),
    ({"response_format": "diarized_json", "extra_body": {"diarize": False}}, 400, "diarized_json needs diarization",
     "diarize", None),
    ({"known_speaker_names": ["ann"]}, 400, "must be as many (got 1 names and 0 references)",
     "known_speaker_references[]", "invalid_value"),
    ({"known_speaker_names": ["ann"], "known_speaker_references": ["/etc/passwd"]}, 400,
     "send the clip itself as a data URL", "known_speaker_references[]", None),
    ({"known_speaker_names": ["ann"], "known_speaker_references": ["data:audio/wav;base64,AAAA"],
      "file": ("jfk.wav", (EVAL_DIR / "whisper.cpp/jfk.wav").read_bytes())}, 400,
     "known speaker 'ann': not a readable audio file", "known_speaker_references[]", None),
    ({"known_speaker_names": list("abcde"), "known_speaker_references": ["data:audio/wav;base64,AAAA"] * 5}, 400,
     "at most 4 reference clips", "known_speaker_references[]", None),
    ({"extra_body": {"known_speakers": "ann=/etc/passwd"}}, 400, "send known_speaker_names[] and known_speaker_references[]",
     "known_speakers", "unknown_parameter"),
    ({"stream": True, "file": ("notes.txt", b"not audio")}, 400, "file: not a readable audio file", "file", None),  # JSON, not events
    ({"file": ("notes.txt", b"these are not the droids you are looking for")}, 400, "file: not a readable audio file", "file", None),
    ({"file": ("empty.wav", b"")}, 400, "file: the upload is empty", "file", None),
    ({"file": ("big.wav", os.urandom(MAX_UPLOAD + 1))}, 413, f"file: the upload is larger than {MAX_UPLOAD} bytes", "file", None),
    ({"file": ("huge.wav", os.urandom(MAX_UPLOAD + FORM_OVERHEAD + 1))}, 413, "the request body is larger than", None,
     None),  # refused unread
])
def test_bad_requests_get_openai_errors(client, overrides, status, fragment, param, code):
    _openai_error(_create(client, **overrides), status, fragment, param, code)


def test_bad_forms_get_openai_errors(server):
    url, auth = server.url + "/v1/audio/transcriptions", {"Authorization": f"Bearer {KEY}"}
    missing = httpx.post(url, files={"model": (None, "whisper-1")}, headers=auth, timeout=30)  # multipart, no file
    not_a_form = httpx.post(url, json={"model": "whisper-1", "file": "jfk.wav"}, headers=auth, timeout=30)
    twice = httpx.post(url, files=[("file", ("a.wav", b"RIFF")), ("file", ("b.wav", b"RIFF"))], headers=auth, timeout=30)
    for resp, status, fragment, param, code in [
        (missing, 400, "Missing required parameter: 'file'", "file", "missing_required_parameter"),
        (not_a_form, 400, "the body must be multipart/form-data", None, None),
        (twice, 400, "'file' is given twice", "file", None),
    ]:
        _openai_error(openai.APIStatusError("", response=resp, body=None), status, fragment, param, code)
    wrong_method = httpx.get(url, headers=auth, timeout=30)
    _openai_error(openai.APIStatusError("", response=wrong_method, body=None), 405, "GET is not allowed")
    assert wrong_method.headers["allow"] == "POST"  # RFC 9110 15.5.6
    jobs = httpx.put(server.url + "/v1/jobs", headers=auth, timeout=30)  # two routes on the path: both methods
    assert (jobs.status_code, jobs.headers["allow"]) == (405, "GET, POST"), jobs.headers


def test_api_key_on_every_route(server, client, jfk, server_log):  # noqa: F811
    wrong = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError) as info:
        wrong.audio.transcriptions.create(file=("jfk.wav", jfk[0]), model="whisper-1")
    _openai_error(info.value, 401, "incorrect API key", code="invalid_api_key")
    with pytest.raises(openai.AuthenticationError) as info:
        wrong.models.list()
    assert info.value.response.headers["www-authenticate"] == "Bearer"
    for path in ("/v1/audio/translations", "/v1/models"):
        resp = httpx.request("POST" if "audio" in path else "GET", server.url + path, timeout=30)  # no key at all
        _openai_error(openai.APIStatusError("", response=resp, body=None), 401, "no API key given")
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}, {"Authorization": f"Basic {KEY}"}):
        resp = httpx.post(server.url + "/", content=jfk[0], headers={"Content-Type": "audio/wav", **headers}, timeout=30)
        assert resp.status_code == 401 and set(resp.json()) == {"error", "status"} and "API key" in resp.json()["error"]
    resp = httpx.post(server.url + "/", content=b"", headers={"Content-Type": "audio/wav", "Authorization": f"Bearer {KEY}"})
    assert resp.status_code == 400 and "empty" in resp.json()["error"]  # through the guard, to the route
    assert httpx.get(server.url + "/health", timeout=30).json() == {"status": "ok"}  # open: a health check needs no key
    assert [m.id for m in client.models.list().data][0] == "whisper-1"

    async def live(headers: dict) -> list[str]:
        async with connect(server.url.replace("http://", "ws://") + "/v1/live", additional_headers=headers) as ws:
            await ws.send(json.dumps({"type": "end"}))
            return [json.loads(m)["type"] async for m in ws]

    with pytest.raises(InvalidStatus) as refused:
        asyncio.run(live({}))
    assert refused.value.response.status_code == 401 and b"no API key given" in refused.value.response.body
    with pytest.raises(InvalidStatus):
        asyncio.run(live({"Authorization": "Bearer sk-wrong"}))
    assert asyncio.run(live({"Authorization": f"Bearer {KEY}"}))[-1] == "final"
    realtime = openai.OpenAI(base_url=server.url + "/v1", api_key=KEY).realtime  # the Realtime API's handshake too
    with realtime.connect(extra_query={"intent": "transcription"}) as connection:
        assert connection.recv().type == "session.created"
    with pytest.raises(InvalidStatus) as refused:
        with openai.OpenAI(base_url=server.url + "/v1", api_key="sk-wrong").realtime.connect(extra_query={"intent": "transcription"}):
            pass
    assert refused.value.response.status_code == 401
    assert not [line for line in server_log.lines if "handshake" in line], server_log.lines  # a refusal is no server error


def test_serve_takes_the_key_from_the_flag_or_the_environment(capsys):
    parse = serve.build_parser().parse_args
    assert serve.api_key_from(parse([]), {}) is None
    assert serve.api_key_from(parse([]), {"SPECWHISPER_API_KEY": "from-env"}) == "from-env"
    assert serve.api_key_from(parse(["--api-key", "from-flag"]), {"SPECWHISPER_API_KEY": "from-env"}) == "from-flag"
    assert "from-flag" not in repr(serve.config_from_args(parse(["--api-key", "from-flag"]), MAX_UPLOAD, "from-flag"))
    assert serve.main(["--api-key", "two words"]) == 2
    err = capsys.readouterr().err
    assert err == "serve: error: --api-key: the API key must be non-empty printable ASCII without spaces\n"
    assert serve.main(["--api-key", ""]) == 2  # "$KEY" with KEY unset: refused, not an open server
    assert capsys.readouterr().err == "serve: error: --api-key: the API key must be non-empty printable ASCII without spaces\n"
    with pytest.raises(ValueError, match="SPECWHISPER_API_KEY: the API key must be non-empty"):
        serve.api_key_from(parse([]), {"SPECWHISPER_API_KEY": ""})


@pytest.mark.filterwarnings("ignore:deprecated:DeprecationWarning")  # the client marks OpenAI's translations so
def test_stream_is_ignored_where_openai_ignores_it(client, jfk):
    """stream=true where there are no events (verbose_json, srt, vtt, translations) is ignored, as OpenAI
    ignores it for whisper-1: the format's one answer."""
    audio, reference = jfk
    verbose, srt, vtt = (client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format=fmt,
                                                            extra_body={"stream": True}) for fmt in ("verbose_json", "srt", "vtt"))
    assert isinstance(verbose, TranscriptionVerbose) and verbose.segments and wer([reference], [verbose.text]) <= MAX_WER
    assert srt.startswith("1\n00:00:00,") and vtt.startswith("WEBVTT\n") and _cue_text(srt) == _cue_text(vtt) == verbose.text
    translated = client.audio.translations.create(file=("jfk.wav", audio), model="base", response_format="text",
                                                  extra_body={"stream": True})
    assert wer([reference], [translated]) <= MAX_WER, translated


def test_fields_other_clients_send(client, jfk):
    """chunking_strategy's object as a JSON string (as some clients send it), and the client's keywords[] (our
    hotwords) and languages[] (one: our language); their bad values are the bracket form's and our fields' 400s
    (test_bad_requests_get_openai_errors)."""
    audio, reference = jfk
    vad = json.dumps({"type": "server_vad", "threshold": 0.6, "silence_duration_ms": 500, "prefix_padding_ms": 300})
    answer = client.audio.transcriptions.create(file=("jfk.wav", audio), model="tiny.en", response_format="verbose_json",
                                                chunking_strategy=vad, keywords=["Americans", "country"], languages=["english"], language="en")  # one language, two spellings
    assert answer.language == "english" and wer([reference], [answer.text]) <= MAX_WER, answer.text


def test_what_the_model_refuses_names_its_parameter(client, jfk):
    """A language the model has no token for, a language an English-only model cannot write, a translation by an
    English-only model: refused once the model is read, the error's ``param`` the field at fault."""
    audio, _ = jfk
    for make, args, fragment, param in [
        (client.audio.transcriptions.create, {"language": "xx"}, "unknown language code 'xx'", "language"),
        (client.audio.transcriptions.create, {"language": "de", "model": "tiny.en"}, "cannot use language 'de'", "language"),
        (client.audio.translations.create, {"model": "tiny.en"}, "English-only and cannot translate", "model"),
    ]:
        with pytest.raises(openai.APIStatusError) as info:
            make(**{"file": ("jfk.wav", audio), "model": "whisper-1", **args})
        _openai_error(info.value, 400, fragment, param)
