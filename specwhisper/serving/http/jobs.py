"""Transcription jobs, for files that take longer than a client, a proxy (Cloudflare waits 100 s) or a gateway
keeps a request open: ``POST /v1/jobs`` takes an upload as ``POST /`` does and answers at once (202) with the
job's id; ``GET /v1/jobs/{id}`` tells its state (queued, running with its stage and progress, done, failed)
and, once done, holds the answer ``POST /`` would have given; ``DELETE /v1/jobs/{id}`` cancels it or deletes
its result; ``GET /v1/jobs`` lists them.

Jobs run one at a time on the model worker, in the order they came, each behind the requests waiting there
when it is handed over (a request that comes meanwhile runs before the next job, and a short one runs inside
a long job, as inside a long upload). A job lives in the jobs folder: its upload (``<id>.upload``) until it
has run, its state (``<id>.json``, written whole or not at all) with the answer once done. A server started
on the folder takes up what a stopped one left: finished jobs stay readable, queued and interrupted ones run
(again). A finished job is kept ``ttl_s`` (24 h), and at most ``max_jobs`` are held (429 past it). One
server per folder (a lock file): a second one started on it gets :class:`JobFolderInUse` and runs no jobs. A
job with a ``callback_url`` has its answer POSTed there once it ended (:mod:`specwhisper.serving.http.callbacks`).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import math
import os
import secrets
import shutil
import threading
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from specwhisper.asr.options import SAMPLING
from specwhisper.pipeline.core import BETWEEN_BATCHES
from specwhisper.serving.endpoint.contract import Endpoint, response
from specwhisper.serving.params import RequestError, TranscribeParams, parse_params
from specwhisper.messages import one_line
from specwhisper.serving.worker import Cancelled, CancelToken, ModelWorker, QueueFull
from specwhisper.serving.http.callbacks import Deliveries, allowed
from specwhisper.serving.http.config import JobLimits

log = logging.getLogger(__name__)
STATES = ("queued", "running", "done", "failed")
RETRY_S = 1.0  # the worker's queue was full: hand the next job over again this much later


@dataclass
class UploadJob:
    id: str
    params: dict[str, Any]  # the request's parameters (TranscribeParams, as JSON)
    seconds: float  # the audio the upload's container claims (inf: it does not say)
    created: float  # unix time of the upload's arrival
    status: str = "queued"
    started: float | None = None
    finished: float | None = None
    stage: str | None = None  # while it runs: the pipeline's stage and the fraction of it done
    progress: float = 0.0
    error: str | None = None
    error_status: int | None = None  # the status POST / would have answered the failure with
    callback_url: str | None = None  # where its answer is POSTed once it ended (specwhisper.serving.http.callbacks)
    callback: str | None = None  # how that went: pending, delivered or failed
    callback_error: str | None = None
    callback_attempts: int = 0

    def public(self) -> dict:
        """Its state for GET /v1/jobs (the result of a done one is in its state file: ``Jobs.answer``)."""
        out = {"id": self.id, "status": self.status, "created": self.created, "started": self.started,
               "finished": self.finished}
        if self.status == "running":
            out.update(stage=self.stage, progress=round(self.progress, 3))
        if self.status == "failed":
            out.update(error=self.error, error_status=self.error_status)
        if self.callback is not None:  # not its URL, which may hold a secret
            out["callback"] = {"status": self.callback, "attempts": self.callback_attempts, "error": self.callback_error}
        return out


class JobFolderInUse(OSError):
    """Another server holds the jobs folder."""


class Jobs:
    """The jobs of one server (see the module's docstring); thread-safe."""

    def __init__(self, folder: Path, endpoint: Endpoint, worker: ModelWorker, limits: JobLimits | None = None,
                 signing_key: str | None = None):
        """``signing_key``: the server's API key, which signs its callbacks' bodies."""
        self.folder, self.endpoint, self.worker = folder, endpoint, worker
        self.limits = limits or JobLimits()
        folder.mkdir(parents=True, exist_ok=True)
        self._lock_file = (folder / ".lock").open("w")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.close()
            raise JobFolderInUse(f"the jobs folder {folder} is in use by another server") from None
        self._jobs: dict[str, UploadJob] = {}
        self._lock = threading.RLock()
        self._running: tuple[UploadJob, CancelToken] | None = None
        self._closed = False
        self._deliveries = Deliveries(self._callback_body, self._callback_url, self._callback_record, signing_key,
                                      self.limits.callback_retry_s) if self.limits.callbacks else None
        self._load()
        self._hand_over()

    # ---------------------------------------------------------------- requests
    def add(self, upload: Path, params: TranscribeParams, seconds: float, callback_url: str | None = None) -> UploadJob:
        """Queue the upload in ``upload`` (moved into the folder) as a new job; a 429 when the folder is full.
        ``callback_url``: one the server may call (``callbacks.check_callback_url``), told of the job's end."""
        with self._lock:
            self._expire()
            if len(self._jobs) >= self.limits.max_jobs:
                raise RequestError(f"{self.limits.max_jobs} jobs are held already; delete finished ones "
                                   f"(DELETE /v1/jobs/ID) or try again later", 429)
            job = UploadJob(id="job_" + secrets.token_hex(12), params=params.model_dump(mode="json"), seconds=seconds,
                            created=time.time(), callback_url=callback_url,
                            callback=None if callback_url is None else "pending")
            shutil.move(upload, self._upload(job.id))
            self._save(job)
            self._jobs[job.id] = job
            self._hand_over()
            return job

    def get(self, job_id: str) -> UploadJob:
        with self._lock:
            self._expire()
            job = self._jobs.get(job_id)
            if job is None:
                raise RequestError(f"no job '{job_id[:60]}' here (finished jobs are kept {self.limits.ttl_s:g} s)", 404)
            return job

    def answer(self, job_id: str) -> dict:
        """A job's state, with its result once done (read from its file: results are not held in memory)."""
        with self._lock:
            job = self.get(job_id)
            out = job.public()
            if job.status == "done":
                try:
                    out["result"] = json.loads(self._state(job.id).read_text())["result"]
                except (OSError, ValueError, KeyError) as exc:  # removed or spoilt behind the server's back
                    raise RequestError(f"the result of job '{job.id}' cannot be read ({one_line(exc)})", 500) from None
            return out

    def all(self) -> list[UploadJob]:
        with self._lock:
            self._expire()
            return sorted(self._jobs.values(), key=lambda job: job.created)

    def delete(self, job_id: str) -> UploadJob:
        """Forget a job: a queued one never runs, a running one stops at its next progress report."""
        with self._lock:
            job = self.get(job_id)
            del self._jobs[job.id]
            if self._running is not None and self._running[0] is job:
                self._running[1].cancel()
            self._remove(job.id)
            return job

    def close(self) -> None:
        """Stop handing jobs over and let go of the folder; the job that runs is not saved again."""
        with self._lock:
            self._closed = True
            if self._running is not None:
                self._running[1].cancel()
            if self._deliveries is not None:
                self._deliveries.close()
            self._lock_file.close()

    # ---------------------------------------------------------------- running
    def _hand_over(self) -> None:
        """Give the model worker the oldest queued job, unless one is there already."""
        with self._lock:
            if self._running is not None or self._closed:
                return
            queued = sorted((job for job in self._jobs.values() if job.status == "queued"), key=lambda j: j.created)
            for job in queued:
                try:  # a job taken up from a stopped server may ask for what this deployment does not offer
                    params = parse_params(job.params, self.endpoint.transcriber.settings.choices)
                    break
                except RequestError as exc:
                    job.status, job.finished, job.error, job.error_status = "failed", time.time(), str(exc), exc.status
                    self._upload(job.id).unlink(missing_ok=True)
                    self._save(job)
                    self._call_back(job)
            else:
                return
            try:
                future, token = self.worker.submit(lambda token: self._run(job, params, token), job.seconds,
                                                   self.endpoint.transcriber.pipeline_key(params))
            except QueueFull:
                timer = threading.Timer(RETRY_S, self._hand_over)
                timer.daemon = True
                timer.start()
                return
            self._running = (job, token)
            future.add_done_callback(lambda f: self._finished(job, f))

    def _run(self, job: UploadJob, params: TranscribeParams, token: CancelToken) -> dict:
        with self._lock:
            if self._closed:  # the server stopped: the next one on the folder runs it
                raise Cancelled
            job.status, job.started = "running", time.time()
            self._save(job)

        def progress(stage: str, fraction: float) -> None:
            if stage != SAMPLING:  # inside a batch: the stage it is in goes on
                job.stage, job.progress = stage, fraction
            token.check(stage in BETWEEN_BATCHES)

        transcript = self.endpoint.run(self._upload(job.id), params, progress, "inputs")
        return response(transcript, params, time.time() - job.created)

    def _finished(self, job: UploadJob, future) -> None:
        with self._lock:
            self._running = None
            if self._closed:  # a pass that outlived its server: the folder is the next server's
                return
            if job.id in self._jobs and not future.cancelled():
                exc = future.exception()
                if isinstance(exc, Cancelled):  # the worker closed (the server stops): it runs again at the next start
                    job.status = "queued"
                    self._save(job)
                else:
                    job.finished = time.time()
                    if exc is None:
                        job.status = "done"
                        self._save(job, future.result())
                    else:
                        failure = exc if isinstance(exc, RequestError) else RequestError(f"internal error: {one_line(exc)}", 500)
                        job.status, job.error, job.error_status = "failed", str(failure), failure.status
                        self._save(job)
                    self._upload(job.id).unlink(missing_ok=True)
                    self._call_back(job)
            self._hand_over()

    # ---------------------------------------------------------------- callbacks
    def _call_back(self, job: UploadJob) -> None:
        """An ended job's callback, when it has one still to make and this server makes callbacks (one that
        does not leaves it pending, for the next server on the folder that does; one whose prefixes no longer
        take its URL fails it)."""
        if job.callback != "pending" or self._deliveries is None:
            return
        if allowed(job.callback_url or "", self.limits.callbacks):
            self._deliveries.add(job.id)
        else:
            job.callback, job.callback_error = "failed", "its URL is not under this server's --job-callbacks"
            self._save(job)

    def _callback_url(self, job_id: str) -> str | None:
        with self._lock:
            job = self._jobs.get(job_id)
            return None if job is None else job.callback_url

    def _callback_body(self, job_id: str) -> bytes | None:
        """What ``GET /v1/jobs/ID`` answers, without the callback's own state; None once the job is deleted."""
        with self._lock:
            if job_id not in self._jobs:
                return None
            try:
                answer = self.answer(job_id)
            except RequestError as exc:  # its result spoilt behind the server's back: the state, and why
                answer = {**self._jobs[job_id].public(), "error": str(exc)}
            answer.pop("callback", None)
            return json.dumps(answer).encode()

    def _callback_record(self, job_id: str, state: str, error: str | None) -> None:
        """A try of its callback, counted with those of the servers before on the folder."""
        with self._lock:
            job = self._jobs.get(job_id)
            if job is not None and not self._closed:
                job.callback, job.callback_error = state, error
                job.callback_attempts += 1
                self._save(job)

    # ---------------------------------------------------------------- the folder
    def _upload(self, job_id: str) -> Path:
        return self.folder / f"{job_id}.upload"

    def _state(self, job_id: str) -> Path:
        return self.folder / f"{job_id}.json"

    def _save(self, job: UploadJob, result: dict | None = None) -> None:
        """Write the job's state whole or not at all; a done job's with its result (kept from its file when
        not given: a callback's outcome saved later)."""
        if job.status == "done" and result is None:
            try:
                result = json.loads(self._state(job.id).read_text())["result"]
            except (OSError, ValueError, KeyError):
                return
        tmp = self._state(job.id).with_suffix(".tmp")
        state = asdict(job)
        state["seconds"] = None if math.isinf(job.seconds) else job.seconds
        if result is not None:
            state["result"] = result
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self._state(job.id))

    def _remove(self, job_id: str) -> None:
        for path in (self._upload(job_id), self._state(job_id)):
            path.unlink(missing_ok=True)

    def _expire(self) -> None:
        now = time.time()
        for job in [j for j in self._jobs.values() if j.finished is not None and now - j.finished > self.limits.ttl_s]:
            del self._jobs[job.id]
            self._remove(job.id)

    def _load(self) -> None:
        """Take up the jobs a stopped server left: interrupted ones are queued again. Under the lock, its half
        written states swept first: a callback owed by the stopped server is sent from here on, on the
        deliveries' thread, and its record (``_save``) once raced the sweep, which took its state file's
        ``.tmp`` before the rename (a FileNotFoundError; the delivery went unrecorded, to be sent again)."""
        with self._lock:
            for path in self.folder.glob("job_*.tmp"):
                path.unlink(missing_ok=True)
            self._take_up()

    def _take_up(self) -> None:
        """``_load``'s reading of the states, under the lock."""
        for path in self.folder.glob("job_*.json"):
            try:
                state = json.loads(path.read_text())
                state.pop("result", None)  # read again when asked for (``answer``)
                job = UploadJob(**{**state, "seconds": math.inf if state.get("seconds") is None else state["seconds"]})
            except (OSError, ValueError, TypeError) as exc:
                log.warning("%s: not a job's state (%s): removed", path.name, one_line(exc))
                path.unlink(missing_ok=True)
                continue
            if job.status not in STATES:
                continue
            if job.status in ("queued", "running"):
                job.status, job.started, job.stage, job.progress = "queued", None, None, 0.0
                if not self._upload(job.id).exists():
                    job.status, job.finished = "failed", time.time()
                    job.error, job.error_status = "the job's upload was lost while the server was stopped", 500
                self._save(job)
            self._jobs[job.id] = job
            if job.status in ("done", "failed"):  # one a stopped server had not delivered
                self._call_back(job)
        with contextlib.suppress(OSError):
            for path in self.folder.glob("job_*.upload"):
                if path.stem not in self._jobs:
                    path.unlink()
        self._expire()
        if self._jobs:
            log.info("%d jobs taken up from %s", len(self._jobs), self.folder)
