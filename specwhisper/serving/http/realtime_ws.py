"""``/v1/realtime``: OpenAI's Realtime API for transcription sessions (``?intent=transcription``), so the
official ``openai`` clients (``client.realtime.connect(extra_query={"intent": "transcription"})``) and
the apps built on them transcribe live speech with this server.

What a session speaks (OpenAI's event names and fields):

* server -> client, at once: ``session.created`` with the session (``{"type": "transcription", "audio":
  {"input": {"format", "transcription", "turn_detection", "noise_reduction"}}, ...}``);
* ``session.update`` (``session.type`` "transcription"; the API's beta form, ``transcription_session.update``
  with ``input_audio_format``, ``input_audio_transcription`` and ``turn_detection``, is answered by
  ``transcription_session.updated`` in that form; :mod:`specwhisper.serving.http.realtime_config` reads it):
  ``audio.input.format`` (``audio/pcm`` at 24 kHz, or G.711 at 8 kHz, ``audio/pcmu`` or ``audio/pcma``),
  ``audio.input.transcription`` (``model``: ``whisper-1``, one the deployment offers or an alias of one;
  ``language``; ``prompt``: each turn's initial prompt), ``audio.input.turn_detection`` (``server_vad`` with
  ``threshold``, ``prefix_padding_ms``, ``silence_duration_ms``; ``semantic_vad`` with ``eagerness``:
  :mod:`specwhisper.live.turns`; or null: the client commits);
  answered by ``session.updated`` with the session in effect;
* ``input_audio_buffer.append`` (``audio``: base64 of the input format's bytes);
  ``input_audio_buffer.commit`` (the turn so far becomes an item: ``input_audio_buffer.committed``);
  ``input_audio_buffer.clear`` (``input_audio_buffer.cleared``: the turn is dropped);
* with turn detection: ``input_audio_buffer.speech_started`` (``audio_start_ms``: the first speech less
  the prefix padding) and ``input_audio_buffer.speech_stopped`` (``audio_end_ms``), then ``committed``;
  audio outside the turns is not transcribed;
* each item: ``conversation.item.added`` after the commit, its text's
  ``conversation.item.input_audio_transcription.delta`` events, then ``...completed`` (``transcript``: the
  deltas joined; ``usage``: ``{"type": "duration", "seconds"}``) and ``conversation.item.done`` (the
  user message item with that transcript).

The turn is transcribed by the live engine (:mod:`specwhisper.live.stream`: every re-decode drafted by
the one before, token-identical to plain decoding), so its words arrive as deltas while the speaker
talks, each word once and never revised, rather than after the commit as OpenAI's models send them.

Errors. A bad client event (not JSON, an unknown type, bad base64, a bad setting, a commit of under
100 ms of audio) is answered with OpenAI's ``error`` event (``error``: ``type``, ``code``, ``message``,
``param``, ``event_id`` of the event at fault) and the session goes on, as OpenAI's does. What ends the
session (an error event, then the close, as ``/v1/live``): a session that is not a transcription one
(400, close 1008), no message for ``idle_timeout_s`` inside a turn while none of its work is in hand
(408; between turns up to ``session_idle_s``, and past ``idle_timeout_s`` its slot goes to a new stream
that finds every slot taken: 408 then), audio past ``max_audio_s`` (413, 1009), too many live sockets
or a full queue (503, 1013); an event over ``max_frame_bytes`` (16 MiB: OpenAI takes appends of up to
15 MiB) is closed by the WebSocket protocol (1009, no event). The limits are ``/v1/live``'s
(:class:`specwhisper.serving.service.LiveLimits`, counted together), audio ahead of the clock included.
Every decode runs on the model worker, as ``/v1/live``'s updates: in its queue, overtaking long passes.
"""

from __future__ import annotations

import asyncio
import json
import logging
import uuid
from dataclasses import dataclass, field, replace

import numpy as np
import soxr
from fastapi import FastAPI, WebSocket

from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.live.stream import LiveError, StreamingTranscriber, StreamUpdate
from specwhisper.live.turns import TurnDetector
from specwhisper.results.words import SENTENCE_END
from specwhisper.serving.http.live_ws import (CLOSE_CODES, Pacing, StreamSlots, close, guarded, on_worker,
                                              open_stream, opened, receiving, send_json, stream_engine)
from specwhisper.serving.http.openai_api import logprob_entries
from specwhisper.serving.http.realtime_config import (EventError, InputFormat, SessionConfig, checked, format_of, from_beta,
                                                       updated)
from specwhisper.serving.params import ALIAS
from specwhisper.messages import clip, short_repr
from specwhisper.serving.service import PipelinePool
from specwhisper.serving.worker import ModelWorker

log = logging.getLogger(__name__)
REALTIME_PATH = "/v1/realtime"
MIN_COMMIT_S = 0.1  # OpenAI refuses to commit less
# Each turn is decoded on its own, without the turns before as context: given their last 200 characters
# (as /v1/live gives the confirmed text that left its buffer), bench/realtime.py's 130 s talk, a second at a
# time, went from WER 0.1255 (the offline transcript's) to 0.1381.
CLIENT_EVENTS = ("session.update", "transcription_session.update", "input_audio_buffer.append", "input_audio_buffer.commit",
                 "input_audio_buffer.clear")


# ------------------------------------------------------------------------------ the session's state


@dataclass
class Item:
    """A turn being transcribed: its own live stream (opened on its first audio)."""

    id: str
    start_ms: int
    live: StreamingTranscriber | None = None
    samples: int = 0
    fresh: bool = False  # audio pushed since the last decode
    text: str = ""  # the deltas sent
    partial: str = ""  # the latest hypothesis past them
    logprobs: list[dict] = field(default_factory=list)  # the words sent, as OpenAI's logprobs (``include``)


class Turns:
    """The session's audio, turns and items, on the model worker only: ``handle`` takes the client's
    actions in order and gives the server events they make."""

    def __init__(self, transcriber: PipelinePool, config: SessionConfig):
        self.transcriber = transcriber
        self.config = config
        self.position = 0  # samples (16 kHz) received
        self.detector = self._detector()
        self.resampler, self.resampling = _resampler(config.format), config.format
        self.prefix = np.zeros(0, np.float32)  # the latest prefix padding's audio, outside any turn
        self.outside = 0  # samples heard outside a turn since the last one (server VAD): a commit makes them an item
        self.item: Item | None = None
        self.previous: str | None = None  # the last committed item
        self.detected: str | None = None  # the language the first turn was heard in (no language set)

    def _detector(self) -> TurnDetector | None:
        turns = self.config.turns  # a session.update makes another, from the audio to come
        if turns is None:
            return None
        return TurnDetector(self.transcriber.engine(self.config.params).vad, turns, self.position, finished=self._finished)

    def _finished(self) -> bool:
        """Whether the open turn's text so far (its words sent and the hypothesis past them) ends a sentence;
        nothing heard yet is no sentence to wait for."""
        text = "" if self.item is None else (self.item.text + self.item.partial).strip()
        return not text or text[-1] in SENTENCE_END  # Chinese and Japanese full stops too

    def handle(self, actions: list[tuple]) -> list[dict]:
        """``actions``: ("audio", samples, their InputFormat), ("commit", event id), ("clear", event id), ("update",
        session, event id, "session" or the beta form's "transcription_session"), ("end",): the audio stops (the open turn is committed), ("event", event):
        sent as it is (an error the receiver found), in the order the client's events came."""
        events: list[dict] = []
        for action in actions:
            kind = action[0]
            try:
                if kind == "audio":
                    self._audio(self._resampled(action[1], action[2]), events)
                elif kind == "commit":
                    self._commit(action[1], events)
                elif kind == "clear":
                    self.item, self.prefix, self.outside = None, self.prefix[:0], 0
                    if self.detector is not None:
                        self.detector.reset()
                    events.append({"type": "input_audio_buffer.cleared"})
                elif kind == "update":
                    self._update(action[1], action[2], events, dialect=action[3])
                elif kind == "end":
                    if self.item is not None and self.item.samples:
                        self._close(events)
                elif kind == "event":
                    events.append(action[1])
            except EventError as exc:
                events.append(error_event(exc))
        if self.item is not None and self.item.fresh:
            self._decode(self.item, events)
        return events

    def _resampled(self, samples: np.ndarray, fmt: InputFormat) -> np.ndarray:
        """An append's samples at 16 kHz; the appends' format changes with a ``session.update`` naming another
        (the session takes it from the audio on: the receiver decoded them so)."""
        if fmt == self.resampling:
            return self.resampler.resample_chunk(samples)
        tail = self.resampler.resample_chunk(np.zeros(0, np.float32), last=True)
        self.resampler, self.resampling, self.config = _resampler(fmt), fmt, replace(self.config, format=fmt)
        return np.concatenate([tail, self.resampler.resample_chunk(samples)])

    def _update(self, session: object, event_id: str | None, events: list[dict], dialect: str) -> None:
        """A ``session.update`` (``dialect`` "session") or the beta form's ``transcription_session.update``
        (answered in its own form): the next turns use the new model and language (a turn open goes on as it
        began); a new turn detector follows the audio from here."""
        try:
            config = updated(self.config, session, self.transcriber.settings.choices)
            stream_engine(self.transcriber, config.params)  # the model loads, the language is one it knows
        except LiveError as exc:
            raise EventError(str(exc), param="session.audio.input.transcription.language", event_id=event_id) from None
        except EventError as exc:
            exc.event_id = event_id
            raise
        self.config, self.detected = config, None
        self.detector = self._detector()
        session = self.config.to_beta_json() if dialect == "transcription_session" else self.config.to_json()
        events.append({"type": f"{dialect}.updated", "session": session})  # as it is now: two updates, two sessions

    def _audio(self, audio: np.ndarray, events: list[dict]) -> None:
        if self.detector is None:
            self._into_item(audio, events)
            self.position += len(audio)
            return
        at = 0
        for turn in self.detector.feed(audio):
            cut = min(max(turn.sample - self.position, at), len(audio))
            self._route(audio[at:cut], events)
            at = cut
            if turn.kind == "started":
                self._start(turn.sample, events)
            elif self.item is not None:
                events.append({"type": "input_audio_buffer.speech_stopped", "item_id": self.item.id,
                               "audio_end_ms": _ms(turn.sample)})
                self._close(events)
        self._route(audio[at:], events)
        self.position += len(audio)

    def _route(self, audio: np.ndarray, events: list[dict]) -> None:
        if self.item is not None:
            self._into_item(audio, events)
        elif len(audio):  # outside a turn: kept as the next turn's prefix padding
            self.outside += len(audio)
            keep = int(self.config.turns.prefix_padding_ms * SAMPLE_RATE / 1000)
            self.prefix = np.concatenate([self.prefix, audio])[-keep:] if keep else self.prefix[:0]

    def _start(self, sample: int, events: list[dict]) -> None:
        if self.item is not None:  # a turn the client began (or a detector before a session.update): it goes on
            return
        self._new_item(_ms(sample - len(self.prefix)))
        events.append({"type": "input_audio_buffer.speech_started", "item_id": self.item.id,
                       "audio_start_ms": self.item.start_ms})
        prefix, self.prefix, self.outside = self.prefix, self.prefix[:0], 0
        self._into_item(prefix, events)

    def _new_item(self, start_ms: int) -> None:
        self.item = Item(f"item_{uuid.uuid4().hex[:20]}", start_ms)

    def _into_item(self, audio: np.ndarray, events: list[dict]) -> None:
        if not len(audio):
            return
        if self.item is None:
            self._new_item(_ms(self.position))
        item = self.item
        if item.live is None:
            # without a language set, the session's is the first turn's (its live stream detects it on its
            # first 2 s, ``StreamOptions.detect_s``), as /v1/live keeps its first update's: each turn's own
            # detection heard Chinese and Korean in bench/realtime.py's English talk (WER 0.431)
            language = self.config.params.language or self.detected
            item.live = open_stream(self.transcriber, self.config.params.model_copy(update={"language": language}))
        item.live.push(audio)  # all of it: an update decodes the first window, more waits
        item.samples += len(audio)
        item.fresh = True

    def _commit(self, event_id: str | None, events: list[dict]) -> None:
        """The client ends the turn. With server VAD and no turn open, the audio since the last turn (the VAD
        heard no speech in it) is committed as OpenAI's buffer would be: an item with an empty transcript."""
        item = self.item
        if item is None and self.outside >= MIN_COMMIT_S * SAMPLE_RATE:
            self._new_item(_ms(self.position - self.outside))
            item, self.item.samples, self.outside, self.prefix = self.item, self.outside, 0, self.prefix[:0]
        if item is None or item.samples < MIN_COMMIT_S * SAMPLE_RATE:
            held = (self.outside if item is None else item.samples) / SAMPLE_RATE
            raise EventError(f"buffer too small: at least {MIN_COMMIT_S * 1000:.0f} ms of audio are needed to commit, "
                             f"it holds {held * 1000:.0f} ms", code="input_audio_buffer_commit_empty", event_id=event_id)
        if self.detector is not None:
            self.detector.reset()
        self._close(events)

    def _close(self, events: list[dict]) -> None:
        """The current turn becomes an item: committed, then its last words and its whole transcript."""
        item, self.item = self.item, None
        previous, self.previous = self.previous, item.id
        events.append({"type": "input_audio_buffer.committed", "item_id": item.id, "previous_item_id": previous})
        events.append({"type": "conversation.item.added", "previous_item_id": previous, "item": _user_item(item.id, None)})
        if item.live is not None:
            self._send_words(item, item.live.finish(), events)
            self.detected = self.detected or (item.live.language if item.text else None)
        events.append({"type": "conversation.item.input_audio_transcription.completed", "item_id": item.id,
                       "content_index": 0, "transcript": item.text,
                       **({"logprobs": item.logprobs} if self.config.logprobs else {}),
                       "usage": {"type": "duration", "seconds": round(item.samples / SAMPLE_RATE, 3)}})
        events.append({"type": "conversation.item.done", "previous_item_id": previous, "item": _user_item(item.id, item.text)})

    def _decode(self, item: Item, events: list[dict]) -> None:
        item.fresh = False
        self._send_words(item, item.live.update(), events)

    def _send_words(self, item: Item, update: StreamUpdate, events: list[dict]) -> None:
        item.partial = update.partial.text
        words = "".join(w.text for w in update.confirmed.words)
        delta = words.lstrip() if not item.text else words
        if delta:
            item.text += delta
            event = {"type": "conversation.item.input_audio_transcription.delta", "item_id": item.id, "content_index": 0,
                     "delta": delta}
            if self.config.logprobs:
                event["logprobs"] = logprob_entries(update.confirmed.words, starts_text=not item.logprobs)
                item.logprobs += event["logprobs"]
            events.append(event)


def _resampler(fmt: InputFormat) -> soxr.ResampleStream:
    return soxr.ResampleStream(fmt.rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")


def _user_item(item_id: str, transcript: str | None) -> dict:
    """The conversation item a committed turn is (OpenAI's user message with its audio's transcript)."""
    return {"id": item_id, "object": "realtime.item", "type": "message", "role": "user", "status": "completed",
            "content": [{"type": "input_audio", "transcript": transcript}]}


def _ms(sample: int) -> int:
    return max(0, round(sample * 1000 / SAMPLE_RATE))


def error_event(exc: EventError) -> dict:
    return {"type": "error", "error": {"type": "invalid_request_error", "code": exc.code, "message": clip(str(exc)),
                                       "param": exc.param, "event_id": exc.event_id}}


async def end_with(ws: WebSocket, error: LiveError) -> None:
    """The session's last event, an error, then the close (``/v1/live``'s codes)."""
    kind = "server_error" if error.status >= 500 else "invalid_request_error"
    # a server event's own event_id is required (openai's RealtimeErrorEvent); error.event_id names a client's event
    await send_json(ws, {"event_id": f"event_{uuid.uuid4().hex[:20]}", "type": "error", "error": {
        "type": kind, "code": str(error.status), "message": clip(str(error)), "param": None, "event_id": None}})
    await close(ws, CLOSE_CODES.get(error.status, 1011))


# ------------------------------------------------------------------------------ the socket


# a client that reads none of its events blocks the session's sends; past this many of its events waiting
# behind them, the session reads no more of it (8 MiB session.updates flooded in so grew the server 700 MiB)
QUEUED_ACTIONS = 32


@dataclass
class ClientEvents:
    """What the receiver hands the session's loop: the client's events as ``Turns.handle``'s actions,
    and how the input ended."""

    actions: list[tuple] = field(default_factory=list)
    received_s: float = 0.0
    over_limit: bool = False
    gone: bool = False
    working: bool = False  # the model worker has actions of the session in hand
    error: LiveError | None = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    taken: asyncio.Event = field(default_factory=asyncio.Event)  # the session's loop took the actions


class RealtimeSession:
    """One socket: a receiver task turns client events into actions; this coroutine hands them to the
    model worker in order and sends the events they make."""

    def __init__(self, ws: WebSocket, worker: ModelWorker, transcriber: PipelinePool, slots: StreamSlots,
                 holder: object = None):
        self.ws, self.worker, self.transcriber, self.slots = ws, worker, transcriber, slots  # slots: counts the audio
        self.holder = holder if holder is not None else object()  # who holds the session's slot in ``slots``
        self.turns: Turns | None = None
        self.limits, self.max_audio_s = transcriber.settings.live, transcriber.settings.max_audio_s
        self.inbox = ClientEvents()
        self.session_id = f"sess_{uuid.uuid4().hex[:20]}"
        self.format: InputFormat | None = None  # the appends' format, as the receiver reads them
        self.events = 0

    async def run(self, turns: Turns) -> None:
        self.format, self.turns = turns.config.format, turns
        await self.send({"type": "session.created", "session": turns.config.to_json()})
        receiver = asyncio.create_task(self.receive())
        try:
            await self._work(turns)
        finally:
            receiver.cancel()
        box = self.inbox
        if box.error is not None:
            await end_with(self.ws, box.error)
        elif box.over_limit:
            await end_with(self.ws, LiveError(status=413, message=f"the session passed the limit of {self.max_audio_s:g} s of audio"))

    async def send(self, event: dict) -> None:
        if "session" in event:  # the session as the event left the model worker, with its id
            event = {**event, "session": {"id": self.session_id, **event["session"]}}
        self.events += 1
        await send_json(self.ws, {"event_id": f"event_{self.events}", **event})

    async def _work(self, turns: Turns) -> None:
        box = self.inbox
        while True:
            await box.changed.wait()
            box.changed.clear()
            if box.actions:
                actions, box.actions, box.working = box.actions, [], True
                box.taken.set()
                try:
                    events = await on_worker(self.worker, lambda: turns.handle(actions))
                finally:
                    box.working = False
                for event in events:
                    await self.send(event)
            if box.error is not None or box.gone or (box.over_limit and not box.actions):
                return

    async def receive(self) -> None:
        box, pacing = self.inbox, Pacing(self.limits.max_ahead_s, self.limits.max_frame_bytes)
        with receiving(box, "realtime session"):
            while not box.over_limit:
                while len(box.actions) >= QUEUED_ACTIONS:  # its events wait to be sent: read no more of it
                    box.taken.clear()
                    await box.taken.wait()
                message = await self._next(pacing)
                if message["type"] == "websocket.disconnect":
                    box.gone = True
                    return
                try:
                    action = self._action(message)
                except EventError as exc:
                    action = ("event", error_event(exc))
                if action[0] == "audio":
                    action = self._within_limit(action)
                    await pacing.hold(box.received_s, self.ws)
                box.actions.append(action)
                if box.over_limit:
                    box.actions.append(("end",))
                box.changed.set()

    async def _next(self, pacing: Pacing) -> dict:
        """The client's next message. A client waiting for its transcript is not idle; one between turns (none
        open, nothing in hand: a push-to-talk client) may wait ``session_idle_s`` for its next turn, and once it
        waited ``idle_timeout_s`` its slot goes to a new stream that finds every slot taken; otherwise no event
        for ``idle_timeout_s`` ends the session (408)."""
        box, limits = self.inbox, self.limits
        if pacing.early:
            return await pacing.next(self.ws, limits.idle_timeout_s, "event")  # read ahead: at once
        loop = asyncio.get_running_loop()
        receive = asyncio.ensure_future(self.ws.receive())
        quiet_since, told = loop.time(), None
        try:
            while True:
                busy = box.working or bool(box.actions)
                between = not busy and self.turns is not None and self.turns.item is None
                if between and told is None:
                    told = self.slots.between_turns(self.holder)
                elif not between and told is not None:
                    self.slots.turn_began(self.holder)
                    told = None
                waits = {receive} if told is None else {receive, asyncio.ensure_future(told.wait())}
                done, pending = await asyncio.wait(waits, timeout=limits.idle_timeout_s, return_when=asyncio.FIRST_COMPLETED)
                for waiter in pending - {receive}:
                    waiter.cancel()
                quiet = loop.time() - quiet_since
                if told is not None and told.is_set():  # the slot is another stream's now, whatever came
                    raise LiveError(status=408, message=f"no event for {quiet:.0f} s between turns, and another "
                                                        "stream needed the slot")
                if receive in done:
                    return receive.result()
                if busy:
                    quiet_since = loop.time()
                elif not between:
                    raise LiveError(status=408, message=f"no event for {limits.idle_timeout_s:g} s")
                elif quiet >= limits.session_idle_s:
                    raise LiveError(status=408, message=f"no event for {limits.session_idle_s:g} s between turns")
        finally:
            receive.cancel()
            if told is not None:
                self.slots.turn_began(self.holder)

    def _action(self, message: dict) -> tuple:
        """A client event as an action for ``Turns.handle`` (EventError for a bad one)."""
        text = message.get("text")
        if text is None:
            raise EventError("events are JSON text messages (audio travels base64 in input_audio_buffer.append)",
                             code="invalid_event")
        try:
            event = json.loads(text)
        except (json.JSONDecodeError, RecursionError):
            raise EventError(f"an event must be a JSON object, got {short_repr(text)}", code="invalid_json") from None
        if not isinstance(event, dict):
            raise EventError(f"an event must be a JSON object, got {short_repr(event)}", code="invalid_json")
        kind, event_id = event.get("type"), event.get("event_id") if isinstance(event.get("event_id"), str) else None
        try:
            if kind == "input_audio_buffer.append":
                return ("audio", self.format.decode(event.get("audio")), self.format)
            if kind == "input_audio_buffer.commit":
                return ("commit", event_id)
            if kind == "input_audio_buffer.clear":
                return ("clear", event_id)
            if kind in ("session.update", "transcription_session.update"):  # the latter: the API's beta form
                beta = kind == "transcription_session.update"
                session = from_beta(event.get("session")) if beta else event.get("session")
                # the appends after an update naming a format are in that format, from the receiver's reading on
                # (the model worker follows the audio: a model refused on the worker leaves the format changed)
                self.format = format_of(session) or self.format
                return ("update", session, event_id, "transcription_session" if beta else "session")
        except EventError as exc:
            exc.event_id = event_id
            raise
        raise EventError(f"unknown event type {short_repr(kind)} (this server takes: {', '.join(CLIENT_EVENTS)})",
                         code="invalid_event", param="type", event_id=event_id)

    def _within_limit(self, action: tuple) -> tuple:
        box = self.inbox
        samples, fmt = action[1], action[2]
        room = int(round((self.max_audio_s - box.received_s) * fmt.rate))
        if len(samples) > room:
            samples, box.over_limit = samples[: max(0, room)], True
        box.received_s += len(samples) / fmt.rate
        self.slots.heard_s += len(samples) / fmt.rate
        return ("audio", samples, fmt)


class RealtimeRoute:
    """The ``/v1/realtime`` handler; its sockets count against ``/v1/live``'s ``max_streams`` (``slots``)."""

    def __init__(self, transcriber: PipelinePool, worker: ModelWorker, slots: StreamSlots):
        self.transcriber, self.worker, self.slots = transcriber, worker, slots

    async def __call__(self, ws: WebSocket) -> None:
        await ws.accept()
        query = dict(ws.query_params)
        if query.get("intent", "transcription") != "transcription":
            await end_with(ws, LiveError(status=400, message="this server holds transcription sessions only: "
                                                              "connect with ?intent=transcription"))
            return
        if not self.slots.take():
            await end_with(ws, LiveError(status=503, message=f"too many live streams (at most {self.slots.limit}); "
                                                               "try again later"))
            return
        holder = object()
        try:
            await guarded(ws, lambda: self._session(ws, query.get("model"), holder), end_with, "realtime session")
        finally:
            self.slots.release(holder)
            await close(ws, 1000)

    async def _session(self, ws: WebSocket, model: str | None, holder: object) -> None:
        try:  # a model named on the URL is the transcription model (speaches reads it so too)
            config = checked(SessionConfig(model=model or ALIAS), self.transcriber.settings.choices)
        except EventError as exc:
            raise LiveError(status=400, message=str(exc)) from None
        turns = await opened(self.worker, lambda: Turns(self.transcriber, config), self.transcriber.pipeline_key(config.params))
        await RealtimeSession(ws, self.worker, self.transcriber, self.slots, holder).run(turns)


def add_realtime_route(app: FastAPI, transcriber: PipelinePool, worker: ModelWorker, slots: StreamSlots) -> None:
    app.add_api_websocket_route(REALTIME_PATH, RealtimeRoute(transcriber, worker, slots))
