"""``/v1/live``: live transcription over a WebSocket (the streaming engine of
:mod:`specwhisper.live.stream` behind the HTTP server).

Protocol. The client connects to ``ws://HOST:PORT/v1/live`` with optional query parameters ``model``
(one the deployment offers), ``language`` (code or name; default: detected on the first update),
``task`` (``transcribe``/``translate``), the other request options the live engine applies
(``PARAM_KEYS``; any other option is refused by name), ``format`` (``s16le``, the default, or ``f32le``) and
``sample_rate`` (only ``16000``: resample on the client). It then sends binary frames of 16 kHz mono
PCM in that format, of any length that is whole samples, and the text frame ``{"type": "end"}`` when
the audio is over. The server answers with JSON text frames:

* ``{"type": "confirmed", "words": [{"word", "start", "end", "probability", "overlap"}...], "text"}``:
  words two consecutive hypotheses agreed on, times in seconds from the stream's start, never revised;
* ``{"type": "partial", "text", "start", "end"}``: the rest of the current hypothesis (may change);
* ``{"type": "final", "text", "segments", "language", "duration", ...}``: after ``end``, the whole
  confirmed stream in the HTTP route's answer form (its segments and words, the same keys), then the
  server closes with 1000;
* ``{"type": "error", "error": "<one line>", "status": N}``, then the server closes.

Closing the socket without ``end`` abandons the stream (nothing more is sent). An update re-decodes
the whole buffer (1-2 s of compute for Whisper base on a 2-core CPU), so each takes all the audio that
arrived since the last one, never a queue of pieces (as :mod:`specwhisper.live.replay`); it decodes the
buffer's first 30 s window, and what waits past it is decoded by the next updates.

Limits (:class:`specwhisper.serving.service.LiveLimits` in ``ServiceSettings.live``; the HTTP route's
``max_audio_s``):

=====================================  =====================================================  =====
past it                                answer                                                 close
=====================================  =====================================================  =====
``max_streams`` open live sockets      error 503 at connect                                   1013
bad query parameter, frame that is     error 400                                              1008
not whole samples, NaN/inf floats,
a text frame other than ``end``
no frame for ``idle_timeout_s``        error 408                                              1008
audio past ``max_audio_s``             the final (of the audio up to the limit), error 413    1009
a frame over ``max_frame_bytes``       closed by the WebSocket protocol (no JSON)             1009
model worker queue full at connect     error 503                                              1013
=====================================  =====================================================  =====

A client faster than real time is throttled, not refused: once its audio runs ``max_ahead_s`` ahead of
the wall clock since its first frame, what it sends next is taken when the clock catches up; the socket
is read meanwhile, up to ``max_frame_bytes`` ahead (keepalive pings answered, a client that left noticed:
``Pacing``), and past that TCP holds the sender.

The model. Every update, like every HTTP request, runs on the server's one model worker thread
(:mod:`specwhisper.serving.worker`), so a live stream never runs the model at the same time as a
batch request or another stream and nothing runs on the event loop. A lock would serialise them too,
but it would let a stream and a batch job each hold a thread and race for the lock outside the bounded
queue; through the worker, updates wait in the same FIFO as requests (its audio keeps arriving meanwhile
and the next update takes it all), but an update is short: it runs inside a long request's pass at its
next report between batches rather than after it (the worker's overtaking). A full queue
refuses a new stream (503); a running stream's update retries until there is room.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

import numpy as np
from fastapi import FastAPI, WebSocket
from starlette.websockets import WebSocketDisconnect, WebSocketState

from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.weights.loader import ModelError
from specwhisper.results.transcript import word_to_dict
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.live.stream import LiveError, StreamingTranscriber, StreamUpdate
from specwhisper.pipeline.options import BY_NAME, LIVE_TAKES, options_for
from specwhisper.serving.endpoint.contract import response
from specwhisper.serving.worker import ModelWorker, QueueFull
from specwhisper.serving.params import RequestError, TranscribeParams, parse_params
from specwhisper.messages import clip, one_line, short_repr
from specwhisper.serving.service import LiveLimits, PipelinePool

log = logging.getLogger(__name__)
T = TypeVar("T")
LIVE_PATH = "/v1/live"
FORMATS = {"s16le": np.dtype("<i2"), "f32le": np.dtype("<f4")}
# the request parameters a stream takes: the model and the run options the live engine applies, but the
# subtitle layout (the stream's answers are words and segments in JSON); any other option is refused by name
PARAM_KEYS = ("model", *(o.name for o in options_for("http", "run") if o.live and o.group != "subtitles"))
QUERY_KEYS = (*PARAM_KEYS, "format", "sample_rate")
CLOSE_CODES = {400: 1008, 408: 1008, 413: 1009, 503: 1013}  # anything else: 1011 (internal error)
QUEUE_RETRY_S = 0.25  # a running stream's update waits this long when the model's queue is full


@dataclass(frozen=True)
class LiveQuery:
    params: TranscribeParams
    dtype: np.dtype


def parse_query(query: dict[str, str], transcriber: PipelinePool) -> LiveQuery:
    """The connection's query parameters, checked (LiveError 400 names the first bad one)."""
    unknown = [k for k in query if k not in QUERY_KEYS]
    if unknown and unknown[0] in BY_NAME:
        raise LiveError(status=400, message=f"{unknown[0]} does not apply to a live stream: {LIVE_TAKES}")
    if unknown:
        raise LiveError(status=400, message=f"unknown parameter '{clip(unknown[0], 60)}' (known: {', '.join(QUERY_KEYS)})")
    fmt = query.get("format", "s16le")
    if fmt not in FORMATS:
        raise LiveError(status=400, message=f"format must be {' or '.join(FORMATS)} (16 kHz mono PCM), got {short_repr(fmt)}")
    rate = query.get("sample_rate", str(SAMPLE_RATE))
    if rate != str(SAMPLE_RATE):
        raise LiveError(status=400, message=f"sample_rate must be {SAMPLE_RATE} (resample on the client), got {short_repr(rate)}")
    try:
        params = parse_params({k: query[k] for k in PARAM_KEYS if k in query},
                              transcriber.settings.choices)
    except RequestError as exc:
        raise LiveError(status=exc.status, message=str(exc)) from None
    return LiveQuery(params, FORMATS[fmt])


def to_samples(frame: bytes, dtype: np.dtype) -> np.ndarray:
    """A binary frame as float32 samples in [-1, 1] (s16le) or as sent (f32le, finite numbers only)."""
    if len(frame) % dtype.itemsize:
        name = next(k for k, v in FORMATS.items() if v == dtype)
        raise LiveError(status=400, message=f"a binary frame of {len(frame)} bytes is not whole {name} samples ({dtype.itemsize} bytes each)")
    samples = np.frombuffer(frame, dtype)
    if dtype.kind == "i":
        return samples.astype(np.float32) / 32768.0
    if not np.isfinite(samples).all():
        raise LiveError(status=400, message="f32le samples must be finite numbers (the frame holds NaN or infinity)")
    return samples.astype(np.float32)


def is_end(text: str) -> bool:
    """True for the end message; LiveError for any other text frame."""
    try:
        message = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        message = None
    if message != {"type": "end"}:
        raise LiveError(status=400, message=f'the only text frame is {{"type": "end"}}, got {short_repr(text)}')
    return True


@dataclass
class Inbox:
    """What the receiver hands the decoder: audio not decoded yet, and how the input ended."""

    pending: list[np.ndarray] = field(default_factory=list)
    received_s: float = 0.0
    ended: bool = False  # "end" arrived, or the length limit was reached
    over_limit: bool = False
    gone: bool = False  # the client closed without "end"
    error: LiveError | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)

    def take(self) -> np.ndarray:
        """The pending audio, oldest first."""
        audio = np.concatenate(self.pending) if self.pending else np.zeros(0, np.float32)
        self.pending = []
        return audio


class LiveStream:
    """One socket: a receiver task fills the inbox; this coroutine decodes and answers."""

    def __init__(self, ws: WebSocket, worker: ModelWorker, limits: LiveLimits, max_audio_s: float, dtype: np.dtype,
                 slots: StreamSlots | None = None):
        self.ws, self.worker, self.limits, self.max_audio_s, self.dtype = ws, worker, limits, max_audio_s, dtype
        self.slots = slots  # counts the audio received
        self.inbox = Inbox()
        self.compute_s = 0.0

    async def run(self, live: StreamingTranscriber, params: TranscribeParams) -> None:
        started = time.perf_counter()
        receiver = asyncio.create_task(self.receive())
        try:
            last = await self._decode(live)
        finally:
            receiver.cancel()
        box = self.inbox
        if box.error is not None:
            await send_error(self.ws, box.error)
        elif last is not None:
            await self._send_update(last)
            await send_json(self.ws, {"type": "final", **response(live.transcript(self.compute_s), params, time.perf_counter() - started)})
            if box.over_limit:
                await send_error(self.ws, LiveError(status=413, message=f"the stream passed the limit of {self.max_audio_s:g} s of audio"))
            else:
                await close(self.ws, 1000)

    async def receive(self) -> None:
        """Read frames into the inbox until the end, the length limit, an error or the client's close."""
        box, pacing = self.inbox, Pacing(self.limits.max_ahead_s, self.limits.max_frame_bytes)
        with receiving(box, "live stream"):
            while not box.ended:
                message = await pacing.next(self.ws, self.limits.idle_timeout_s, "audio")
                if message["type"] == "websocket.disconnect":
                    box.gone = True
                    return
                if message.get("text") is not None:
                    box.ended = is_end(message["text"])
                elif message.get("bytes") is not None:
                    self._add(to_samples(message["bytes"], self.dtype))
                    await pacing.hold(box.received_s, self.ws)
                box.changed.set()

    def _add(self, samples: np.ndarray) -> None:
        box = self.inbox
        room = int(round((self.max_audio_s - box.received_s) * SAMPLE_RATE))
        if len(samples) > room:
            samples = samples[: max(0, room)]
            box.over_limit = box.ended = True
        if len(samples):
            box.pending.append(samples)
            box.received_s += len(samples) / SAMPLE_RATE
            if self.slots is not None:
                self.slots.heard_s += len(samples) / SAMPLE_RATE

    async def _decode(self, live: StreamingTranscriber) -> StreamUpdate | None:
        """Updates while audio comes, then ``finish`` once it ended; None when the stream stopped early."""
        box = self.inbox
        while True:
            await box.changed.wait()
            box.changed.clear()
            if box.error is not None or box.gone:
                return None
            if box.pending:
                # all of it: an update decodes the buffer's first window, and with audio waiting past it
                # (the updates fell behind) it keeps what it has not confirmed yet for the next update
                # (``LiveBuffer.trim``); the window's worth alone, it let unconfirmed audio go, so a
                # client 67 s ahead of the updates had WER 0.868 on tiny.en, 0.063 taking it all
                audio = box.take()
                update = await self._on_worker(lambda: step(live, audio))
                if box.error is not None or box.gone:
                    return None
                if update.decode is not None:  # not when it waited for more audio: nothing changed
                    await self._send_update(update)
                box.changed.set()  # what arrived meanwhile, or the end
            elif box.ended:
                return await self._on_worker(live.finish)

    async def _on_worker(self, job: Callable[[], StreamUpdate]) -> StreamUpdate:
        update = await on_worker(self.worker, job)
        self.compute_s += update.seconds
        return update

    async def _send_update(self, update: StreamUpdate) -> None:
        words = update.confirmed.words
        if words:
            await send_json(self.ws, {"type": "confirmed", "words": [word_to_dict(w) for w in words], "text": update.confirmed.text})
        p = update.partial
        await send_json(self.ws, {"type": "partial", "text": p.text, "start": p.start, "end": p.end})



@contextlib.contextmanager
def receiving(box, what: str) -> Iterator[None]:
    """A receiver task's body (``box``: its inbox, with ``error`` and ``changed``): what stops it becomes
    ``box.error`` (an unexpected failure a logged 500: the stream ends with an error message, the server
    goes on), and the stream's loop is woken whatever happened."""
    try:
        yield
    except LiveError as exc:
        box.error = exc
    except Exception as exc:  # noqa: BLE001 - an error message, never a traceback to the client
        log.exception("%s: receiving failed", what)
        box.error = LiveError(status=500, message=f"internal error: {one_line(exc)}")
    finally:
        box.changed.set()


async def next_message(ws: WebSocket, idle_s: float, what: str, busy: Callable[[], bool] = lambda: False) -> dict:
    """The socket's next message; LiveError 408 when none comes for ``idle_s`` seconds while not ``busy``
    (the server has work of this socket's in hand: the client waits for it, it is not idle)."""
    receive = asyncio.ensure_future(ws.receive())
    try:
        while True:
            done, _ = await asyncio.wait({receive}, timeout=idle_s)
            if done:
                return receive.result()
            if not busy():
                raise LiveError(status=408, message=f"no {what} for {idle_s:g} s")
    finally:
        receive.cancel()


@dataclass
class Pacing:
    """A client faster than real time is throttled: once its audio runs ``max_ahead_s`` ahead of the
    wall clock since its first audio, what it sends next is taken when the clock catches up. The socket is
    read meanwhile (``hold``), up to ``read_ahead_bytes`` of messages kept in order (``next`` hands them
    out): uvicorn's protocol reads no frame while a message waits for the application, so a reader that
    stops reading leaves the client's keepalive pings unanswered (the openai client closes at 40 s, 1011
    keepalive ping timeout, its text lost) and a client gone unnoticed, its stream's slot taken, until the
    clock catches up (92 s for two clients that leave 100 s ahead: every other client refused meanwhile)."""

    max_ahead_s: float
    read_ahead_bytes: int = 16 * 2**20
    first: float | None = None
    early: deque = field(default_factory=deque)
    early_bytes: int = 0

    async def next(self, ws: WebSocket, idle_s: float, what: str, busy: Callable[[], bool] = lambda: False) -> dict:
        """The socket's next message: one read ahead, a disconnect read ahead first (what came before it would
        only be decoded for no one), or ``next_message``'s."""
        if any(m["type"] == "websocket.disconnect" for m in self.early):
            self.early.clear()
            return {"type": "websocket.disconnect"}
        if self.early:
            message = self.early.popleft()
            self.early_bytes -= _size(message)
            return message
        return await next_message(ws, idle_s, what, busy)

    async def hold(self, received_s: float, ws: WebSocket) -> None:
        """Wait until ``received_s`` of audio is at most ``max_ahead_s`` ahead of the clock, reading ahead."""
        loop = asyncio.get_running_loop()
        self.first = loop.time() if self.first is None else self.first
        until = self.first + received_s - self.max_ahead_s
        while (left := until - loop.time()) > 0:
            if self.early_bytes >= self.read_ahead_bytes:  # far ahead: TCP holds the sender, as it always did
                await asyncio.sleep(left)
                return
            receive = asyncio.ensure_future(ws.receive())
            done, _ = await asyncio.wait({receive}, timeout=left)
            if not done:
                receive.cancel()
                return
            message = receive.result()
            self.early.append(message)
            self.early_bytes += _size(message)
            if message["type"] == "websocket.disconnect":
                return


def _size(message: dict) -> int:
    return len(message.get("bytes") or message.get("text") or "")


async def on_worker(worker: ModelWorker, job: Callable[[], T]) -> T:
    """``job()`` on the model worker as a short job (it runs inside a long pass, between two of its
    batches); while the queue is full, it tries again."""
    while True:
        try:
            future, _ = worker.submit(lambda token: job(), seconds=0.0)
            break
        except QueueFull:
            await asyncio.sleep(QUEUE_RETRY_S)
    return await asyncio.wrap_future(future)


async def opened(worker: ModelWorker, job: Callable[[], T], model: str) -> T:
    """A stream's opening on the model worker (``model``: the pipeline it loads, for overtaking: it loads no
    model when a pass of that one runs, and then runs inside it); a full queue refuses it (503)."""
    try:
        future, _ = worker.submit(lambda token: job(), seconds=0.0, model=model)
    except QueueFull as exc:
        raise LiveError(status=503, message=f"the server is busy ({exc}); try again later") from None
    return await asyncio.wrap_future(future)


async def guarded(ws: WebSocket, session: Callable[[], Awaitable[None]],
                  end: Callable[[WebSocket, LiveError], Awaitable[None]], what: str) -> None:
    """Runs a socket's ``session``; whatever stops it ends the socket with one error (``end``), never a
    traceback to the client (the log has it)."""
    try:
        await session()
    except LiveError as exc:
        await end(ws, exc)
    except (ModelError, OSError) as exc:
        log.exception("%s: model unavailable", what)
        await end(ws, LiveError(status=503, message=f"model unavailable: {one_line(exc)}"))
    except Exception as exc:  # noqa: BLE001 - an error message, never a traceback to the client
        log.exception("%s failed", what)
        await end(ws, LiveError(status=500, message=f"internal error: {one_line(exc)}"))


def step(live: StreamingTranscriber, audio: np.ndarray) -> StreamUpdate:
    """Push what arrived and re-decode (on the model worker)."""
    live.push(audio)
    return live.update()


async def send_json(ws: WebSocket, message: dict) -> None:
    if ws.application_state == WebSocketState.CONNECTED:
        try:
            await ws.send_text(json.dumps(message, ensure_ascii=False))
        except (WebSocketDisconnect, RuntimeError):  # the client went away meanwhile
            pass


async def close(ws: WebSocket, code: int) -> None:
    if ws.application_state == WebSocketState.CONNECTED:
        try:
            await ws.close(code)
        except (WebSocketDisconnect, RuntimeError):
            pass


async def send_error(ws: WebSocket, error: LiveError) -> None:
    await send_json(ws, {"type": "error", "error": clip(str(error)), "status": error.status})
    await close(ws, CLOSE_CODES.get(error.status, 1011))


def stream_engine(transcriber: PipelinePool, params: TranscribeParams) -> AsrEngine:
    """The request's model (loaded if it is not; on the model worker), once it takes the request's language
    and task (LiveError 400 when it does not)."""
    engine = transcriber.engine(params)
    try:
        DecodeOptions(language=params.language, task=params.task).validate(engine.special)
    except ValueError as exc:
        raise LiveError(status=400, message=one_line(exc)) from None
    return engine


def open_stream(transcriber: PipelinePool, params: TranscribeParams) -> StreamingTranscriber:
    """A live transcriber on the request's model, once it takes the request's language and task (``stream_engine``)."""
    stream_engine(transcriber, params)
    return transcriber.open_stream(params)


@dataclass
class StreamSlots:
    """The live sockets open (``/v1/live`` and ``/v1/realtime`` together), at most ``limit``; those accepted
    so far (``started``) and the seconds of audio they received (``heard_s``, for ``/metrics``); used on
    the event loop only. A realtime session waiting between turns (``between_turns``) for ``yield_after_s``
    or more gives its slot to a new stream that finds them all taken: the one waiting longest is told so
    (its event is set) and ends."""

    limit: int
    yield_after_s: float = math.inf
    open: int = 0
    started: int = 0
    heard_s: float = 0.0
    waiting: dict[object, tuple[float, asyncio.Event]] = field(default_factory=dict)  # holder -> (since, told to yield)
    handed: set = field(default_factory=set)  # holders whose slot another stream has

    def take(self) -> bool:
        if self.open >= self.limit:
            now = time.monotonic()
            ready = [(since, id(holder), holder) for holder, (since, _) in self.waiting.items() if now - since >= self.yield_after_s]
            if not ready:
                return False
            holder = min(ready)[2]
            self.waiting.pop(holder)[1].set()
            self.handed.add(holder)
            self.open -= 1
        self.open += 1
        self.started += 1
        return True

    def between_turns(self, holder: object) -> asyncio.Event:
        """``holder`` waits for its next turn from now; the event is set when its slot is taken from it."""
        told = asyncio.Event()
        self.waiting[holder] = (time.monotonic(), told)
        return told

    def turn_began(self, holder: object) -> None:
        self.waiting.pop(holder, None)

    def release(self, holder: object = None) -> None:
        self.waiting.pop(holder, None)
        if holder in self.handed:  # its slot was counted for the stream that took it
            self.handed.discard(holder)
            return
        self.open -= 1


class LiveRoute:
    """The ``/v1/live`` handler; its sockets count against ``limits.max_streams`` (``slots``)."""

    def __init__(self, transcriber: PipelinePool, worker: ModelWorker, slots: StreamSlots):
        self.transcriber, self.worker, self.slots = transcriber, worker, slots
        self.limits = transcriber.settings.live

    async def __call__(self, ws: WebSocket) -> None:
        await ws.accept()
        if not self.slots.take():
            await send_error(ws, LiveError(status=503, message=f"too many live streams (at most {self.slots.limit}); try again later"))
            return
        try:
            await guarded(ws, lambda: self._session(ws), send_error, "live stream")
        finally:
            self.slots.release()

    async def _session(self, ws: WebSocket) -> None:
        query = parse_query(dict(ws.query_params), self.transcriber)
        live = await opened(self.worker, lambda: open_stream(self.transcriber, query.params),
                            self.transcriber.pipeline_key(query.params))
        stream = LiveStream(ws, self.worker, self.limits, self.transcriber.settings.max_audio_s, query.dtype, self.slots)
        await stream.run(live, query.params)


def add_live_route(app: FastAPI, transcriber: PipelinePool, worker: ModelWorker) -> StreamSlots:
    """``/v1/live``; the slots it counts its sockets in, for the other live routes to share."""
    slots = StreamSlots(transcriber.settings.live.max_streams, transcriber.settings.live.idle_timeout_s)
    app.add_api_websocket_route(LIVE_PATH, LiveRoute(transcriber, worker, slots))
    return slots
