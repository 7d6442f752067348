"""What an HTTP server is set up with (``python -m specwhisper.serving.http.serve``'s options): its address, the
limits on connections (:mod:`specwhisper.serving.http.protocol`), on requests
(:mod:`specwhisper.serving.http.uploads`) and on jobs (:mod:`specwhisper.serving.http.jobs`), and its folders.
Plain values, importable without the web stack or the models, so that the command's ``--help`` and its
mistakes are answered at once."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from specwhisper.serving.http.callbacks import callback_prefixes
from specwhisper.serving.spool import default_spool_dir
from specwhisper.serving.worker import OVERTAKE_S

JSON_OVERHEAD = 1 << 20  # room for the JSON around a base64 upload


@dataclass(frozen=True)
class ConnectionLimits:
    max_connections: int = 64
    head_timeout_s: float = 10.0  # to send a request's line and headers
    keep_alive_s: int = 5  # an idle connection is closed after this long without a new request
    max_head_bytes: int = 16 * 1024  # request line and headers together
    linger_s: float = 2.0  # after an answer that closes the connection, to drain what the client still sends

    def __post_init__(self) -> None:
        if (self.max_connections < 1 or self.head_timeout_s <= 0 or self.keep_alive_s < 1 or self.max_head_bytes < 1024
                or self.linger_s < 0):
            raise ValueError(f"bad connection limits: {self}")


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


@dataclass(frozen=True)
class JobLimits:
    max_jobs: int = 100  # held at once, finished ones included
    ttl_s: float = 86400.0  # a finished job's result is kept this long
    # URL prefixes a job's callback_url may be under (specwhisper.serving.http.callbacks); none: no callbacks
    callbacks: tuple[str, ...] = ()
    callback_retry_s: tuple[float, ...] = (1.0, 5.0, 25.0)  # the waits before a failed callback's next tries

    def __post_init__(self) -> None:
        if self.max_jobs < 1 or not self.ttl_s > 0 or not all(s >= 0 for s in self.callback_retry_s):
            raise ValueError(f"bad job limits: {self}")
        callback_prefixes(",".join(self.callbacks))  # each an http(s) URL prefix, or ValueError


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


def check_api_key(key: str) -> str:
    """``key`` if it can travel in an Authorization header (printable ASCII, no spaces); ValueError otherwise."""
    if not key or not all(33 <= ord(c) <= 126 for c in key):
        raise ValueError("the API key must be non-empty printable ASCII without spaces")
    return key
