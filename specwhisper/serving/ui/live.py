"""The web UI's "Live" tab: transcribe the microphone as it records (specwhisper.live.stream).

The page records the microphone itself (Web Audio, a few lines of JavaScript below) and keeps the
samples until the server takes them: a ``gr.Timer`` ticks every ``PIECE_S``, each tick takes every
sample recorded since the one before, pushes them and runs one update of the live engine (1-2 s
with Whisper base on a 2-core CPU; ticks while one runs are skipped, so the next takes more audio,
whisper_streaming's online mode). Gradio's own streaming microphone (``gr.Audio(streaming=True)``)
loses audio instead: it posts a 0.1 s piece every 0.1 s and the server keeps only the newest piece
posted while it was busy; measured on this 2-core CPU under load, 7.0 s of a 14 s recording
arrived even with a handler that only buffered, and the transcript was nonsense.

Confirmed words are shown as they are, the partial hypothesis after them in grey. Stopping takes
the last samples, decodes the rest, confirms the last hypothesis and offers the usual files. Live
updates use the engine the file tab's pipeline loaded and run on the page's model worker
(specwhisper.serving.worker) with the file tab's jobs: an update is short, so it runs inside a long
file's pass, between two of its batches, rather than after it.
"""

from __future__ import annotations

import base64
import binascii
import html
import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import gradio as gr
import numpy as np
import soxr

from specwhisper.results.transcript import Transcript, Word
from specwhisper.audio.loading import MIN_SOURCE_RATE, SAMPLE_RATE
from specwhisper.live.stream import LiveError, StreamingTranscriber, StreamUpdate
from specwhisper.pipeline.writers import write_outputs
from specwhisper.serving.params import RequestError, TranscribeParams, parse_params
from specwhisper.messages import one_line
from specwhisper.serving.service import PipelinePool
from specwhisper.serving.worker import ModelWorker, QueueFull

log = logging.getLogger(__name__)
PIECE_S = 0.5  # the page hands its samples over this often, when the update before has ended
LIVE_FORMATS = ["txt", "srt", "vtt", "json", "tsv"]
PARTIAL_STYLE = "color: var(--body-text-color-subdued, #9ca3af)"
# With the language left to detect, the first update waits for this much audio: Whisper detects it
# once, on the first decode, and on 0.3 s of a browser recording it took English speech for Korean
# (and then hallucinated at 4.5 s per update).
DETECT_AFTER_S = 2.0

# The page's recorder: ``window.specwhisperLive`` holds the microphone's samples (channel 0, the
# AudioContext's rate) until ``take()`` hands them over as "rate:base64 of int16 little-endian"
# ("error:message" when the microphone could not be opened).
RECORDER_JS = """
const live = (window.specwhisperLive ??= {
  chunks: [], rate: 0, error: null, parts: null,
  async start() {
    this.stop(); this.chunks = []; this.error = null;
    try {
      const stream = await navigator.mediaDevices.getUserMedia({audio: true});
      const context = new AudioContext();
      const source = context.createMediaStreamSource(stream);
      const node = context.createScriptProcessor(4096, 1, 1);
      node.onaudioprocess = (e) => { if (this.parts) this.chunks.push(new Float32Array(e.inputBuffer.getChannelData(0))); };
      source.connect(node); node.connect(context.destination);
      this.rate = context.sampleRate; this.parts = {stream, context, node};
    } catch (e) { this.error = `the microphone could not be opened (${e.name || e})`; }
  },
  stop() {
    if (!this.parts) return;
    this.parts.node.disconnect(); this.parts.stream.getTracks().forEach((t) => t.stop()); this.parts.context.close();
    this.parts = null;
  },
  take() {
    if (this.error) return "error:" + this.error;
    const n = this.chunks.reduce((a, c) => a + c.length, 0), pcm = new Int16Array(n);
    let o = 0;
    for (const c of this.chunks) for (let i = 0; i < c.length; i++) pcm[o++] = Math.max(-32768, Math.min(32767, Math.round(c[i] * 32767)));
    this.chunks = [];
    const bytes = new Uint8Array(pcm.buffer);
    let text = "";
    for (let i = 0; i < bytes.length; i += 0x8000) text += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    return this.rate + ":" + btoa(text);
  },
});
"""
START_JS = "async (...inputs) => {" + RECORDER_JS + "await live.start(); return inputs; }"
TAKE_JS = "(payload, ...inputs) => {" + RECORDER_JS + "return [live.take(), ...inputs]; }"
STOP_JS = "(payload, ...inputs) => {" + RECORDER_JS + "live.stop(); return [live.take(), ...inputs]; }"
# Record opens the microphone before the server admits the recording (the browser asks for it on the
# click): a refused Record (the server's limit, a bad option) closes it again.
REFUSED_JS = "() => {" + RECORDER_JS + "live.stop(); live.chunks = []; }"


class PieceResampler:
    """The page's pieces (int16 or float, mono, the AudioContext's rate) to 16 kHz float32 with
    soxr's HQ filter as ``specwhisper.audio.loading`` uses, streamed across pieces (resampling each
    piece on its own would click at every piece boundary)."""

    def __init__(self):
        self.rate: int | None = None
        self.stream: soxr.ResampleStream | None = None

    def __call__(self, rate: int, samples: np.ndarray) -> np.ndarray:
        samples = np.asarray(samples)
        if samples.ndim != 1:
            raise LiveError(f"microphone audio must be mono samples (one dimension), got shape {samples.shape}")
        if not samples.size:
            return np.zeros(0, np.float32)
        if np.issubdtype(samples.dtype, np.integer):
            audio = samples.astype(np.float32) / float(np.iinfo(samples.dtype).max)
        else:
            audio = samples.astype(np.float32)
        if not np.isfinite(audio).all():
            raise LiveError("the microphone sent NaN or infinite samples")
        if self.rate is None:
            if int(rate) < MIN_SOURCE_RATE:
                raise LiveError(f"microphone sample rate {rate} Hz is too low to hold speech")
            self.rate = int(rate)
            self.stream = None if self.rate == SAMPLE_RATE else soxr.ResampleStream(self.rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        elif int(rate) != self.rate:
            raise LiveError(f"the microphone changed its sample rate from {self.rate} to {rate} Hz during the recording")
        return audio if self.stream is None else self.stream.resample_chunk(audio)

    def flush(self) -> np.ndarray:
        """The samples the filter still holds back (its delay), at the end of the recording."""
        return self.stream.resample_chunk(np.zeros(0, np.float32), last=True) if self.stream is not None else np.zeros(0, np.float32)


@dataclass
class LiveView:
    """What the page shows of a recording."""

    confirmed: str = ""
    partial: str = ""
    status: str = "Waiting for audio"

    def html(self) -> str:
        """Confirmed text plain, partial text grey, the status below (all escaped)."""
        return (f'<div id="live-words"><span class="live-confirmed">{html.escape(self.confirmed)}</span>'
                f'<span class="live-partial" style="{PARTIAL_STYLE}">{html.escape(self.partial)}</span></div>'
                f'<div class="live-status" style="{PARTIAL_STYLE}; font-size: 0.85em; margin-top: 0.5em">{html.escape(self.status)}</div>')


class LiveSession:
    """One recording: ``take`` the samples each tick hands over (and run an update), ``stop`` at the end."""

    def __init__(self, service: PipelinePool, params: TranscribeParams, max_seconds: float, worker: ModelWorker):
        self.service = service
        self.worker = worker
        self.params = params
        self.max_seconds = max_seconds
        self.resample = PieceResampler()
        self.lock = threading.Lock()  # one update at a time: a tick's and the stop's
        self.pending: list[np.ndarray] = []  # 16 kHz audio not pushed yet
        self.stopped = False
        self.live: StreamingTranscriber | None = None  # made by the first update, on the model worker
        self.words: list[Word] = []
        self.view = LiveView()
        self.received_s = 0.0
        self.updates = 0
        self.compute_s = 0.0

    def take(self, payload: str | None, update: bool = True) -> None:
        """Add the samples a tick handed over and (``update``) run an update on all audio not yet decoded."""
        with self.lock:
            if self.stopped:
                return
            audio = self.resample(*decode_payload(payload))
            self.received_s += len(audio) / SAMPLE_RATE
            if self.received_s > self.max_seconds:
                raise LiveError(f"the recording passed the limit of {self.max_seconds:.0f} s; stop and start a new one")
            if audio.size:
                self.pending.append(audio)
            detecting = self.live is None and self.params.language is None and self.received_s < DETECT_AFTER_S
            if update and self.pending and not detecting:
                self._step(np.concatenate(self.pending), final=False)
                self.pending.clear()
            self.view.status = self._status("Listening")

    def _step(self, audio: np.ndarray, final: bool) -> StreamUpdate | None:
        """Push ``audio`` and run an update (``final``: finish the stream) on the model worker: a short job
        (the first, which may load the model, only while a pass of that model runs)."""
        def run(token) -> StreamUpdate | None:
            if self.live is None:
                if final and not audio.size:
                    return None
                self.live = self.service.open_stream(self.params)
            self.live.push(audio)
            return self.live.finish() if final else self.live.update()

        model = self.service.pipeline_key(self.params) if self.live is None else None
        try:
            update = self.worker.submit(run, seconds=0.0, model=model)[0].result()
        except QueueFull as exc:
            raise LiveError(f"the server is busy ({exc}); stop and try again later", status=503) from None
        if update is None:
            return None
        self.updates += 1
        self.compute_s += update.seconds
        self.words.extend(update.confirmed.words)
        self.view.confirmed = "".join(w.text for w in self.words).strip()
        self.view.partial = update.partial.text if self.view.confirmed else update.partial.text.lstrip()
        return update

    def _status(self, what: str) -> str:
        spent = f", {self.compute_s / self.updates:.2f} s each" if self.updates else ""
        language = f", language {self.live.language}" if self.live is not None and self.live.language else ""
        return f"{what}: {self.received_s:.1f} s heard, {self.updates} updates{spent}{language}"

    def stop(self, payload: str | None) -> Transcript | None:
        """End the recording with the last samples: decode the rest and confirm the last hypothesis.
        None when no audio arrived."""
        self.take(payload, update=False)
        with self.lock:
            self.stopped = True
            tail = self.resample.flush()
            self.received_s += len(tail) / SAMPLE_RATE
            self._step(np.concatenate([*self.pending, tail]), final=True)
            self.pending.clear()
            self.view.partial = ""
            self.view.status = self._status("Done")
        if self.live is None:
            return None
        return self.live.transcript(self.compute_s, source="microphone")


def decode_payload(payload: str | None) -> tuple[int, np.ndarray]:
    """The page's "rate:base64" (int16 little-endian samples) as (rate, samples)."""
    if not payload:
        return SAMPLE_RATE, np.zeros(0, np.int16)
    head, _, body = payload.partition(":")
    if head == "error":
        raise LiveError(body)
    try:
        rate, raw = int(head), base64.b64decode(body, validate=True)
    except (ValueError, binascii.Error):
        raise LiveError(f"the page sent audio the server cannot read ({payload[:40]!r})") from None
    if len(raw) % 2:
        raise LiveError(f"the page sent {len(raw)} bytes of 16-bit audio (an odd count)")
    return rate, np.frombuffer(raw, dtype="<i2")


def encode_payload(rate: int, samples: np.ndarray) -> str:
    """What the page's ``take()`` sends (for tests and scripted clients)."""
    return f"{rate}:" + base64.b64encode(np.asarray(samples, dtype="<i2").tobytes()).decode()


@dataclass
class LiveSlot:
    """Per browser session (a ``gr.State``): the current recording, replaced by each new one."""

    session: LiveSession | None = None


def live_error(exc: BaseException) -> gr.Error:
    return gr.Error(one_line(exc), duration=None, print_exception=False)


@dataclass
class LiveHandlers:
    """The tab's callbacks (plain functions of their widgets' values, so tests can call them)."""

    service: PipelinePool
    new_output_dir: Callable[[], Path]  # a fresh folder for one recording's download files
    worker: ModelWorker  # the page's: the file tab's jobs run on it too
    # Recordings running, by session, with when each last handed audio over: at most
    # ``settings.live.max_streams`` (the WebSocket's limit: each re-decodes every second or two on the
    # one model); one whose page stopped ticking (a closed tab) counts until ``idle_timeout_s`` passes.
    _running: dict[int, float] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _admit(self, session: LiveSession) -> None:
        limits, now = self.service.settings.live, time.monotonic()
        with self._lock:
            for key, seen in list(self._running.items()):
                if now - seen > limits.idle_timeout_s:
                    del self._running[key]
            if len(self._running) >= limits.max_streams:
                raise gr.Error(f"{len(self._running)} live recordings are running, the most this server takes "
                               f"({limits.max_streams}); try again when one stops", duration=None, print_exception=False)
            self._running[id(session)] = now

    def _seen(self, session: LiveSession) -> bool:
        """Note a tick of ``session``; False when it was dropped for being idle."""
        with self._lock:
            if id(session) not in self._running:
                return False
            self._running[id(session)] = time.monotonic()
            return True

    def _release(self, session: LiveSession | None) -> None:
        with self._lock:
            self._running.pop(id(session), None)

    def start(self, slot: LiveSlot, model: str, language: str, task: str):
        """A new recording starts a new stream (and ends this page's last one); the timer starts
        taking its audio; Record waits until Stop."""
        try:
            params = parse_params({"model": model, "language": language, "task": task}, self.service.settings.choices)
        except RequestError as exc:
            raise live_error(exc) from None
        self._release(slot.session)
        session = LiveSession(self.service, params, self.service.settings.max_audio_s, self.worker)
        self._admit(session)
        slot.session = session
        return session.view.html(), gr.Timer(active=True), None, gr.Button("Recording…", interactive=False)

    def tick(self, payload: str | None, slot: LiveSlot):
        """The audio recorded since the last tick: push it, run an update, show the text."""
        session = slot.session
        if session is None or session.stopped:
            return gr.skip()
        try:
            if not self._seen(session):
                raise LiveError(f"no audio arrived for {self.service.settings.live.idle_timeout_s:g} s")
            session.take(payload)
        except LiveError as exc:
            session.stopped = True  # one message; the ticks still queued end quietly
            session.view.status = f"Stopped: {one_line(exc)}"
            self._release(session)
            raise live_error(exc) from None
        except Exception as exc:
            raise internal_error(exc) from None
        return session.view.html()

    def stop(self, payload: str | None, slot: LiveSlot):
        """End of the recording: the final text and its files; Record again."""
        session = slot.session
        record = gr.Button("Record", interactive=True)
        if session is None:
            return LiveView(status="Nothing is recording").html(), gr.Timer(active=False), None, record
        self._release(session)
        if session.stopped:  # stopped already, or by an error
            return session.view.html(), gr.Timer(active=False), None, record
        try:
            transcript = session.stop(payload)
        except LiveError as exc:
            raise live_error(exc) from None
        except Exception as exc:
            raise internal_error(exc) from None
        if transcript is None:
            return session.view.html(), gr.Timer(active=False), None, record
        files = write_outputs(transcript, self.new_output_dir(), "recording", LIVE_FORMATS)
        return session.view.html(), gr.Timer(active=False), [str(p) for p in files], record


def internal_error(exc: BaseException) -> gr.Error:
    log.exception("live transcription failed")
    return gr.Error(f"internal error: {one_line(exc)}", duration=None, print_exception=False)


def build_live_tab(service: PipelinePool, languages: list[tuple[str, str]], new_output_dir: Callable[[], Path],
                   worker: ModelWorker) -> None:
    """The tab's widgets and events, inside the caller's ``gr.Blocks`` (a ``gr.Tab`` is open)."""
    choices = service.settings.choices
    handlers = LiveHandlers(service, new_output_dir, worker)
    slot = gr.State(LiveSlot())
    payload = gr.Textbox(visible=False)  # the page's samples travel in it (``take()``)
    timer = gr.Timer(PIECE_S, active=False)
    with gr.Row():
        with gr.Column(scale=1):
            with gr.Row():
                record = gr.Button("Record", variant="primary", elem_id="live-record")
                stop = gr.Button("Stop", elem_id="live-stop")
            model = gr.Dropdown(list(choices.models), value=choices.models[0], label="Model")
            language = gr.Dropdown(languages, value="auto", label="Language")
            task = gr.Radio(["transcribe", "translate"], value="transcribe", label="Task")
        with gr.Column(scale=2):
            text = gr.HTML(LiveView(status="Press Record to start").html(), label="Live transcript", elem_id="live-text")
            files = gr.File(label="Downloads", file_count="multiple", interactive=False, elem_id="live-downloads")
    record.click(handlers.start, [slot, model, language, task], [text, timer, files, record], js=START_JS,
                 concurrency_limit=None, show_progress="hidden").failure(None, None, None, js=REFUSED_JS)
    timer.tick(handlers.tick, [payload, slot], [text], js=TAKE_JS, trigger_mode="once", concurrency_limit=None,
               show_progress="hidden")
    stop.click(handlers.stop, [payload, slot], [text, timer, files, record], js=STOP_JS, concurrency_limit=None,
               show_progress="minimal")
