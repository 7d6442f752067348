"""What every HTTP route that takes an audio upload shares (``POST /``, OpenAI's ``/v1/audio/*``):

* the request's own file in the spool folder, removed when the request ends, whatever its outcome;
* its body received as it arrives, refused as soon as it passes the size limit (413) or when it has not
  arrived within ``body_timeout_s`` (408), both closing the connection;
* the audio's length checked from its container before it is decoded;
* the transcription run on the model worker (503 with Retry-After when its queue is full), in one pass
  with the uploads of the same model and options waiting there, dropped or stopped at its pass's next
  progress report when the client goes away (a pass of several: when all of its clients have gone);
* all of it within ``request_timeout_s`` of the request's arrival (504);
* every failure turned into one :class:`Refusal`, which each contract renders in its own error body.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, TypeVar

from fastapi import Request
from fastapi.responses import Response, StreamingResponse
from starlette.requests import ClientDisconnect

from specwhisper.audio.loading import AudioError, check_length
from specwhisper.pipeline.core import BETWEEN_BATCHES
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.results.transcript import Segment, Transcript
from specwhisper.serving.worker import Batching, Cancelled, CancelToken, ModelWorker, QueueFull
from specwhisper.serving.params import RequestError, TranscribeParams
from specwhisper.serving.spool import Spool
from specwhisper.serving.http.config import RequestLimits

T = TypeVar("T")

log = logging.getLogger(__name__)
# an upload that joined another's pass may hold this much more than its container claimed (x 1.1 + 2 s), or it is
# transcribed alone after the pass: a pass's decoded audio stays bounded by the first's plus --batch-audio's
CLAIM_SLACK = (1.1, 2.0)


@dataclass(frozen=True)
class StreamEvents:
    """How a streamed answer words its events (``Uploads.stream``): each the bytes of one server-sent event."""

    segments: Callable[[list[Segment]], bytes]
    done: Callable[[Transcript], bytes]
    error: Callable[[Refusal], bytes]


class Refusal(Exception):
    """A request answered with an error; ``close`` drops the connection (its body was not read). ``param``
    and ``code`` name the field at fault and a machine-readable reason where a contract has them (OpenAI's)."""

    def __init__(self, status: int, message: str, close: bool = False, retry_after_s: int | None = None,
                 param: str | None = None, code: str | None = None):
        super().__init__(message)
        self.status = status
        self.close = close
        self.retry_after_s = retry_after_s
        self.param = param
        self.code = code

    def headers(self) -> dict[str, str]:
        headers = {"connection": "close"} if self.close else {}
        if self.retry_after_s is not None:
            headers["retry-after"] = str(self.retry_after_s)
        return headers


async def receive_body(request: Request, sink: BinaryIO, max_bytes: int, timeout_s: float) -> int:
    """Hand the body to ``sink.write`` as it arrives; refuse it past ``max_bytes`` or ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > max_bytes:  # h11 has checked it is a number
        raise Refusal(413, f"the request body is larger than {max_bytes} bytes", close=True)
    size = 0
    try:
        async with asyncio.timeout(timeout_s):
            async for chunk in request.stream():
                size += len(chunk)
                if size > max_bytes:
                    raise Refusal(413, f"the request body is larger than {max_bytes} bytes", close=True)
                sink.write(chunk)
    except TimeoutError:
        raise Refusal(408, f"the request body did not arrive within {timeout_s:g} s", close=True) from None
    return size


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def as_refusal(exc: BaseException, limits: RequestLimits) -> Refusal:
    """The answer to a request that failed with ``exc`` (called in its ``except`` block: an unexpected
    failure is logged with its traceback and answered in one line)."""
    if isinstance(exc, Refusal):
        return exc
    if isinstance(exc, RequestError):
        return Refusal(exc.status, str(exc))
    if isinstance(exc, TimeoutError):  # before OSError, its base class
        return Refusal(504, f"the request took longer than its deadline of {limits.request_timeout_s:g} s")
    if isinstance(exc, OSError):  # the spool folder is full or gone
        log.error("cannot store an upload: %s", exc)
        return Refusal(503, f"the server cannot store the upload now ({exc.strerror or exc})", close=True,
                       retry_after_s=limits.retry_after_s)
    if isinstance(exc, (ClientDisconnect, Cancelled)):
        return Refusal(499, "the client went away")
    log.exception("request failed")
    return Refusal(500, f"internal error: {exc}")


class Uploads:
    """The shared steps above, for routes built on them; see the module's docstring."""

    def __init__(self, endpoint: Endpoint, worker: ModelWorker, spool: Spool, limits: RequestLimits):
        self.endpoint, self.worker, self.spool, self.limits = endpoint, worker, spool, limits

    async def answer(self, handle: Callable[[Path], Awaitable[Response]], refuse: Callable[[Refusal], Response]) -> Response:
        """``await handle(path)`` with a fresh spool file, within the deadline; a failure is answered by ``refuse``."""
        path: Path | None = None
        try:
            path = self.spool.new_path()
            async with asyncio.timeout(self.limits.request_timeout_s):
                return await handle(path)
        except (Exception, Cancelled) as exc:  # noqa: BLE001 - an answer, never a traceback to the client
            return refuse(as_refusal(exc, self.limits))
        finally:
            if path is not None:
                path.unlink(missing_ok=True)

    async def on_worker(self, request: Request, job: Callable[[], T]) -> T:
        """``job()`` on the model worker, after the passes ahead of it, within the deadline: its result, or its
        failure as a :class:`Refusal` (the queue is full: 503, the client went away: 499, the deadline: 504, the
        job's :class:`RequestError`: its status)."""
        try:
            async with asyncio.timeout(self.limits.request_timeout_s):
                return await self._wait(request, lambda: self.worker.submit(lambda token: job()))
        except (Exception, Cancelled) as exc:  # noqa: BLE001 - an answer, never a traceback to the client
            raise as_refusal(exc, self.limits) from None

    async def receive(self, request: Request, sink: BinaryIO, max_bytes: int) -> int:
        return await receive_body(request, sink, max_bytes, self.limits.body_timeout_s)

    async def transcribe(self, request: Request, path: Path, name: str, params: TranscribeParams) -> Transcript:
        """Check the length of the audio in ``path`` (``name`` in messages), then transcribe it on the model
        worker, in one pass with the uploads of the same model and options waiting there (``Batching``);
        a :class:`RequestError` when it fails. It is dropped from the queue, or its pass stops at its next
        progress report once none of its requesters is left, when the client goes away or the deadline
        passes."""
        seconds = await self.length(path, name)
        endpoint = self.endpoint

        def run_many(payloads: list[tuple[Path, str, float]], check: Callable[..., None]) -> list[Transcript | RequestError]:
            if len(payloads) > 1:
                log.info("%d uploads in one pass", len(payloads))
            # the first holds what the deployment allows; one that joined it, what it claimed (a liar runs alone)
            most_s = [math.inf] + [s * CLAIM_SLACK[0] + CLAIM_SLACK[1] for _, _, s in payloads[1:]]
            return endpoint.run_many([(p, n) for p, n, _ in payloads], params,
                                     lambda stage, fraction: check(stage in BETWEEN_BATCHES), most_s)

        batching = Batching(endpoint.pass_key(params), (path, name, seconds), seconds, run_many, endpoint.transcriber.pipeline_key(params))
        return await self._wait(request, lambda: self.worker.submit_batching(batching))  # a RequestError is raised

    async def stream(self, request: Request, path: Path, name: str, params: TranscribeParams,
                     events: StreamEvents) -> StreamingResponse:
        """Check and transcribe as ``transcribe`` does, alone on the model worker, and answer with server-sent
        events: ``events.segments`` for each run of segments as the transcript makes them final (in order),
        then ``events.done`` with the transcript, or ``events.error`` for a failure once the answer began. A
        failure before the audio is decoded (the length, the queue, bad audio) is raised, as ``transcribe``'s."""
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        seconds = await self.length(path, name)
        queue: asyncio.Queue[list[Segment]] = asyncio.Queue()
        decoded = asyncio.Event()  # the first progress report comes once the audio is decoded: the upload may go

        def job(token: CancelToken) -> Transcript:
            def progress(stage: str, fraction: float) -> None:
                loop.call_soon_threadsafe(decoded.set)
                token.check(stage in BETWEEN_BATCHES)

            return self.endpoint.run(path, params, progress, name,
                                     on_segments=lambda segments: loop.call_soon_threadsafe(queue.put_nowait, segments))

        answer, token = await self._submit(
            request, lambda: self.worker.submit(job, seconds, self.endpoint.transcriber.pipeline_key(params)), decoded)
        if answer.done() and not decoded.is_set():
            answer.result()  # the failure (a RequestError) before any audio was decoded

        async def body():
            get: asyncio.Future | None = None
            try:
                async with asyncio.timeout(max(0.0, self.limits.request_timeout_s - (loop.time() - t0))):
                    while not answer.done() or not queue.empty():
                        get = asyncio.ensure_future(queue.get())
                        await asyncio.wait({get, answer}, return_when=asyncio.FIRST_COMPLETED)
                        if get.done():
                            yield events.segments(get.result())
                        else:
                            get.cancel()
                    yield events.done(answer.result())
            except (Exception, Cancelled) as exc:  # noqa: BLE001 - the stream ends with an error event
                yield events.error(as_refusal(exc, self.limits))
            finally:
                if not answer.done():  # the client went away (the event could not be sent) or the deadline passed
                    token.cancel()
                    answer.cancel()
                if get is not None and not get.done():  # a pending get left behind is logged as destroyed when collected
                    get.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await get

        return StreamingResponse(body(), media_type="text/event-stream", headers={"cache-control": "no-cache"})

    async def length(self, path: Path, name: str) -> float:
        """The seconds of audio the file's container claims (``math.inf`` when it does not say), after
        ``check_length`` refused what it can before decoding."""
        try:
            claimed = await asyncio.to_thread(check_length, path, self.endpoint.transcriber.settings.max_audio_s, name)
        except AudioError as exc:
            raise RequestError(str(exc)) from None
        return math.inf if claimed is None else claimed

    async def _wait(self, request: Request, submit: Callable[[], tuple[Future, CancelToken]]):
        answer, _ = await self._submit(request, submit)
        return answer.result()

    async def _submit(self, request: Request, submit: Callable[[], tuple[Future, CancelToken]],
                      started: asyncio.Event | None = None) -> tuple[asyncio.Future, CancelToken]:
        """``submit()`` a job to the model worker and wait until it is done (or, with ``started``, until that is
        set); the job is dropped, or stops at its next progress report, when the client goes away (499) or the
        deadline passes (raised on its way out)."""
        try:
            future, token = submit()
        except QueueFull as exc:
            raise Refusal(503, f"the server is busy ({exc}); try again later", retry_after_s=self.limits.retry_after_s) from None
        answer = asyncio.wrap_future(future)
        waits = {answer, asyncio.ensure_future(_until_disconnected(request))}
        if started is not None:
            waits.add(asyncio.ensure_future(started.wait()))
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits - {answer}:
                w.cancel()
            left = not answer.done() and not (started is not None and started.is_set())
            if left:  # the client went away, or the deadline passed
                token.cancel()
                answer.cancel()
        if left:
            raise Refusal(499, "the client went away")
        return answer, token
