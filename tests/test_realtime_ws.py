"""OpenAI's Realtime API's transcription sessions (/v1/realtime) over loopback, with a real uvicorn
server and the official ``openai`` client (its typed events parse every event we send): real speech at
24 kHz comes back as turns (server VAD) or committed items with their transcripts; every bad client
event gets OpenAI's error event and the session goes on; what ends a session ends it with one error
event and the close code, and the server goes on serving without a traceback in its log."""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
import threading
import time

import numpy as np
import pytest
import soxr
from openai import OpenAI
from openai.types.realtime import SessionUpdatedEvent
from openai.types.realtime import (ConversationItemAdded, ConversationItemDone,
                                   ConversationItemInputAudioTranscriptionCompletedEvent,
                                   InputAudioBufferCommittedEvent, InputAudioBufferSpeechStartedEvent,
                                   InputAudioBufferSpeechStoppedEvent, RealtimeErrorEvent, SessionCreatedEvent)
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import english_set, wer
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.params import Choices
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.service import LiveLimits, ServiceSettings
from tests.test_abuse import _request, server_log  # noqa: F401 - server_log is a fixture: no traceback in the log

RATE, INPUT_RATE = 16000, 24000
# no pacing: the clips go in at once; a session between turns is closed as idle as soon as one in a turn
LIMITS = LiveLimits(max_streams=2, idle_timeout_s=2.0, session_idle_s=2.0, max_ahead_s=120.0)
MAX_AUDIO_S = 40.0  # a session's audio: past a window, short of two
DELTA = "conversation.item.input_audio_transcription.delta"
COMPLETED = "conversation.item.input_audio_transcription.completed"


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",), aliases=(("gpt-4o-mini-transcribe", "tiny.en"),)),
                               max_audio_s=MAX_AUDIO_S, live=LIMITS)
    config = ServerConfig(port=0, access_log=False, spool_dir=tmp_path_factory.mktemp("spool"))
    with serving(Endpoint(settings), config) as srv:
        yield srv


@pytest.fixture(scope="module")
def clips(eval_root):
    """Two public single-speaker clips of 4-12 s with their references (LibriSpeech, LJSpeech)."""
    items = [i for i in english_set(eval_root) if i.category == "single" and 4 <= i.duration <= 12 and "jfk" not in i.file]
    return [(load_audio(i.path), i.reference) for i in items[:2]]


@pytest.fixture(autouse=True)
def still_serving(request):
    yield
    if "server" in request.fixturenames:
        assert _request(request.getfixturevalue("server"), "GET", "/health")[:2] == (200, {"status": "ok"})


def _pcm24(audio: np.ndarray) -> bytes:
    return (np.clip(soxr.resample(audio, RATE, INPUT_RATE, quality="HQ"), -1, 1) * 32767).astype("<i2").tobytes()


def _appends(pcm: bytes, piece_s: float = 0.2) -> list[str]:
    step = int(piece_s * INPUT_RATE) * 2
    return [base64.b64encode(pcm[i : i + step]).decode() for i in range(0, len(pcm), step)]


def _paced(connection, pieces: list[str], speed: float, piece_s: float = 0.2) -> None:
    """Append ``pieces`` at ``speed`` times real time, then commit (from a thread beside the reader)."""
    for piece in pieces:
        connection.input_audio_buffer.append(audio=piece)
        time.sleep(piece_s / speed)
    connection.input_audio_buffer.commit()


def _collect(connection, until: int) -> list:
    """The typed events until ``until`` items are done (their last event)."""
    events = []
    for event in connection:
        events.append(event)
        if sum(e.type == "conversation.item.done" for e in events) == until:
            return events
    raise AssertionError(f"the session ended first: {[e.type for e in events]}")


def _check_items(events: list, references: list[str]) -> list:
    """Each completed item: its deltas join to its transcript, the transcript is the speech, the
    items chain in order; returns the committed events."""
    committed = [e for e in events if isinstance(e, InputAudioBufferCommittedEvent)]
    completed = [e for e in events if isinstance(e, ConversationItemInputAudioTranscriptionCompletedEvent)]
    added = [e for e in events if isinstance(e, ConversationItemAdded)]
    done = [e for e in events if isinstance(e, ConversationItemDone)]
    assert [c.item_id for c in committed] == [c.item_id for c in completed] == [e.item.id for e in added] == [e.item.id for e in done]
    assert [e.item.content[0].transcript for e in done] == [c.transcript for c in completed]
    assert all(e.item.role == "user" and e.item.content[0].type == "input_audio" for e in added + done)
    assert [c.previous_item_id for c in committed] == [None] + [c.item_id for c in committed[:-1]]
    for item, reference in zip(completed, references):
        deltas = [e.delta for e in events if e.type == DELTA and e.item_id == item.item_id]
        assert "".join(deltas) == item.transcript and item.transcript == item.transcript.strip()
        assert wer([reference], [item.transcript]) <= 0.25, (reference, item.transcript)
        assert item.usage.type == "duration" and item.usage.seconds > 1
    return committed


def test_server_vad_turns(server, clips):
    """Two clips with 2 s of silence between, the default session but for a longer pause ending a turn
    (a clip's own pauses stay inside it): two turns, each started, stopped, committed and transcribed."""
    (a, ref_a), (b, ref_b) = clips
    gap = np.zeros(2 * RATE, np.float32)
    audio = np.concatenate([gap[: RATE // 2], a, gap, b, gap])
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        created = connection.recv()
        assert isinstance(created, SessionCreatedEvent) and created.session.type == "transcription"
        assert created.session.audio.input.turn_detection.type == "server_vad"
        connection.session.update(session={"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": 1200}}}})
        for piece in _appends(_pcm24(audio)):
            connection.input_audio_buffer.append(audio=piece)
        events = _collect(connection, 2)
    updated = next(e for e in events if e.type == "session.updated")
    assert updated.session.audio.input.turn_detection.silence_duration_ms == 1200
    committed = _check_items(events, [ref_a, ref_b])
    started = [e for e in events if isinstance(e, InputAudioBufferSpeechStartedEvent)]
    stopped = [e for e in events if isinstance(e, InputAudioBufferSpeechStoppedEvent)]
    assert [e.item_id for e in started] == [e.item_id for e in stopped] == [c.item_id for c in committed]
    a_end_ms, b_start_ms = 500 + len(a) / RATE * 1000, 500 + (len(a) + len(gap)) / RATE * 1000
    assert 0 <= started[0].audio_start_ms <= 900  # the speech at 0.5 s, less the prefix padding
    assert a_end_ms - 1000 <= stopped[0].audio_end_ms <= a_end_ms + 1200 + 300
    assert stopped[0].audio_end_ms < started[1].audio_start_ms <= b_start_ms + 500


def test_commits_and_bad_events(server, clips):
    """Without turn detection the client commits: bad events in between get error events and the
    session goes on; the words come as deltas while the audio still arrives (at twice real time)."""
    (a, ref_a), _ = clips
    pieces = _appends(_pcm24(a))
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        connection.recv()  # session.created
        connection.session.update(session={"type": "transcription", "audio": {"input": {"turn_detection": None}}})
        assert connection.recv().session.audio.input.turn_detection is None
        bad = [({"type": "input_audio_buffer.commit", "event_id": "c0"}, "input_audio_buffer_commit_empty", None),
               ({"type": "response.create", "event_id": "r1"}, "invalid_event", "type"),
               ({"type": "input_audio_buffer.append", "audio": "%%%", "event_id": "a2"}, "invalid_value", "audio"),
               ({"type": "input_audio_buffer.append", "audio": "AAAA", "event_id": "a3"}, "invalid_value", "audio"),
               ({"type": "session.update", "event_id": "s4", "session": {"type": "transcription", "audio": {"input": {
                   "format": {"type": "audio/pcm", "rate": 16000}}}}}, "invalid_value", "session.audio.input.format"),
               ({"type": "session.update", "event_id": "s5", "session": {"type": "transcription", "audio": {"input": {
                   "transcription": {"model": "gpt-4o-transcribe"}}}}}, "invalid_value", "session.audio.input.transcription.model"),
               ({"type": "session.update", "event_id": "s6", "session": {"type": "transcription", "audio": {"input": {
                   "transcription": {"model": "whisper-1", "language": "de"}}}}}, "invalid_value",
                "session.audio.input.transcription.language"),
               ({"type": "session.update", "event_id": "s7", "session": {"type": "transcription", "audio": {"input": {
                   "turn_detection": {"type": "semantic_vad", "eagerness": "eager"}}}}}, "invalid_value",
                "session.audio.input.turn_detection.eagerness"),
               # values of the wrong kind, which ended the session with a 500 and a traceback in the log
               ({"type": "session.update", "event_id": "s8", "session": {"type": "transcription", "audio": {"input": {
                   "turn_detection": {"type": "server_vad", "silence_duration_ms": float("inf")}}}}}, "invalid_value",
                "session.audio.input.turn_detection"),
               ({"type": "session.update", "event_id": "s9", "session": {"type": "transcription", "audio": {"input": {
                   "transcription": {"model": ["whisper-1"]}}}}}, "invalid_value", "session.audio.input.transcription.model"),
               ({"type": "session.update", "event_id": "s10", "session": {"type": "transcription", "audio": {"input": {
                   "turn_detection": {"type": "semantic_vad", "eagerness": ["low"]}}}}}, "invalid_value",
                "session.audio.input.turn_detection.eagerness"),
               ({"type": "session.update", "event_id": "s11", "session": {"type": "transcription", "audio": {"input": {
                   "format": {"type": ["audio/pcm"]}}}}}, "invalid_value", "session.audio.input.format"),
               ({"type": "transcription_session.update", "event_id": "s12", "session": {"input_audio_format": {"pcm16": 1}}},
                "invalid_value", "session.audio.input.format")]
        for event, _, _ in bad:
            connection.send(event)
        for (event, code, param) in bad:
            error = connection.recv()
            assert isinstance(error, RealtimeErrorEvent), error
            assert (error.error.code, error.error.param, error.error.event_id) == (code, param, event["event_id"]), error
            assert error.error.type == "invalid_request_error" and "\n" not in error.error.message
        sender = threading.Thread(target=_paced, args=(connection, pieces, 2.0))
        sender.start()
        events = _collect(connection, 1)
        sender.join()
    first_delta = next(i for i, e in enumerate(events) if e.type == DELTA)
    assert first_delta < next(i for i, e in enumerate(events) if e.type == "input_audio_buffer.committed")
    _check_items(events, [ref_a])


def test_clear_drops_the_turn(server, clips):
    (a, ref_a), (b, ref_b) = clips
    client = OpenAI(base_url=server.url + "/v1", api_key="unused")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        connection.recv()
        connection.session.update(session={"type": "transcription", "audio": {"input": {"turn_detection": None}}})
        for piece in _appends(_pcm24(a)):
            connection.input_audio_buffer.append(audio=piece)
        connection.input_audio_buffer.clear()
        for piece in _appends(_pcm24(b)):
            connection.input_audio_buffer.append(audio=piece)
        connection.input_audio_buffer.commit()
        events = _collect(connection, 1)
    assert any(e.type == "input_audio_buffer.cleared" for e in events)
    _check_items(events, [ref_b])


def _raw(server, query: str, messages: list[str], until: str | None = None) -> tuple[list[dict], int | None]:
    """The events the server sends until it ends the session, or, with ``until``, until the first event of that
    type (then the client closes: no wait for the idle limit)."""
    async def session():
        url = server.url.replace("http://", "ws://") + "/v1/realtime" + query
        async with connect(url, open_timeout=60, close_timeout=10) as ws:
            for message in messages:
                await ws.send(message)
            received = []
            try:
                async for raw in ws:
                    received.append(json.loads(raw))
                    if received[-1]["type"] == until:
                        break
            except ConnectionClosed:
                pass
            return received, ws.close_code

    return asyncio.run(session())


def _fatal(received: list[dict], code: int | None, close: int, fragment: str) -> None:
    error = received[-1]
    assert error["type"] == "error" and fragment in error["error"]["message"], received
    assert "\n" not in error["error"]["message"] and code == close, (code, received)
    RealtimeErrorEvent.model_validate(error)  # the schema's own check: a server event has its event_id


@pytest.mark.parametrize("query, fragment", [("?intent=conversation", "transcription sessions only"),
                                             ("?intent=transcription&model=gpt-realtime", "model")])
def test_refused_sessions(server, query, fragment):
    received, code = _raw(server, query, [])
    _fatal(received, code, 1008, fragment)


def test_idle_session_is_closed_and_a_binary_frame_is_refused(server):
    received, code = _raw(server, "?intent=transcription", [b"\x00\x01"])
    assert received[0]["type"] == "session.created"
    assert received[1]["type"] == "error" and received[1]["error"]["code"] == "invalid_event"
    _fatal(received, code, 1008, "no event for 2 s")


def test_sessions_share_the_live_streams_limit(server):
    """/v1/live and /v1/realtime sockets count together (2 here): a third is refused with 503."""
    opened = threading.Event()
    release = threading.Event()

    async def hold():
        async with connect(server.url.replace("http://", "ws://") + "/v1/live"):
            async with connect(server.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription") as ws:
                await ws.recv()  # session.created
                opened.set()
                while not release.is_set():
                    await asyncio.sleep(0.05)

    holder = threading.Thread(target=asyncio.run, args=(hold(),))
    holder.start()
    try:
        assert opened.wait(60)
        received, code = _raw(server, "?intent=transcription", [])
        _fatal(received, code, 1013, "too many live streams")
    finally:
        release.set()
        holder.join(30)


def test_past_the_audio_limit_the_open_turn_is_transcribed_then_the_session_ends(server, eval_root):
    """Distinct clips back to back past the limit, sent at once: the turn up to the limit is transcribed,
    then the session ends with 413's error event."""
    items = [i for i in english_set(eval_root) if i.category == "single" and 4 <= i.duration <= 15 and "jfk" not in i.file]
    clips, references, seconds = [], [], 0.0
    for item in items:
        if seconds > MAX_AUDIO_S:
            break
        clips.append(load_audio(item.path))
        if seconds + item.duration <= MAX_AUDIO_S:
            references.append(item.reference)
        seconds += len(clips[-1]) / RATE
    events = [json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})]
    events += [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(np.concatenate(clips)), piece_s=2.0)]
    received, code = _raw(server, "?intent=transcription", events)
    completed = [e for e in received if e["type"] == COMPLETED]
    assert len(completed) == 1 and abs(completed[0]["usage"]["seconds"] - MAX_AUDIO_S) < 0.5, [e["type"] for e in received]
    assert wer([" ".join(references)], [completed[0]["transcript"]]) <= 0.35, completed[0]["transcript"]
    _fatal(received, code, 1009, f"limit of {MAX_AUDIO_S:g} s")


def test_a_talk_in_turns_with_base(eval_root, tmp_path):
    """The session as the model worker runs it (``Turns``), base without a language, the talk of
    bench/realtime.py (48 s of public clips, one at -67 dB after a loud one) at OpenAI's server_vad
    defaults: the language heard once on the first turn (English; each turn's own first update heard
    Chinese and Korean: WER 0.431), the quiet clip its own turn (the stream restarts after a turn)."""
    from specwhisper.evaluation.transcripts import build_long_file
    from specwhisper.serving.http.realtime_config import PCM, SessionConfig, checked
    from specwhisper.serving.http.realtime_ws import Turns
    from specwhisper.serving.service import PipelinePool

    long = build_long_file("dense", tmp_path, min_seconds=40)
    audio = soxr.resample(load_audio(long.path), RATE, INPUT_RATE, quality="HQ").astype(np.float32)
    pool = PipelinePool(ServiceSettings(choices=Choices(models=("base",), drafters=("none",))))
    turns = Turns(pool, checked(SessionConfig(), pool.settings.choices))
    events, step = [], INPUT_RATE // 10
    for i in range(0, 3 * INPUT_RATE, step):  # the first 3 s a tenth of a second at a time, each handle an update
        events += turns.handle([("audio", audio[i : i + step], PCM)])
    events += turns.handle([("audio", audio[3 * INPUT_RATE :], PCM), ("end",)])
    texts = [e["transcript"] for e in events if e["type"] == COMPLETED]
    assert turns.detected == "en" and len(texts) >= 6
    assert any("feathers" in t for t in texts), texts  # the quiet clip (33-37 s)
    assert wer([long.reference], [" ".join(texts)]) <= 0.15, texts  # measured 0.086 (offline: 0.069)


def test_the_beta_form_of_the_session_update(server, clips):
    """Apps written for the API's beta send ``transcription_session.update`` (``input_audio_format``,
    ``input_audio_transcription``, ``turn_detection`` at the session's top) and read its answer in that form."""
    (a, ref_a), _ = clips
    update = {"type": "transcription_session.update", "event_id": "u1", "session": {
        "input_audio_format": "pcm16", "input_audio_transcription": {"model": "whisper-1", "language": "en", "prompt": ""},
        "turn_detection": None}}
    bad = {"type": "transcription_session.update", "event_id": "u2", "session": {"input_audio_format": "opus"}}
    events = [json.dumps(update), json.dumps(bad)]
    events += [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(a))]
    events += [json.dumps({"type": "input_audio_buffer.commit"})]
    received, _ = _raw(server, "?intent=transcription", events, until=COMPLETED)
    answer = next(e for e in received if e["type"] == "transcription_session.updated")
    assert answer["session"]["input_audio_format"] == "pcm16" and answer["session"]["turn_detection"] is None
    assert answer["session"]["input_audio_transcription"] == {"model": "whisper-1", "language": "en", "prompt": ""}
    error = next(e for e in received if e["type"] == "error")
    assert error["error"]["event_id"] == "u2" and "audio/pcm, audio/pcmu, audio/pcma" in error["error"]["message"]
    completed = next(e for e in received if e["type"] == COMPLETED)
    assert wer([ref_a], [completed["transcript"]]) <= 0.25


def test_a_short_turn_sent_at_once_is_transcribed(server, eval_root):
    """A 1.5 s turn, sent at once and committed: its one decode sees the whole window as offline (the
    buffer's frames alone made tiny.en loop on "In 18 13." and the turn came back empty)."""
    item = next(i for i in english_set(eval_root) if i.file.endswith("LJ002-0020.wav"))
    events = [json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})]
    events += [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(load_audio(item.path)))]
    events += [json.dumps({"type": "input_audio_buffer.commit"})]
    heard = _live_audio_s(server)
    received, _ = _raw(server, "?intent=transcription", events, until=COMPLETED)
    completed = next(e for e in received if e["type"] == COMPLETED)
    assert wer([item.reference], [completed["transcript"]]) == 0, completed  # "IN EIGHTEEN THIRTEEN": "In 1813."
    assert _live_audio_s(server) - heard == pytest.approx(item.duration, abs=0.01)  # /metrics counts it


def _live_audio_s(server) -> float:
    """``specwhisper_live_audio_seconds_total`` on the server's /metrics, as Prometheus's parser reads it."""
    import httpx

    from tests.test_metrics import _samples

    return _samples(httpx.get(server.url + "/metrics", timeout=60).text)[("specwhisper_live_audio_seconds_total", ())]


def test_a_file_in_one_append(server, eval_root):
    """An app may send a recording in one append (OpenAI takes up to 15 MiB): 25 s of clips, 1.6 MB of
    base64 in one event, is taken and transcribed (a 1 MiB frame limit closed the socket with 1009)."""
    items = [i for i in english_set(eval_root) if i.category == "single" and 4 <= i.duration <= 15 and "jfk" not in i.file][:3]
    audio = np.concatenate([load_audio(i.path) for i in items])
    update = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}}
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(_pcm24(audio)).decode()}
    assert len(append["audio"]) > 2**20
    received, _ = _raw(server, "?intent=transcription", [json.dumps(update), json.dumps(append),
                                                          json.dumps({"type": "input_audio_buffer.commit"})], until=COMPLETED)
    completed = next(e for e in received if e["type"] == COMPLETED)
    assert wer([" ".join(i.reference for i in items)], [completed["transcript"]]) <= 0.3, completed


def _g711(audio: np.ndarray, codec: str) -> bytes:
    """``audio`` (16 kHz) as telephony sends it: 8 kHz G.711 (``codec``: "mulaw" or "alaw"), ffmpeg's encoder."""
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    return subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-f", "s16le", "-ar", str(RATE), "-ac", "1", "-i", "pipe:",
                           "-ar", "8000", "-f", codec, "pipe:"], input=pcm, capture_output=True, check=True).stdout


def _appends_of(raw: bytes, piece: int) -> list[str]:
    return [json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(raw[i : i + piece]).decode()})
            for i in range(0, len(raw), piece)]


@pytest.mark.parametrize("update, codec", [
    ({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
        "format": {"type": "audio/pcmu"}, "turn_detection": None}}}}, "mulaw"),
    ({"type": "transcription_session.update", "session": {"input_audio_format": "g711_alaw", "turn_detection": None}}, "alaw")])
def test_g711_input_as_telephony_sends_it(server, clips, update, codec):
    """A phone bridge (Twilio's media streams, SIP gateways) sends 8 kHz G.711: mu-law as ``audio/pcmu``
    (the beta's ``g711_ulaw``), A-law as ``audio/pcma`` (``g711_alaw``); ffmpeg's encoding of a clip, in
    20 ms pieces as they come on a call, is transcribed as its reference."""
    (a, ref_a), _ = clips
    events = [json.dumps(update), *_appends_of(_g711(a, codec), 160), json.dumps({"type": "input_audio_buffer.commit"})]
    received, _ = _raw(server, "?intent=transcription", events)
    answer = next(e for e in received if e["type"].endswith("session.updated"))
    if update["type"] == "session.update":
        assert SessionUpdatedEvent.model_validate(answer).session.audio.input.format.type == "audio/pcmu"
    else:
        assert answer["session"]["input_audio_format"] == "g711_alaw"
    assert [e["error"]["code"] for e in received if e["type"] == "error"] == ["408"], received  # the idle end alone
    completed = next(e for e in received if e["type"] == COMPLETED)
    assert wer([ref_a], [completed["transcript"]]) <= 0.25, completed
    assert abs(completed["usage"]["seconds"] - len(a) / RATE) < 0.05, (completed["usage"], len(a) / RATE)


def test_the_format_changes_between_appends(server, clips):
    """A session.update naming another format applies to the appends after it: a clip's first half as
    24 kHz PCM, its second as mu-law, in one turn, is one transcript of the whole clip."""
    (a, ref_a), _ = clips
    half = len(a) // 2
    to_ulaw = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}}}}}
    events = [json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}})]
    events += [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(a[:half]))]
    events += [json.dumps(to_ulaw), *_appends_of(_g711(a[half:], "mulaw"), 1600), json.dumps({"type": "input_audio_buffer.commit"})]
    received, _ = _raw(server, "?intent=transcription", events)
    assert [e["error"]["code"] for e in received if e["type"] == "error"] == ["408"], received  # the idle end alone
    completed = next(e for e in received if e["type"] == COMPLETED)
    assert wer([ref_a], [completed["transcript"]]) <= 0.25, completed
    assert abs(completed["usage"]["seconds"] - len(a) / RATE) < 0.05, (completed["usage"], len(a) / RATE)


def test_semantic_vad_waits_for_an_unfinished_sentence(eval_root):
    """OpenAI's semantic_vad ends a turn at a pause once its text ends a sentence, and waits out a pause
    in the middle of one: JFK's "And so my fellow Americans ... ask not ..." at server_vad's 500 ms is four
    turns, its first cut before "ask not"; with semantic_vad the first turn is the whole first sentence.
    An unfinished last sentence ends the turn after the eagerness's wait: 2 s high; 8 s low (still open
    after 5 s of silence)."""
    from dataclasses import replace

    from specwhisper.live.turns import TurnSettings
    from specwhisper.serving.http.realtime_config import PCM, SessionConfig, checked
    from specwhisper.serving.http.realtime_ws import Turns
    from specwhisper.serving.service import PipelinePool

    jfk = next(i for i in english_set(eval_root) if i.file.endswith("jfk.wav"))
    audio = np.concatenate([np.zeros(RATE // 2, np.float32), load_audio(jfk.path), np.zeros(5 * RATE, np.float32)])
    audio = soxr.resample(audio, RATE, INPUT_RATE, quality="HQ").astype(np.float32)
    pool = PipelinePool(ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",))))
    texts = {}
    for eagerness in (None, "high", "low"):
        turns = Turns(pool, checked(replace(SessionConfig(), turns=TurnSettings(eagerness=eagerness)), pool.settings.choices))
        events, step = [], INPUT_RATE // 10
        for i in range(0, len(audio), step):
            events += turns.handle([("audio", audio[i : i + step], PCM)])
        texts[eagerness] = [e["transcript"] for e in events if e["type"] == COMPLETED]
        echo = SessionConfig(turns=TurnSettings(eagerness=eagerness)).to_json()["audio"]["input"]["turn_detection"]
        assert echo["type"] == ("server_vad" if eagerness is None else "semantic_vad")
    plain, high, low = texts[None], texts["high"], texts["low"]
    assert len(plain) >= 3 and "not" not in plain[0].lower(), plain
    assert "americans" in high[0].lower() and "not" in high[0].lower() and "for your country" not in high[0].lower(), high
    assert len(high) == 2 and wer([jfk.reference], [" ".join(high)]) <= 0.1, high
    assert low == high[:1], low


def test_logprobs_when_included(server, clips):
    """``include: ["item.input_audio_transcription.logprobs"]``: the deltas and the transcript carry the words'
    log-probabilities, read by the client's own types; the entries' tokens joined are the transcript, and
    the deltas' entries joined are the transcript's."""
    from openai.types.realtime import ConversationItemInputAudioTranscriptionDeltaEvent as Delta

    (a, ref_a), _ = clips
    update = {"type": "session.update", "session": {"type": "transcription", "include": ["item.input_audio_transcription.logprobs"],
                                                    "audio": {"input": {"turn_detection": None}}}}
    bad = {"type": "session.update", "event_id": "i1", "session": {"type": "transcription", "include": ["item.input_audio"]}}
    events = [json.dumps(update), json.dumps(bad)]
    events += [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(a))]
    received, _ = _raw(server, "?intent=transcription", [*events, json.dumps({"type": "input_audio_buffer.commit"})], until=COMPLETED)
    answer = SessionUpdatedEvent.model_validate(next(e for e in received if e["type"] == "session.updated"))
    assert answer.session.include == ["item.input_audio_transcription.logprobs"]
    error = next(e for e in received if e["type"] == "error")
    assert error["error"]["event_id"] == "i1" and error["error"]["param"] == "session.include"
    completed = ConversationItemInputAudioTranscriptionCompletedEvent.model_validate(next(e for e in received if e["type"] == COMPLETED))
    deltas = [Delta.model_validate(e) for e in received if e["type"] == DELTA]
    assert wer([ref_a], [completed.transcript]) <= 0.25 and len(completed.logprobs) >= 10
    assert "".join(e.token for e in completed.logprobs) == completed.transcript
    assert [e.token for d in deltas for e in d.logprobs] == [e.token for e in completed.logprobs]
    assert all(bytes(e.bytes).decode() == e.token and e.logprob <= 0 for e in completed.logprobs)


def test_a_prompt_spells_the_names(server, eval_root):
    """``transcription.prompt`` (OpenAI's: names, a glossary) is each turn's initial prompt, echoed in the
    session: the meeting's "Abigail Claflin", which tiny.en hears as "Abigail Classroom"; one over 50 000
    characters gets its error event."""
    item = next(i for i in english_set(eval_root) if i.file.endswith("ES2011a.Headset-0-40s-46s.wav"))
    appends = [json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(load_audio(item.path)))]
    texts = {}
    long = "the minutes of the last meeting, read aloud. " * 200 + "Claflin"  # 9007 characters: its end is kept
    for prompt in ("", "Claflin", long, "x" * 50_001):
        update = {"type": "session.update", "event_id": "p", "session": {"type": "transcription", "audio": {"input": {
            "transcription": {"model": "gpt-4o-mini-transcribe", "prompt": prompt}, "turn_detection": None}}}}
        if len(prompt) > 50_000:  # refused: no audio to hear
            received, _ = _raw(server, "?intent=transcription", [json.dumps(update)], until="error")
        else:
            received, _ = _raw(server, "?intent=transcription", [json.dumps(update), *appends,
                                                                  json.dumps({"type": "input_audio_buffer.commit"})], until=COMPLETED)
        if len(prompt) > 50_000:
            error = next(e for e in received if e["type"] == "error")
            assert error["error"]["param"] == "session.audio.input.transcription.prompt" and "prompt" in error["error"]["message"]
            continue
        answer = SessionUpdatedEvent.model_validate(next(e for e in received if e["type"] == "session.updated"))
        assert answer.session.audio.input.transcription.prompt == prompt
        assert answer.session.audio.input.transcription.model == "gpt-4o-mini-transcribe"  # the deployment's alias
        texts[prompt] = next(e for e in received if e["type"] == COMPLETED)["transcript"]
    assert "Claflin" in texts["Claflin"] and "Claflin" in texts[long] and "Claflin" not in texts[""], texts
    assert wer([item.reference], [texts["Claflin"]]) < wer([item.reference], [texts[""]])


def test_a_client_waiting_for_its_transcript_is_not_idle(server_log, tmp_path_factory, tmp_path):  # noqa: F811
    """The idle limit counts the client's silence while the server has nothing of its in hand: 48 s of
    speech in one append and a commit, on a server closing idle sessions after 0.5 s, is transcribed (the
    session ended at the limit first, and the transcript was lost), then the idle session is closed. The
    transcript is the whole of it: tiny.en ended one window's text at "in 1813." before 15 s of speech, and
    the turn ended there (WER 0.526; now 0.336, a burst's: each window decoded once or twice)."""
    from specwhisper.evaluation.transcripts import build_long_file

    long = build_long_file("dense", tmp_path, min_seconds=45)
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=60,
                               live=LiveLimits(max_streams=1, idle_timeout_s=0.5, session_idle_s=0.5, max_ahead_s=120.0))
    config = ServerConfig(port=0, access_log=False, spool_dir=tmp_path_factory.mktemp("spool"))
    update = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}}
    append = {"type": "input_audio_buffer.append", "audio": base64.b64encode(_pcm24(load_audio(long.path))).decode()}
    with serving(Endpoint(settings), config) as srv:
        received, code = _raw(srv, "?intent=transcription", [json.dumps(update), json.dumps(append),
                                                              json.dumps({"type": "input_audio_buffer.commit"})])
    completed = next((e for e in received if e["type"] == COMPLETED), None)
    assert completed is not None and wer([long.reference], [completed["transcript"]]) <= 0.4, received[-2:]
    assert "similar process" in completed["transcript"]  # the clip that ends the audio
    assert received[-1]["type"] == "error" and received[-1]["error"]["code"] == "408" and code == 1008


def test_each_update_is_answered_with_the_session_it_made(server):
    """Updates sent at once (one job for the model worker) are each answered with the session as that update
    left it, in their order and form: the echo was the session after the last, for every one of them."""
    def update(ms: int, beta: bool = False) -> str:
        if beta:
            return json.dumps({"type": "transcription_session.update", "session": {"turn_detection": {"type": "server_vad", "silence_duration_ms": ms}}})
        return json.dumps({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "turn_detection": {"type": "server_vad", "silence_duration_ms": ms}}}}})

    received, _ = _raw(server, "?intent=transcription", [update(700), update(900, beta=True), update(1100)])
    answers = [e for e in received if e["type"].endswith("session.updated")]
    assert [e["type"] for e in answers] == ["session.updated", "transcription_session.updated", "session.updated"]
    assert [SessionUpdatedEvent.model_validate(answers[0]).session.audio.input.turn_detection.silence_duration_ms,
            answers[1]["session"]["turn_detection"]["silence_duration_ms"],
            SessionUpdatedEvent.model_validate(answers[2]).session.audio.input.turn_detection.silence_duration_ms] == [700, 900, 1100]
    assert len({e["session"]["id"] for e in answers}) == 1


class _Flood:
    """A client's socket that sends event after event and reads none of the server's."""

    def __init__(self):
        self.read = 0

    async def receive(self) -> dict:
        self.read += 1
        return {"type": "websocket.receive", "text": json.dumps({"type": "session.update", "session": "x" * 1000})}


def test_a_client_that_reads_no_events_is_read_no_further():
    """The session's loop is stuck sending to a client that reads nothing (here: it never takes the actions):
    the receiver stops reading at QUEUED_ACTIONS waiting events, where it read on without bound (8 MiB
    session.updates so grew the server by 700 MiB)."""
    from types import SimpleNamespace

    from specwhisper.serving.http.realtime_ws import QUEUED_ACTIONS, RealtimeSession

    ws = _Flood()
    settings = SimpleNamespace(live=LIMITS, max_audio_s=MAX_AUDIO_S)
    session = RealtimeSession(ws, worker=None, transcriber=SimpleNamespace(settings=settings), slots=None)

    async def run():
        receiver = asyncio.create_task(session.receive())
        await asyncio.sleep(0.5)
        receiver.cancel()

    asyncio.run(run())
    assert len(session.inbox.actions) == QUEUED_ACTIONS and ws.read == QUEUED_ACTIONS


def test_a_commit_of_what_the_vad_heard_no_speech_in_is_an_empty_item(server):
    """With server VAD, a commit after 1 s of silence (no turn open) commits that audio, as OpenAI's buffer
    holds it: an item with an empty transcript and its duration, not an error saying 0 ms are held; 50 ms
    is still refused, with what it holds."""
    silence = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(2 * INPUT_RATE)).decode()})
    short = json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(bytes(INPUT_RATE // 10)).decode()})
    commit = json.dumps({"type": "input_audio_buffer.commit", "event_id": "c1"})
    received, _ = _raw(server, "?intent=transcription", [short, commit, silence, commit], until=COMPLETED)
    error = next(e for e in received if e["type"] == "error")["error"]
    held = re.search(r"it holds (\d+) ms", error["message"])
    assert error["code"] == "input_audio_buffer_commit_empty" and held and 0 < int(held[1]) <= 50, error
    committed = [e for e in received if e["type"] == "input_audio_buffer.committed"]
    completed = received[-1]
    assert len(committed) == 1 and completed["item_id"] == committed[0]["item_id"], received
    assert completed["transcript"] == "" and completed["usage"]["seconds"] == pytest.approx(1.05, abs=0.05), completed
    assert not [e for e in received if e["type"] == "input_audio_buffer.speech_started"]


def test_a_push_to_talk_session_waits_between_turns_until_its_slot_is_needed(server_log, tmp_path_factory, clips):  # noqa: F811
    """Push-to-talk (no turn detection): the client sends nothing between turns. On a server of one live slot
    closing idle streams after 0.5 s, the session waits 1.5 s after its first turn and its second turn is still
    transcribed (the session was closed at 0.5 s, 408); once idle again, a new client that finds the slot taken
    gets it, and the waiting session ends with a 408 saying why."""
    (a, ref_a), (b, ref_b) = clips
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=60,
                               live=LiveLimits(max_streams=1, idle_timeout_s=0.5, session_idle_s=60.0, max_ahead_s=120.0))
    config = ServerConfig(port=0, access_log=False, spool_dir=tmp_path_factory.mktemp("spool"))
    update = {"type": "session.update", "session": {"type": "transcription", "audio": {"input": {"turn_detection": None}}}}

    def turn(audio: np.ndarray) -> list[str]:
        return [*(json.dumps({"type": "input_audio_buffer.append", "audio": p}) for p in _appends(_pcm24(audio), 1.0)),
                json.dumps({"type": "input_audio_buffer.commit"})]

    async def until(ws, kind: str) -> list[dict]:
        got = []
        while not got or got[-1]["type"] != kind:
            got.append(json.loads(await asyncio.wait_for(ws.recv(), 120)))
        return got

    async def sessions(url: str):
        async with connect(url, open_timeout=60, close_timeout=10) as first:
            await first.send(json.dumps(update))
            for message in turn(a):
                await first.send(message)
            one = await until(first, COMPLETED)
            await asyncio.sleep(1.5)  # between turns, past the idle limit
            for message in turn(b):
                await first.send(message)
            two = await until(first, COMPLETED)
            await asyncio.sleep(1.0)
            async with connect(url, open_timeout=60, close_timeout=10) as second:
                created = json.loads(await asyncio.wait_for(second.recv(), 60))
                try:
                    ended = await until(first, "error")
                except ConnectionClosed:
                    ended = []
                await asyncio.wait_for(first.wait_closed(), 30)
                return one, two, created, ended, first.close_code

    with serving(Endpoint(settings), config) as srv:
        one, two, created, ended, code = asyncio.run(sessions(srv.url.replace("http://", "ws://") + "/v1/realtime?intent=transcription"))
    assert wer([ref_a], [one[-1]["transcript"]]) < 0.3 and wer([ref_b], [two[-1]["transcript"]]) < 0.3, (one[-1], two[-1])
    assert created["type"] == "session.created", created
    error = ended[-1]["error"]
    assert error["code"] == "408" and "another stream needed the slot" in error["message"] and code == 1008, ended
