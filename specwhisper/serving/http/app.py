"""The endpoint as an ASGI application (FastAPI), the routes and contract of ``python -m specwhisper.serving.http.serve``:

* ``POST /`` (or ``/predict``) with ``Content-Type: application/json``:
  ``{"inputs": "<base64 audio>", "parameters": {...}}``, as Inference Endpoints send it;
* ``POST /`` with any other content type: the body is the audio file, parameters come from the
  query string (``/?language=en&diarize=true&formats=srt,vtt``);
* ``GET /health``: ``{"status": "ok"}``;
* ``/v1/live``: live transcription over a WebSocket (:mod:`specwhisper.serving.http.live_ws`).

Every answer is JSON; every error is ``{"error": "<one line>", "status": N}`` with that HTTP status.
A request body goes to its own file in the spool folder as it arrives (refused as soon as it passes
the size limit, or when it has not arrived within ``body_timeout_s``) and is removed when the request
ends. A JSON body is parsed one at a time, its base64 decoded into the file a slice at a time. A file
whose container claims more audio than allowed is refused before it is decoded. Then the request
waits for the model worker (503 with Retry-After when its queue is full) until ``request_timeout_s``
after it came in (504; the job is dropped, or stopped at its next progress report, as it is when the
client goes away).
"""

from __future__ import annotations

import asyncio
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from specwhisper.audio.loading import AudioError, check_length
from specwhisper.serving.endpoint.contract import Endpoint, base64_to_file
from specwhisper.serving.http.live_ws import add_live_route
from specwhisper.serving.http.worker import Cancelled, ModelWorker, QueueFull
from specwhisper.serving.params import RequestError, TranscribeParams, clip
from specwhisper.serving.spool import Spool

log = logging.getLogger(__name__)
POST_PATHS = ("/", "/predict")
ROUTES_HINT = "POST / with audio, GET /health, WebSocket /v1/live"
JSON_OVERHEAD = 1 << 20  # room for the JSON around a base64 upload


@dataclass(frozen=True)
class RequestLimits:
    max_upload_bytes: int = 200 * 2**20  # the audio file (raw body, or decoded from base64)
    body_timeout_s: float = 60.0  # to receive the whole body
    request_timeout_s: float = 3600.0  # from the head's arrival to the answer
    retry_after_s: int = 10  # told to a client the full queue turns away

    def __post_init__(self) -> None:
        if self.max_upload_bytes < 1 or self.body_timeout_s <= 0 or self.request_timeout_s <= 0 or self.retry_after_s < 0:
            raise ValueError(f"bad request limits: {self}")

    @property
    def max_json_bytes(self) -> int:
        return self.max_upload_bytes * 4 // 3 + JSON_OVERHEAD


class Refusal(Exception):
    """A request answered with an error; ``close`` drops the connection (its body was not read)."""

    def __init__(self, status: int, message: str, close: bool = False, retry_after_s: int | None = None):
        super().__init__(message)
        self.status = status
        self.close = close
        self.retry_after_s = retry_after_s


def error_response(status: int, message: str, close: bool = False, retry_after_s: int | None = None) -> JSONResponse:
    headers = {"connection": "close"} if close else {}
    if retry_after_s is not None:
        headers["retry-after"] = str(retry_after_s)
    return JSONResponse({"error": clip(message), "status": status}, status_code=status, headers=headers)


def query_parameters(query: str) -> dict:
    """``a=1&formats=srt,vtt`` -> {"a": "1", "formats": ["srt", "vtt"]} (pydantic converts the strings)."""
    params: dict = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        params[key] = [f for v in values for f in v.split(",") if f] if key == "formats" else values[-1]
    return params


async def receive_body(request: Request, path: Path, max_bytes: int, timeout_s: float) -> int:
    """Write the body to ``path`` as it arrives; refuse it past ``max_bytes`` or ``timeout_s``."""
    declared = request.headers.get("content-length")
    if declared is not None and int(declared) > max_bytes:  # h11 has checked it is a number
        raise Refusal(413, f"the request body is larger than {max_bytes} bytes", close=True)
    size = 0
    try:
        with path.open("wb") as f:
            async with asyncio.timeout(timeout_s):
                async for chunk in request.stream():
                    size += len(chunk)
                    if size > max_bytes:
                        raise Refusal(413, f"the request body is larger than {max_bytes} bytes", close=True)
                    f.write(chunk)
    except TimeoutError:
        raise Refusal(408, f"the request body did not arrive within {timeout_s:g} s", close=True) from None
    return size


def _load_json(path: Path) -> object:
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RequestError("the body is not valid JSON (not UTF-8)") from None
    del raw  # the text alone, then the parsed value: about twice the body at the peak
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RequestError(f"the body is not valid JSON ({exc})") from None
    except RecursionError:
        raise RequestError("the JSON body is nested too deeply") from None


def json_upload(path: Path, endpoint: Endpoint, max_upload_bytes: int) -> TranscribeParams:
    """Parse the JSON request in ``path``, check it, and replace the file by the audio it carries."""
    data = _load_json(path)
    params = endpoint.parse(data)
    inputs = data.get("inputs")
    if inputs is None:
        raise RequestError("inputs: missing (send the audio file as raw bytes or a base64 string)")
    if not isinstance(inputs, str):
        raise RequestError(f"inputs: expected a base64 string, got {type(inputs).__name__}")
    data.clear()  # the string stays alive only in `inputs`
    with path.open("wb") as f:
        if not base64_to_file(inputs, f, max_upload_bytes):
            raise RequestError("inputs: the upload is empty (0 bytes)")
    return params


async def _until_disconnected(request: Request) -> None:
    while (await request.receive())["type"] != "http.disconnect":
        pass


def create_app(endpoint: Endpoint, worker: ModelWorker, spool: Spool, limits: RequestLimits) -> FastAPI:
    app = FastAPI(title="specwhisper", docs_url=None, redoc_url=None, openapi_url=None)
    json_turn = asyncio.Lock()  # one JSON body in memory at a time
    max_audio_s = endpoint.transcriber.settings.max_audio_s

    async def http_error(request: Request, exc: HTTPException) -> JSONResponse:
        if exc.status_code == 404:
            return error_response(404, f"no such path '{request.url.path}' ({ROUTES_HINT})")
        if exc.status_code == 405:
            return error_response(405, f"{request.method} is not allowed on {request.url.path} ({ROUTES_HINT})")
        return error_response(exc.status_code, str(exc.detail))

    app.add_exception_handler(HTTPException, http_error)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def upload(request: Request, path: Path) -> TranscribeParams:
        ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        is_json = ctype == "application/json"
        max_bytes = limits.max_json_bytes if is_json else limits.max_upload_bytes
        size = await receive_body(request, path, max_bytes, limits.body_timeout_s)
        if is_json:
            async with json_turn:
                return await asyncio.to_thread(json_upload, path, endpoint, limits.max_upload_bytes)
        params = endpoint.parse({"parameters": query_parameters(request.url.query)})
        if size == 0:
            raise RequestError("inputs: the upload is empty (0 bytes)")
        return params

    async def transcribe(request: Request, path: Path, params: TranscribeParams) -> dict:
        try:
            await asyncio.to_thread(check_length, path, max_audio_s, "inputs")
        except AudioError as exc:
            raise RequestError(str(exc)) from None

        def job(token) -> dict:
            return endpoint.transcribe(path, params, progress=lambda stage, fraction: token.check())

        try:
            future, token = worker.submit(job)
        except QueueFull as exc:
            raise Refusal(503, f"the server is busy ({exc}); try again later", retry_after_s=limits.retry_after_s) from None
        answer = asyncio.wrap_future(future)
        gone = asyncio.ensure_future(_until_disconnected(request))
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not answer.done():
                token.cancel()
                answer.cancel()
        if not answer.done():
            raise Refusal(499, "the client went away")
        return answer.result()

    async def predict(request: Request) -> JSONResponse:
        path: Path | None = None
        try:
            path = spool.new_path()
            async with asyncio.timeout(limits.request_timeout_s):
                result = await transcribe(request, path, await upload(request, path))
            return JSONResponse(result, status_code=int(result.get("status", 400)) if "error" in result else 200)
        except Refusal as exc:
            return error_response(exc.status, str(exc), close=exc.close, retry_after_s=exc.retry_after_s)
        except RequestError as exc:
            return error_response(exc.status, str(exc))
        except TimeoutError:  # before OSError, its base class
            return error_response(504, f"the request took longer than its deadline of {limits.request_timeout_s:g} s")
        except OSError as exc:  # the spool folder is full or gone
            log.error("cannot store an upload: %s", exc)
            return error_response(503, f"the server cannot store the upload now ({exc.strerror or exc})", close=True,
                                  retry_after_s=limits.retry_after_s)
        except (ClientDisconnect, Cancelled):
            return error_response(499, "the client went away")
        except Exception as exc:  # noqa: BLE001 - an answer, never a traceback to the client
            log.exception("request failed")
            return error_response(500, f"internal error: {exc}")
        finally:
            if path is not None:
                path.unlink(missing_ok=True)

    for route in POST_PATHS:
        app.add_api_route(route, predict, methods=["POST"])
    add_live_route(app, endpoint.transcriber, worker)
    return app

