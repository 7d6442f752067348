"""The endpoint served over HTTP by uvicorn in this process: :class:`EndpointServer` (``run()`` in the foreground, as
``python -m specwhisper.serving.http.serve`` does, or ``start()``/``stop()`` on a background thread) and
:func:`serving`, the same as a context manager.

Routes and answers: :mod:`specwhisper.serving.http.app` (OpenAI's audio API: :mod:`specwhisper.serving.http.openai_api`;
the live WebSocket: :mod:`specwhisper.serving.http.live_ws`). Below the application, connections are capped and
request heads must arrive in time (:mod:`specwhisper.serving.http.protocol`); one worker thread runs the model
with a bounded queue in front (:mod:`specwhisper.serving.worker`); uploads live in a spool folder
(:mod:`specwhisper.serving.spool`) that a starting server clears of what a killed one left. With an API key every
route but ``/health`` wants ``Authorization: Bearer <key>`` (:mod:`specwhisper.serving.http.auth`).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading
from collections.abc import Iterator

import uvicorn

from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.app import create_app
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.jobs import JobFolderInUse, Jobs
from specwhisper.serving.http.protocol import RefusingWebSocketProtocol, protocol_factory
from specwhisper.serving.worker import ModelWorker
from specwhisper.serving.spool import Spool

SHUTDOWN_GRACE_S = 10  # on SIGTERM, requests in flight get this long before they are cancelled
log = logging.getLogger(__name__)


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
            self.jobs = Jobs(config.jobs_dir or config.spool_dir / "jobs", endpoint, self.worker, config.jobs,
                             signing_key=config.api_key)
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
