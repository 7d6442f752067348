"""One thread in front of the model, with a bounded queue of jobs waiting for it.

The model serves one job at a time (its decoder cache and the CPU are the bottleneck anyway), so
requests hand it a job and wait for the result; when ``max_waiting`` jobs already wait, a new one
is refused at once (:class:`QueueFull`, the server's 503). A job can be cancelled: one not started
yet is dropped, and a running one stops at its next progress report (:class:`Cancelled`, raised
through the pipeline from its progress callback).
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Generic, TypeVar

T = TypeVar("T")


class QueueFull(Exception):
    """Every place in the queue is taken."""


class Cancelled(BaseException):
    """The job's requester gave up (deadline, disconnect). A BaseException, like asyncio's
    CancelledError, so that no ``except Exception`` on the way turns it into an error answer."""


@dataclass
class CancelToken:
    """Set by the requester; checked by the job at each progress report."""

    _event: threading.Event = field(default_factory=threading.Event)

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled


@dataclass
class _Job(Generic[T]):
    run: Callable[[CancelToken], T]
    token: CancelToken
    future: Future


class ModelWorker:
    """``submit(fn)`` queues ``fn(token)`` for the worker thread and returns (future, token)."""

    def __init__(self, max_waiting: int, name: str = "model-worker"):
        if max_waiting < 1:
            raise ValueError(f"the queue needs room for at least 1 job, got {max_waiting}")
        self._jobs: queue.Queue[_Job | None] = queue.Queue(maxsize=max_waiting)
        self._busy = threading.Event()
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return self._jobs.qsize()

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, run: Callable[[CancelToken], T]) -> tuple[Future, CancelToken]:
        job = _Job(run, CancelToken(), Future())
        try:
            self._jobs.put_nowait(job)
        except queue.Full:
            raise QueueFull(f"{self._jobs.maxsize} requests are already waiting for the model") from None
        return job.future, job.token

    def close(self, timeout: float | None = None) -> None:
        """Stop after the running job (waits up to ``timeout`` seconds); jobs still queued are dropped."""
        self._closed.set()
        with contextlib.suppress(queue.Full):
            self._jobs.put_nowait(None)  # wakes an idle worker
        self._thread.join(timeout)

    def _work(self) -> None:
        while (job := self._jobs.get()) is not None and not self._closed.is_set():
            if not job.future.set_running_or_notify_cancel():
                continue
            if job.token.cancelled:
                job.future.set_exception(Cancelled())
                continue
            self._busy.set()
            try:
                result = job.run(job.token)
            except (Cancelled, Exception) as exc:  # the requester decides what a failure means
                job.future.set_exception(exc)
            else:
                job.future.set_result(result)
            finally:
                self._busy.clear()
