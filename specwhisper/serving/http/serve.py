"""``python -m specwhisper.serving.http.serve``: the endpoint over HTTP on uvicorn (what the Docker image runs).

Routes and answers: :mod:`specwhisper.serving.http.app` (OpenAI's audio API: :mod:`specwhisper.serving.http.openai_api`;
the live WebSocket: :mod:`specwhisper.serving.http.live_ws`). Below the application, connections are capped and
request heads must arrive in time (:mod:`specwhisper.serving.http.protocol`); one worker thread runs the model
with a bounded queue in front (:mod:`specwhisper.serving.worker`); uploads live in a spool folder
(:mod:`specwhisper.serving.spool`) that a starting server clears of what a killed one left. With an API key
(``--api-key``, or the ``SPECWHISPER_API_KEY`` variable) every route but ``/health`` wants
``Authorization: Bearer <key>`` (:mod:`specwhisper.serving.http.auth`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import socket
import sys
import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import uvicorn

from specwhisper.asr.weights.loader import ModelError
from specwhisper.serving.arguments import OneLineParser, positive, tcp_port
from specwhisper.serving.messages import one_line
from specwhisper.serving.http.auth import check_api_key
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.app import RequestLimits, create_app
from specwhisper.serving.http.jobs import JobFolderInUse, JobLimits, Jobs
from specwhisper.serving.http.protocol import ConnectionLimits, RefusingWebSocketProtocol, protocol_factory
from specwhisper.serving.worker import OVERTAKE_S, ModelWorker
from specwhisper.serving.spool import Spool, default_spool_dir


SHUTDOWN_GRACE_S = 10  # on SIGTERM, requests in flight get this long before they are cancelled
API_KEY_ENV = "SPECWHISPER_API_KEY"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8080
    connections: ConnectionLimits = field(default_factory=ConnectionLimits)
    requests: RequestLimits = field(default_factory=RequestLimits)
    max_waiting: int = 16  # requests waiting for the model beyond the ones it runs
    # uploads of the same model and options that wait together run in one pass, their chunks batched across
    # files: at most this many, with this much audio besides the first's (a batch of 8 windows of 30 s)
    batch_requests: int = 16
    batch_audio_s: float = 240.0
    # an upload of at most this much audio (and a live stream's update) that waits while a pass of more runs is
    # transcribed inside it, at its next report between batches (0: it waits for the pass)
    overtake_s: float = OVERTAKE_S
    spool_dir: Path = field(default_factory=default_spool_dir)
    jobs_dir: Path | None = None  # POST /v1/jobs's uploads and results (specwhisper.serving.http.jobs); None: spool_dir/jobs
    jobs: JobLimits = field(default_factory=JobLimits)
    access_log: bool = True
    api_key: str | None = field(default=None, repr=False)  # None: every route is open


class EndpointServer:
    """An endpoint served by uvicorn: ``run()`` in the foreground, or ``start()``/``stop()`` on a
    background thread (tests, benchmarks). The socket is bound at construction (``port`` 0 picks one)."""

    def __init__(self, endpoint: Endpoint, config: ServerConfig):
        self.config = config
        self.spool = Spool.open(config.spool_dir)
        self.worker = ModelWorker(config.max_waiting, max_group=config.batch_requests, max_group_s=config.batch_audio_s,
                                  overtake_s=config.overtake_s)
        self.jobs: Jobs | str  # or why there are none
        try:
            self.jobs = Jobs(config.jobs_dir or config.spool_dir / "jobs", endpoint, self.worker, config.jobs)
        except JobFolderInUse as exc:  # a second server beside a first: it serves all but jobs
            self.jobs = f"{exc}; start this one with its own --jobs-dir"
            log.warning("no transcription jobs on this server: %s", self.jobs)
        app = create_app(endpoint, self.worker, self.spool, config.requests, api_key=config.api_key, jobs=self.jobs)
        self.socket = socket.create_server((config.host, config.port), backlog=max(128, config.connections.max_connections))
        # WebSockets (/v1/live) on the websockets package's sans-I/O protocol, which stops reading the socket
        # until the application took the last message; no compression (PCM hardly compresses)
        self.server = uvicorn.Server(uvicorn.Config(
            app, http=protocol_factory(config.connections), ws=RefusingWebSocketProtocol, ws_per_message_deflate=False,
            ws_max_size=endpoint.transcriber.settings.live.max_frame_bytes, lifespan="off", log_config=None,
            access_log=config.access_log, timeout_keep_alive=config.connections.keep_alive_s,
            h11_max_incomplete_event_size=config.connections.max_head_bytes, server_header=False,
            timeout_graceful_shutdown=SHUTDOWN_GRACE_S,
        ))
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.socket.getsockname()[:2]
        return f"http://{host}:{port}"

    def run(self) -> None:
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.close()

    def start(self) -> EndpointServer:
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)
        self._thread.start()
        while not self.server.started and self._thread.is_alive():
            self._thread.join(0.05)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(30)
        self.close()

    def close(self) -> None:
        """Stop: the running job is cancelled (the next server on its folder runs it again), and the model worker
        gets ``SHUTDOWN_GRACE_S`` to reach its pass's next progress report and stop, so that the process does not
        exit under a pass in flight (torch aborts the interpreter then)."""
        self.socket.close()
        if isinstance(self.jobs, Jobs):
            self.jobs.close()
        self.worker.close(timeout=SHUTDOWN_GRACE_S)


@contextlib.contextmanager
def serving(endpoint: Endpoint, config: ServerConfig) -> Iterator[EndpointServer]:
    server = EndpointServer(endpoint, config).start()
    try:
        yield server
    finally:
        server.stop()


def build_parser() -> argparse.ArgumentParser:
    d, c, r = ServerConfig(), ConnectionLimits(), RequestLimits()
    p = OneLineParser(prog="python -m specwhisper.serving.http.serve", description="Serve the transcription endpoint over HTTP.")
    p.add_argument("--host", default=d.host, help="address to bind (default: 127.0.0.1; 0.0.0.0 in a container)")
    p.add_argument("--port", type=tcp_port(), default=d.port, help=f"port (default: {d.port}; 0: any free port)")
    p.add_argument("-q", "--quiet", action="store_true", help="no access log")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: SPECWHISPER_THREADS, else one per core)")
    limits = [  # flag, type, default, what it bounds
        ("--queue", int, d.max_waiting, "requests that may wait for the model; more get 503 with Retry-After"),
        ("--batch-requests", int, d.batch_requests, "uploads with the same model and options that wait together are "
                                                    "transcribed in one pass, up to this many (1: one at a time)"),
        ("--batch-audio", float, d.batch_audio_s, "seconds of audio such a pass takes besides the first upload's"),
        ("--max-connections", int, c.max_connections, "open connections; more get 503"),
        ("--request-timeout", float, r.request_timeout_s, "seconds from a request's arrival to its answer; later: 504"),
        ("--body-timeout", float, r.body_timeout_s, "seconds to send a request body; later: 408"),
        ("--head-timeout", float, c.head_timeout_s, "seconds to send a request's line and headers; later: 408"),
        ("--keep-alive", int, c.keep_alive_s, "seconds an idle connection stays open"),
        ("--retry-after", int, r.retry_after_s, "seconds a client turned away by a full queue is told to wait"),
    ]
    for flag, kind, default, text in limits:
        p.add_argument(flag, type=positive(kind), default=default, help=f"{text} (default: {default:g})")
    p.add_argument("--overtake-audio", type=positive(float, or_zero=True), default=d.overtake_s,
                   help="an upload of at most this many seconds of audio, and a live stream's update, is transcribed "
                        "inside a longer one's pass at its next batch instead of after it (0: never; "
                        f"default: {d.overtake_s:g})")
    p.add_argument("--spool-dir", type=Path, default=d.spool_dir, help=f"folder for uploads in flight (default: {d.spool_dir})")
    p.add_argument("--jobs-dir", type=Path, help="folder of the jobs of POST /v1/jobs, taken up again by the next server "
                                                  "started on it (default: the spool folder's jobs/)")
    p.add_argument("--max-jobs", type=positive(int), default=d.jobs.max_jobs,
                   help=f"jobs held at once, finished ones included; more get 429 (default: {d.jobs.max_jobs})")
    p.add_argument("--job-ttl", type=positive(float), default=d.jobs.ttl_s,
                   help=f"seconds a finished job's result is kept (default: {d.jobs.ttl_s:g})")
    p.add_argument("--api-key", help=f"a key every request must send as 'Authorization: Bearer KEY' (all routes but /health; "
                                     f"default: the {API_KEY_ENV} variable, which keeps it out of the process list; "
                                     f"neither: no key, anyone who reaches the port may use the server)")
    return p


def api_key_from(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The key of --api-key, else of SPECWHISPER_API_KEY; None when neither is set. One set but empty is an
    error, not an open server (``--api-key "$KEY"`` with KEY unset)."""
    key = args.api_key if args.api_key is not None else env.get(API_KEY_ENV)
    if key is None:
        return None
    try:
        return check_api_key(key)
    except ValueError as exc:
        raise ValueError(f"{'--api-key' if args.api_key is not None else API_KEY_ENV}: {exc}") from None


def config_from_args(args: argparse.Namespace, max_upload_bytes: int, api_key: str | None = None) -> ServerConfig:
    return ServerConfig(
        host=args.host,
        port=args.port,
        connections=ConnectionLimits(max_connections=args.max_connections, head_timeout_s=args.head_timeout,
                                     keep_alive_s=args.keep_alive),
        requests=RequestLimits(max_upload_bytes=max_upload_bytes, body_timeout_s=args.body_timeout,
                               request_timeout_s=args.request_timeout, retry_after_s=args.retry_after),
        max_waiting=args.queue,
        batch_requests=args.batch_requests,
        batch_audio_s=args.batch_audio,
        overtake_s=args.overtake_audio,
        spool_dir=args.spool_dir,
        jobs_dir=args.jobs_dir,
        jobs=JobLimits(max_jobs=args.max_jobs, ttl_s=args.job_ttl),
        access_log=not args.quiet,
        api_key=api_key,
    )


def main(argv: list[str] | None = None) -> int:
    """Settings come from SPECWHISPER_* variables, as for handler.EndpointHandler."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from specwhisper.hardware.threads import check_threads
    from specwhisper.serving.endpoint.contract import settings_from_env

    try:
        settings = settings_from_env(os.environ)
        if args.threads is not None:
            check_threads(args.threads)
            settings.base.threads = args.threads
        config = config_from_args(args, settings.max_upload_bytes, api_key_from(args, os.environ))
        server = EndpointServer(Endpoint(settings), config)
    except (ValueError, OSError, ModelError) as exc:  # a bad setting, a model that does not load (a bad name)
        print(f"serve: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if config.api_key is None and config.host not in LOOPBACK:
        log.warning("no API key (--api-key or %s): anyone who reaches %s may use the server", API_KEY_ENV, server.url)
    print(f"serving on {server.url}", file=sys.stderr, flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
