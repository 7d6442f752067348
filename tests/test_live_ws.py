"""The live WebSocket route (/v1/live) over loopback, with a real uvicorn server and a real websockets
client: real speech streams in and comes back as confirmed words and a final transcript; every bad
input ends its stream with one JSON error and the right close code, and the server keeps serving HTTP
and new streams without a traceback in its log. Limits are scaled down (1 s idle timeout, 3 s burst;
a second server with 6 s of audio and a 1 s burst) so each case takes seconds."""

from __future__ import annotations

import asyncio
import json
import time

import numpy as np
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from specwhisper.audio.loading import load_audio
from specwhisper.evaluation.transcripts import english_set, load_manifest, wer
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.params import Choices
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import EndpointServer, serving
from specwhisper.serving.http.live_ws import LiveStream
from specwhisper.serving.service import LiveLimits, ServiceSettings
from tests.test_abuse import _request, server_log  # noqa: F401 - server_log is a fixture: no traceback in the log

RATE = 16000
LIVE = LiveLimits(max_streams=2, idle_timeout_s=1.0, max_ahead_s=3.0, max_frame_bytes=2**20)  # a frame past 1 MiB: closed
STRICT = LiveLimits(max_streams=2, idle_timeout_s=1.0, max_ahead_s=1.0)
STRICT_AUDIO_S = 6.0
WORD_KEYS = {"word", "start", "end", "probability", "overlap"}


def _endpoint(max_audio_s: float, live: LiveLimits) -> Endpoint:
    return Endpoint(ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=max_audio_s, live=live))


def _serve(endpoint: Endpoint, tmp_path_factory):
    return serving(endpoint, ServerConfig(port=0, access_log=False, spool_dir=tmp_path_factory.mktemp("spool")))


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    with _serve(_endpoint(60, LIVE), tmp_path_factory) as srv:
        yield srv


@pytest.fixture(scope="module")
def strict(server_log, tmp_path_factory):  # noqa: F811
    with _serve(_endpoint(STRICT_AUDIO_S, STRICT), tmp_path_factory) as srv:
        yield srv


@pytest.fixture(scope="module")
def eager(server_log, tmp_path_factory):  # noqa: F811 - no pacing: the client may run a minute ahead
    with _serve(_endpoint(90, LiveLimits(max_streams=2, idle_timeout_s=5.0, max_ahead_s=300.0)), tmp_path_factory) as srv:
        yield srv


@pytest.fixture(scope="module")
def speech(eval_root):
    """A 10-15 s single-speaker public clip with its reference (LibriSpeech dev-clean, 11.7 s)."""
    item = next(i for i in english_set(eval_root) if i.category == "single" and 10 <= i.duration <= 15 and "jfk" not in i.file)
    return load_audio(item.path), item.reference


@pytest.fixture(autouse=True)
def still_serving(request):
    """After each case, on each server it used: /health answers and a new stream gets its final."""
    yield
    for name in ("server", "strict", "eager"):
        if name in request.fixturenames:
            srv = request.getfixturevalue(name)
            assert _request(srv, "GET", "/health")[:2] == (200, {"status": "ok"})
            for _ in range(20):  # the sockets a case just closed may still count for a moment
                messages, code = _stream(srv, [json.dumps({"type": "end"})])
                if messages[-1].get("status") != 503:
                    break
                time.sleep(0.1)
            assert code == 1000 and messages[-1]["type"] == "final" and messages[-1]["text"] == "", messages


def _url(srv: EndpointServer, query: str = "") -> str:
    return srv.url.replace("http://", "ws://") + "/v1/live" + query


async def _session(url: str, frames: list, arrivals: list | None = None) -> tuple[list[dict], int | None]:
    """Send ``frames`` as fast as the server takes them while reading its answers until it closes
    (``arrivals``: when each answer came, in seconds from the first frame sent)."""
    async with connect(url, max_size=None, open_timeout=60, close_timeout=10) as ws:

        async def send():
            try:
                for frame in frames:
                    await ws.send(frame)
            except ConnectionClosed:
                pass  # the server ended the stream while we were still sending

        sender = asyncio.create_task(send())
        messages = []
        t0 = time.monotonic()
        try:
            async for raw in ws:  # ends at a normal close (1000), raises at any other
                messages.append(json.loads(raw))
                if arrivals is not None:
                    arrivals.append(time.monotonic() - t0)
        except ConnectionClosed:
            pass
        await sender
        return messages, ws.close_code


def _stream(srv: EndpointServer, frames: list, query: str = "", arrivals: list | None = None) -> tuple[list[dict], int | None]:
    return asyncio.run(_session(_url(srv, query), frames, arrivals))


def _pcm(audio: np.ndarray, piece_s: float = 0.25, fmt: str = "s16le") -> list[bytes]:
    data = (np.clip(audio, -1, 1) * 32767).astype("<i2") if fmt == "s16le" else audio.astype("<f4")
    step = int(piece_s * RATE)
    return [data[i : i + step].tobytes() for i in range(0, len(data), step)]


def _is_error(messages: list[dict], code: int | None, status: int, close: int, fragment: str) -> None:
    error = messages[-1]
    assert error["type"] == "error" and set(error) == {"type", "error", "status"} and error["status"] == status, messages
    assert fragment in error["error"] and "\n" not in error["error"] and len(error["error"]) <= 300, error
    assert code == close, (code, messages)


END = json.dumps({"type": "end"})


def test_streams_real_speech(server, speech):
    audio, reference = speech
    messages, code = _stream(server, _pcm(audio) + [END])
    assert code == 1000 and messages[-1]["type"] == "final", messages[-3:]
    assert {m["type"] for m in messages[:-1]} == {"confirmed", "partial"}
    confirmed = [m for m in messages if m["type"] == "confirmed"]
    assert len(confirmed) >= 2, "words were confirmed only at the end: nothing was streamed"
    words = [w for m in confirmed for w in m["words"]]
    assert all(set(w) == WORD_KEYS and w["start"] <= w["end"] for w in words)
    assert [w["start"] for w in words] == sorted(w["start"] for w in words), "confirmed words out of time order"
    assert all(m["text"] == "".join(w["word"] for w in m["words"]) for m in confirmed)
    final = messages[-1]
    assert [w for s in final["segments"] for w in s["words"]] == words  # the final is the confirmed stream
    assert final["duration"] == pytest.approx(len(audio) / RATE, abs=1e-3) and final["model"]["live"]
    assert wer([reference], [final["text"]]) < 0.35, final["text"]  # measured: 0.0 (tiny.en)


def test_a_prompt_spells_the_names(eager, eval_root):
    """``?initial_prompt=`` (or ``hotwords``): names a stream should spell, in every re-decode's context, as
    offline's --initial-prompt: the meeting's "Abigail Claflin", which tiny.en hears as "Abigail Classroom"
    (on the server that does not pace the audio: the wall clock is not what this checks)."""
    item = next(i for i in load_manifest(eval_root) if i.file == "lhotse/ES2011a.Headset-0-40s-46s.wav")
    frames = _pcm(load_audio(item.path)) + [END]
    plain, _ = _stream(eager, frames)
    for query in ("?initial_prompt=Claflin", "?hotwords=Claflin"):
        prompted, _ = _stream(eager, frames, query)
        assert "Claflin" in prompted[-1]["text"] and "Claflin" not in plain[-1]["text"], (plain[-1]["text"], prompted[-1]["text"])
        assert wer([item.reference], [prompted[-1]["text"]]) < wer([item.reference], [plain[-1]["text"]])


BAD_QUERIES = [
    ("?format=mp3", 400, "format must be s16le or f32le"),
    ("?sample_rate=44100", 400, "sample_rate must be 16000"),
    ("?rate=16000", 400, "unknown parameter 'rate'"),
    ("?beam_size=5", 400, "beam_size does not apply to a live stream"),  # an option live decoding has no use for
    ("?max_line_width=42", 400, "max_line_width does not apply to a live stream"),  # the answers are JSON
    ("?vad_threshold=1.5", 400, "vad_threshold"),  # one it takes, checked as every entry point checks it
    ("?no_speech_threshold=2", 400, "no_speech_threshold"),
    ("?model=large-v3", 400, "is not offered here"),
    ("?language=de", 400, "English-only"),
    ("?task=dance", 400, "parameters.task"),
    ("?hotwords=" + "x" * 2001, 400, "at most 2000 characters"),
]


@pytest.mark.parametrize(("query", "status", "fragment"), BAD_QUERIES)
def test_bad_parameters(server, query, status, fragment):
    messages, code = _stream(server, [], query)
    assert len(messages) == 1
    _is_error(messages, code, status, 1008, fragment)


BAD_FRAMES = [
    ("", [b"\x00\x00", b"\x00\x00\x00"], "a binary frame of 3 bytes is not whole s16le samples"),
    ("?format=f32le", [b"\x00" * 6], "a binary frame of 6 bytes is not whole f32le samples"),
    ("?format=f32le", [np.array([0.1, np.nan], "<f4").tobytes()], "finite"),
    ("?format=f32le", [np.array([0.1, -np.inf], "<f4").tobytes()], "finite"),
    ("", ["hello"], "the only text frame is"),
    ("", [json.dumps({"type": "stop"})], "the only text frame is"),
    ("", ["[" * 100_000], "the only text frame is"),
]


@pytest.mark.parametrize(("query", "frames", "fragment"), BAD_FRAMES)
def test_bad_frames(server, query, frames, fragment):
    messages, code = _stream(server, frames, query)
    assert [m["type"] for m in messages[:-1]] in ([], ["partial"])  # at most the update of a good first frame
    _is_error(messages, code, 400, 1008, fragment)


def test_oversized_frame_is_closed_by_the_protocol(server):
    messages, code = _stream(server, [b"\x00" * (LIVE.max_frame_bytes + 2)])
    assert messages == [] and code == 1009


def test_idle_client_is_closed(server):
    t0 = time.monotonic()
    messages, code = _stream(server, [b"\x00\x00" * 8000])  # half a second of silence, then nothing
    _is_error(messages, code, 408, 1008, "no audio for 1 s")
    assert time.monotonic() - t0 < LIVE.idle_timeout_s + 30


def test_too_many_streams(server):
    async def crowd():
        async with connect(_url(server)) as a, connect(_url(server)) as b:
            await a.send(b"\x00\x00" * 1600)
            await b.send(b"\x00\x00" * 1600)
            return await _session(_url(server), [])

    messages, code = asyncio.run(crowd())
    assert len(messages) == 1
    _is_error(messages, code, 503, 1013, "too many live streams (at most 2)")


def test_fast_client_is_throttled_and_long_stream_is_cut(strict, speech):
    """Audio sent all at once is read at the wall clock's pace after a 1 s burst, and the stream stops
    at the 6 s limit with the final of those 6 s, then the error."""
    audio, _ = speech
    arrivals: list[float] = []
    messages, code = _stream(strict, _pcm(audio, fmt="f32le") + [END], "?format=f32le&sample_rate=16000", arrivals)
    assert [m["type"] for m in messages[-2:]] == ["final", "error"], messages
    final = messages[-2]
    assert final["duration"] == STRICT_AUDIO_S and final["text"].startswith("If the reader")
    assert all(w["end"] <= STRICT_AUDIO_S + 0.02 for s in final["segments"] for w in s["words"])
    _is_error(messages, code, 413, 1009, "passed the limit of 6 s of audio")
    # the last of the 6 s can only have been read STRICT_AUDIO_S - max_ahead_s after the first (under
    # load the updates alone may take that long: test_reading_is_paced_by_the_wall_clock checks the pace)
    assert arrivals[-2] >= STRICT_AUDIO_S - STRICT.max_ahead_s - 0.1, arrivals


def test_a_backlog_past_the_window_loses_no_speech(eager, eval_root):
    """Distinct clips over 45 s all at once to a server that does not pace them: the updates fall a
    whole window (30 s) behind, and every word still comes back (each update takes all that waits)."""
    items = [i for i in english_set(eval_root) if i.category == "single" and 4 <= i.duration <= 15 and "jfk" not in i.file]
    clips, references = [], []
    for item in items:
        if sum(len(c) for c in clips) > 45 * RATE:
            break
        clips.append(load_audio(item.path))
        references.append(item.reference)
    messages, code = _stream(eager, _pcm(np.concatenate(clips), piece_s=1.0) + [END])
    assert code == 1000 and messages[-1]["type"] == "final", messages[-3:]
    # measured (tiny.en, 67 s): 0.063; when an update took a window's worth only, 0.868
    assert wer([" ".join(references)], [messages[-1]["text"]]) < 0.2, messages[-1]["text"]


class _Instant:
    """A WebSocket whose frames are all there at once (then nothing more comes); records when each was asked for."""

    def __init__(self, frames: list):
        self.frames, self.asked = list(frames), []

    async def receive(self) -> dict:
        if not self.frames:
            await asyncio.sleep(3600)
        self.asked.append(time.monotonic())
        frame = self.frames.pop(0)
        return {"type": "websocket.receive", "bytes" if isinstance(frame, bytes) else "text": frame}


def test_reading_is_paced_by_the_wall_clock():
    """The receiver alone (no model, so no compute time hides the pace): after a 0.5 s burst, frame k
    (0.25 s each) is taken no earlier than k * 0.25 - 0.5 s after the first, while the socket is read on
    ahead of it (keepalive pings answered, a close noticed: test_a_client_gone_far_ahead_frees_its_stream)."""
    ws = _Instant([b"\x00\x00" * 4000] * 12 + [END])
    stream = LiveStream(ws, worker=None, limits=LiveLimits(max_ahead_s=0.5), max_audio_s=60, dtype=np.dtype("<i2"))
    taken, add = [], stream._add
    stream._add = lambda samples: (taken.append(time.monotonic()), add(samples))
    asyncio.run(stream.receive())
    assert stream.inbox.ended and stream.inbox.received_s == 3.0 and stream.inbox.error is None
    for k, t in enumerate(taken):
        assert t - taken[0] >= k * 0.25 - 0.5 - 0.01, (k, t - taken[0])
    assert taken[-1] - taken[0] < 3.0  # and not slower than the clock
    assert ws.asked[12] - ws.asked[0] < 1.0  # every frame was read long before it was taken


def test_a_client_gone_far_ahead_frees_its_stream(strict, speech):
    """A client sending 5.5 s at once in 0.1 s frames (STRICT lets it be 1 s ahead): its frames are read at
    once and wait, its keepalive ping is answered, and once it leaves its stream's slot is free at once: two
    new streams are both taken (with the reader stopped, TCP held its sends and ping until the clock caught
    up, then the slot stayed taken: the openai client's keepalive timed out that way)."""
    audio, _ = speech

    async def run() -> float:
        t0 = time.monotonic()
        async with connect(_url(strict, "?format=f32le&sample_rate=16000"), ping_interval=None) as ws:
            for frame in _pcm(audio[: int(5.5 * RATE)], piece_s=0.1, fmt="f32le"):  # as the openai client sends it
                await ws.send(frame)
            await asyncio.wait_for(await ws.ping(), 2.0)
        while True:  # the update in hand when it left ends first (0.3 s here)
            answers = await asyncio.gather(*(_session(_url(strict), [END]) for _ in range(2)))
            if all(code == 1000 and messages[-1]["type"] == "final" for messages, code in answers):
                return time.monotonic() - t0
            await asyncio.sleep(0.1)

    # not held back in its sends, then gone: the clock would catch up 4.5 s after the sends
    assert asyncio.run(run()) < 2.5


def test_live_limits_from_the_environment():
    from specwhisper.serving.endpoint.contract import settings_from_env

    live = settings_from_env({"SPECWHISPER_LIVE_STREAMS": "4", "SPECWHISPER_LIVE_IDLE_S": "15", "SPECWHISPER_LIVE_AHEAD_S": "2.5",
                              "SPECWHISPER_REALTIME_IDLE_S": "600"}).live
    assert (live.max_streams, live.idle_timeout_s, live.max_ahead_s, live.session_idle_s) == (4, 15.0, 2.5, 600.0)
    assert settings_from_env({}).live == LiveLimits()
    with pytest.raises(ValueError, match="bad live limits"):
        settings_from_env({"SPECWHISPER_LIVE_STREAMS": "0"})
    with pytest.raises(ValueError, match="bad live limits"):  # a wait between turns shorter than within one
        settings_from_env({"SPECWHISPER_REALTIME_IDLE_S": "5"})
