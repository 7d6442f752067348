"""The endpoint as an ASGI application (FastAPI), the routes and contract of ``python -m specwhisper.serving.http.serve``:

* ``POST /`` (or ``/predict``) with ``Content-Type: application/json``:
  ``{"inputs": "<base64 audio>", "parameters": {...}}``, as Inference Endpoints send it;
* ``POST /`` with any other content type: the body is the audio file, parameters come from the
  query string (``/?language=en&diarize=true&formats=srt,vtt``);
* ``POST /v1/audio/transcriptions``, ``POST /v1/audio/translations``, ``GET /v1/models``: OpenAI's audio
  API (:mod:`specwhisper.serving.http.openai_api`), with its own answers and error body;
* ``POST /asr``, ``POST /detect-language``: whisper-asr-webservice's routes, for the apps built for it (Bazarr)
  (:mod:`specwhisper.serving.http.asr_webservice`);
* ``POST /v1/jobs`` (the upload as ``POST /`` takes it), ``GET /v1/jobs/{id}``, ``GET /v1/jobs``,
  ``DELETE /v1/jobs/{id}``: transcription jobs, answered at once and read later
  (:mod:`specwhisper.serving.http.jobs`);
* ``GET /health``: ``{"status": "ok"}``; ``GET /metrics``: Prometheus's text format (:mod:`specwhisper.serving.http.metrics`);
* ``GET /api/ps``: the models in memory; ``POST /api/ps/{model}`` loads an offered model before its first
  request, ``DELETE /api/ps/{model}`` unloads one now (speaches' routes; ``SPECWHISPER_MODEL_TTL`` unloads
  a model idle for that many seconds);
* ``/v1/live``: live transcription over a WebSocket (:mod:`specwhisper.serving.http.live_ws`);
* ``/v1/realtime?intent=transcription``: OpenAI's Realtime API's transcription sessions over a WebSocket
  (:mod:`specwhisper.serving.http.realtime_ws`).

Every answer of ours is JSON (``/metrics`` aside); every error is ``{"error": "<one line>", "status": N}`` with that HTTP
status. With an API key set, every route but ``/health`` wants ``Authorization: Bearer <key>``
(:mod:`specwhisper.serving.http.auth`). An upload goes through the steps of :mod:`specwhisper.serving.http.uploads`
(its own spool file, the size limit and body timeout, the length check, the model worker's queue, the
deadline). A JSON body is parsed one at a time, its base64 decoded into the file a slice at a time.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar
from urllib.parse import parse_qs

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.routing import Match, Route

from specwhisper.serving.http.asr_webservice import add_asr_webservice_routes
from specwhisper.serving.http.auth import ApiKeyGuard
from specwhisper.serving.http.callbacks import check_callback_url
from specwhisper.serving.http.jobs import Jobs
from specwhisper.serving.endpoint.contract import Endpoint, base64_to_file, outputs_again, response
from specwhisper.pipeline.options import options_for
from specwhisper.serving.http.live_ws import LIVE_PATH, add_live_route
from specwhisper.serving.http.metrics import METRICS_PATH, RequestMetrics, ServerMetrics
from specwhisper.serving.http.realtime_ws import add_realtime_route
from specwhisper.serving.worker import ModelWorker
from specwhisper.serving.http.openai_api import add_openai_routes, is_openai_path, openai_refused
from specwhisper.serving.params import RequestError, TranscribeParams
from specwhisper.messages import clip
from specwhisper.serving.spool import Spool
from specwhisper.serving.http.config import RequestLimits
from specwhisper.serving.http.uploads import Refusal, Uploads

log = logging.getLogger(__name__)
T = TypeVar("T")
POST_PATHS = ("/", "/predict")
JOBS_PATH = "/v1/jobs"
# what GET /v1/jobs/ID takes: the formats, and the subtitle layout they are written in
RENDERING = frozenset({"formats", *(o.name for o in options_for("http") if o.group == "subtitles")})
ROUTES_HINT = ("POST / with audio, POST /v1/audio/transcriptions and /v1/audio/translations, GET /v1/models, GET /health, GET /metrics, "
               "POST /asr and /detect-language, "
               "POST /v1/jobs, GET and DELETE /v1/jobs/ID, GET /api/ps, POST and DELETE /api/ps/MODEL, "
               "WebSockets /v1/live and /v1/realtime")
__all__ = ["create_app"]


def error_response(status: int, message: str, close: bool = False, retry_after_s: int | None = None) -> JSONResponse:
    headers = Refusal(status, message, close, retry_after_s).headers()
    return JSONResponse({"error": clip(message), "status": status}, status_code=status, headers=headers)


def refused(refusal: Refusal) -> JSONResponse:
    """Our error answer: ``{"error": "<one line>", "status": N}``."""
    return error_response(refusal.status, str(refusal), refusal.close, refusal.retry_after_s)


def refuser(path: str) -> Callable[[Refusal], Response]:
    """How a failure on ``path`` is answered: OpenAI's error body under its routes, ours elsewhere (our
    live stream and jobs too, though they live under /v1/)."""
    ours = any(path == route or path.startswith(route + "/") for route in (LIVE_PATH, JOBS_PATH))
    return openai_refused if is_openai_path(path) and not ours else refused


def query_parameters(query: str) -> dict:
    """``a=1&formats=srt,vtt`` -> {"a": "1", "formats": ["srt", "vtt"]} (pydantic converts the strings)."""
    params: dict = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        params[key] = [f for v in values for f in v.split(",") if f] if key == "formats" else values[-1]
    return params


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


def add_model_routes(app: FastAPI, endpoint: Endpoint, uploads: Uploads) -> None:
    """``/api/ps`` (speaches' routes, Ollama's ``ps``): what is in memory, and loading or unloading a model on
    the model worker (after the passes queued ahead; one that runs keeps its model until it ends)."""
    pool = endpoint.transcriber

    async def listing() -> JSONResponse:
        table = pool.idle_seconds()
        return JSONResponse({"models": list(dict.fromkeys(model for model, _, _ in table)),
                             "loaded": [{"model": model, "drafter": drafter, "idle_s": round(idle, 1)} for model, drafter, idle in table],
                             "ttl_s": pool.settings.model_ttl_s})

    async def steer(request: Request, name: str, job: Callable[[], T]) -> T:
        """``job()`` on the model worker, once ``name`` is an offered model's (an unknown one is answered at once)."""
        try:
            endpoint.offered(name)
        except RequestError as exc:
            raise Refusal(exc.status, str(exc)) from None
        return await uploads.on_worker(request, job)

    async def load(request: Request, name: str) -> JSONResponse:
        try:
            model, drafter, before = await steer(request, name, lambda: endpoint.load_model(name))
        except Refusal as exc:
            return refused(exc)
        return JSONResponse({"model": model, "drafter": drafter, "loaded": True}, status_code=200 if before else 201)

    async def unload(request: Request, name: str) -> JSONResponse:
        try:
            model, drafters = await steer(request, name, lambda: endpoint.unload_model(name))
        except Refusal as exc:
            return refused(exc)
        return JSONResponse({"model": model, "drafters": drafters, "loaded": False})

    app.add_api_route("/api/ps", listing, methods=["GET"])
    app.add_api_route("/api/ps/{name:path}", load, methods=["POST"])
    app.add_api_route("/api/ps/{name:path}", unload, methods=["DELETE"])


def create_app(endpoint: Endpoint, worker: ModelWorker, spool: Spool, limits: RequestLimits,
               api_key: str | None = None, jobs: Jobs | str = "this server runs no transcription jobs") -> FastAPI:
    """``jobs``: the server's, or why it has none (the job routes answer 503 with it)."""
    app = FastAPI(title="specwhisper", docs_url=None, redoc_url=None, openapi_url=None)
    json_turn = asyncio.Lock()  # one JSON body in memory at a time
    uploads = Uploads(endpoint, worker, spool, limits)

    async def http_error(request: Request, exc: HTTPException) -> Response:
        path = request.url.path
        if exc.status_code == 404:
            refusal = Refusal(404, f"no such path '{path}' ({ROUTES_HINT})")
        elif exc.status_code == 405:
            refusal = Refusal(405, f"{request.method} is not allowed on {path} ({ROUTES_HINT})")
        else:
            refusal = Refusal(exc.status_code, str(exc.detail))
        answer = refuser(path)(refusal)
        headers = {k.lower(): v for k, v in (exc.headers or {}).items()}  # Starlette's (405: Allow, RFC 9110 15.5.6)
        if exc.status_code == 405:  # every route's methods on the path, not the first route's alone
            methods = {m for r in app.router.routes if isinstance(r, Route) and r.matches(request.scope)[0] != Match.NONE
                       for m in r.methods or ()}
            headers["allow"] = ", ".join(sorted(methods)) or headers.get("allow", "")
        answer.headers.update(headers)
        return answer

    app.add_exception_handler(HTTPException, http_error)

    @app.get("/health")
    async def health() -> JSONResponse:
        return JSONResponse({"status": "ok"})

    async def upload(request: Request, path: Path, query: dict | None = None) -> TranscribeParams:
        """The request's body into ``path``, and its parameters: the JSON request's, else the query string's
        (``query``: those of it left to read)."""
        ctype = (request.headers.get("content-type") or "").split(";")[0].strip().lower()
        if ctype == "multipart/form-data":  # refused unread: the connection closes
            raise Refusal(400, "POST / takes the audio file itself as the body (curl --data-binary @FILE); a form "
                               "upload (curl -F file=@FILE) goes to POST /v1/audio/transcriptions", close=True)
        is_json = ctype == "application/json"
        max_bytes = limits.max_json_bytes if is_json else limits.max_upload_bytes
        with path.open("wb") as f:
            size = await uploads.receive(request, f, max_bytes)
        if is_json:
            async with json_turn:
                return await asyncio.to_thread(json_upload, path, endpoint, limits.max_upload_bytes)
        params = endpoint.parse({"parameters": query_parameters(request.url.query) if query is None else query})
        if size == 0:
            raise RequestError("inputs: the upload is empty (0 bytes)")
        return params

    async def predict(request: Request) -> Response:
        async def handle(path: Path) -> Response:
            params = await upload(request, path)
            t0 = time.perf_counter()
            transcript = await uploads.transcribe(request, path, "inputs", params)
            return JSONResponse(response(transcript, params, time.perf_counter() - t0))

        return await uploads.answer(handle, refused)

    async def submit_job(request: Request) -> Response:
        if isinstance(jobs, str):
            return refused(Refusal(503, jobs))

        query = query_parameters(request.url.query)
        callback_url = query.pop("callback_url", None)
        if callback_url is not None:
            try:  # before the body is read
                check_callback_url(callback_url, jobs.limits.callbacks)
            except ValueError as exc:
                return refused(Refusal(400, str(exc), close=True))

        async def handle(path: Path) -> Response:
            params = await upload(request, path, query)
            seconds = await uploads.length(path, "inputs")  # too long: refused now, not when the job runs
            job = await asyncio.to_thread(jobs.add, path, params, seconds, callback_url)
            return JSONResponse(job.public(), status_code=202, headers={"location": f"{JOBS_PATH}/{job.id}"})

        return await uploads.answer(handle, refused)

    async def on_job(call: Callable[[], dict]) -> Response:
        if isinstance(jobs, str):
            return refused(Refusal(503, jobs))
        try:
            return JSONResponse(await asyncio.to_thread(call))
        except RequestError as exc:
            return refused(Refusal(exc.status, str(exc)))

    async def list_jobs() -> Response:
        return await on_job(lambda: {"jobs": [job.public() for job in jobs.all()]})

    async def read_job(job_id: str, request: Request) -> Response:
        query = query_parameters(request.url.query)
        if not query:
            return await on_job(lambda: jobs.answer(job_id))
        if other := sorted(set(query) - RENDERING):
            return refused(Refusal(400, f"{clip(other[0], 60)}: GET {JOBS_PATH}/ID writes the finished transcript again: "
                                        f"it takes {', '.join(sorted(RENDERING))}"))
        try:
            params = endpoint.parse({"parameters": query})
        except RequestError as exc:
            return refused(Refusal(exc.status, str(exc)))

        def again() -> dict:
            answer = jobs.answer(job_id)
            if "result" in answer:  # formats its submission did not ask for, or another layout
                answer["result"]["outputs"] = outputs_again(answer["result"], params)
            return answer

        return await on_job(again)

    async def delete_job(job_id: str) -> Response:
        return await on_job(lambda: {**jobs.delete(job_id).public(), "deleted": True})

    for route in POST_PATHS:
        app.add_api_route(route, predict, methods=["POST"])
    app.add_api_route(JOBS_PATH, submit_job, methods=["POST"])
    app.add_api_route(JOBS_PATH, list_jobs, methods=["GET"])
    app.add_api_route(JOBS_PATH + "/{job_id}", read_job, methods=["GET"])
    app.add_api_route(JOBS_PATH + "/{job_id}", delete_job, methods=["DELETE"])
    add_model_routes(app, endpoint, uploads)
    add_openai_routes(app, uploads)
    add_asr_webservice_routes(app, uploads, refused)
    slots = add_live_route(app, endpoint.transcriber, worker)
    add_realtime_route(app, endpoint.transcriber, worker, slots)
    metrics = ServerMetrics({
        "specwhisper_worker_waiting": ("Jobs queued for the model worker", lambda: worker.waiting),
        "specwhisper_worker_busy": ("1 while the model worker runs a pass", lambda: float(worker.busy)),
        "specwhisper_models_loaded": ("Models (with their drafter) in memory", lambda: len(endpoint.transcriber.loaded())),
        "specwhisper_live_streams": ("Live sockets open (/v1/live and /v1/realtime)", lambda: slots.open),
    }, counters={
        "specwhisper_live_streams_started": ("Live sockets accepted (/v1/live and /v1/realtime)", lambda: slots.started),
        "specwhisper_live_audio_seconds": ("Seconds of audio the live sockets received", lambda: slots.heard_s),
    })
    endpoint.on_transcript = metrics.transcribed

    async def scrape() -> Response:
        return Response(metrics.page(), media_type=metrics.content_type)

    app.add_api_route(METRICS_PATH, scrape, methods=["GET"])
    if api_key is not None:
        app.add_middleware(ApiKeyGuard, key=api_key, refuser=refuser)
    app.add_middleware(RequestMetrics, metrics=metrics, routes=app.router.routes)  # outermost: a refused key counts too
    return app
