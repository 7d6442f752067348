"""One thread in front of the model, with a bounded queue of jobs waiting for it.

The model serves one pass at a time (its decoder cache and the CPU are the bottleneck anyway), so
requests hand it a job and wait for the result; when ``max_waiting`` jobs already wait, a new one
is refused at once (:class:`QueueFull`, the server's 503). A job can be cancelled: one not started
yet is dropped, and a running one stops at its next progress report (:class:`Cancelled`, raised
through the pipeline from its progress callback).

A job submitted with a :class:`Batching` runs in one pass with the jobs of the same ``key`` that
wait when it starts (at most ``max_group`` jobs, and ``max_group_s`` seconds of audio besides the
first's: they would have waited for the first anyway, and the first waits for at most that much more):
transcription requests with the same model and options, whose chunks the engine then batches across
files (bench/server_batching.py: 1.29x the requests per second on a 2-core CPU, the same tokens). A
pass of several stops only when every one of its requesters has gone.

Short jobs overtake long passes: a job holding at most ``overtake_s`` seconds of audio (a live update
holds none) that waits while a pass of more than that runs is run inside it, at the pass's next report
between decoder batches (``check(between_batches=True)``: nothing of the pass is on the model then), when
it needs no other model than the pass's (``model``: the pipeline it runs on; ``None``: one already open).
Those that waited at that report run, least audio first, grouped by key as above, then the long pass goes
on; a pass run inside another lets none in. Without it a short request, or a live stream's next update,
waits for the whole of an hour's upload (bench/server_overtake.py). Not inside a batch: a drafter keeps
its decode's state between the steps of a batch, so another decode on the same model would clobber it.
"""

from __future__ import annotations

import logging
import math
import threading
from collections import deque
from collections.abc import Callable, Hashable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)
OVERTAKE_S = 60.0  # the servers' default: an upload of at most this much audio is a short one


class QueueFull(Exception):
    """Every place in the queue is taken."""


class Cancelled(BaseException):
    """The job's requester gave up (deadline, disconnect). A BaseException, like asyncio's
    CancelledError, so that no ``except Exception`` on the way turns it into an error answer."""


@dataclass
class CancelToken:
    """Set by the requester; checked by the job at each progress report."""

    _event: threading.Event = field(default_factory=threading.Event)
    _between: Callable[[], None] | None = None  # set by the worker while the job runs a pass others may overtake

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self, between_batches: bool = False) -> None:
        """Raises :class:`Cancelled` once cancelled; ``between_batches``: the job is at a point where work
        of others may use the model, and the short jobs waiting run there (the worker's overtaking)."""
        if self._event.is_set():
            raise Cancelled
        if between_batches and self._between is not None:
            self._between()


@dataclass(frozen=True)
class Batching:
    """How a job may share a pass with others: the jobs of one ``key`` run as one call,
    ``run_many(payloads, check)``, which returns each payload's result or exception in order and calls
    ``check(between_batches)`` at its progress reports (it raises :class:`Cancelled` once every requester has gone).
    ``seconds``: the job's audio, as far as known (``math.inf``: unknown, never joins another's pass);
    ``model``: what it runs on, for overtaking (``None``: nothing that needs loading)."""

    key: Hashable
    payload: Any
    seconds: float
    run_many: Callable[[list[Any], Callable[..., None]], list[Any]]
    model: Hashable | None = None


@dataclass
class _Job(Generic[T]):
    run: Callable[[CancelToken], T] | None
    batching: Batching | None
    token: CancelToken
    future: Future
    seconds: float
    model: Hashable | None


class ModelWorker:
    """``submit(fn, seconds, model)`` queues ``fn(token)`` for the worker thread and returns (future, token);
    ``submit_batching(b)`` queues a job that may share its pass (:class:`Batching`); ``overtake_s``: the most
    audio a job may hold to run inside a longer pass (0: none does)."""

    def __init__(self, max_waiting: int, name: str = "model-worker", max_group: int = 1, max_group_s: float = 0.0,
                 overtake_s: float = 0.0):
        if max_waiting < 1:
            raise ValueError(f"the queue needs room for at least 1 job, got {max_waiting}")
        if max_group < 1 or max_group_s < 0:
            raise ValueError(f"a pass takes at least 1 job and 0 s or more of audio, got {max_group} and {max_group_s:g}")
        if not overtake_s >= 0:
            raise ValueError(f"a job overtakes with 0 s or more of audio, got {overtake_s:g}")
        self.max_waiting, self.max_group, self.max_group_s = max_waiting, max_group, max_group_s
        self.overtake_s = overtake_s
        self._jobs: deque[_Job] = deque()
        self._ready = threading.Condition()
        self._busy = threading.Event()
        self._closed = False
        self._overtaking = False  # a pass runs inside another (worker thread only)
        self._thread = threading.Thread(target=self._work, name=name, daemon=True)
        self._thread.start()

    @property
    def waiting(self) -> int:
        return len(self._jobs)

    @property
    def busy(self) -> bool:
        return self._busy.is_set()

    def submit(self, run: Callable[[CancelToken], T], seconds: float = math.inf,
               model: Hashable | None = None) -> tuple[Future, CancelToken]:
        """``seconds``: the audio the job holds (unknown: it never overtakes); ``model``: :class:`Batching`'s."""
        return self._put(_Job(run, None, CancelToken(), Future(), seconds, model))

    def submit_batching(self, batching: Batching) -> tuple[Future, CancelToken]:
        return self._put(_Job(None, batching, CancelToken(), Future(), batching.seconds, batching.model))

    def _put(self, job: _Job) -> tuple[Future, CancelToken]:
        with self._ready:
            if len(self._jobs) >= self.max_waiting:
                raise QueueFull(f"{self.max_waiting} request{'s are' if self.max_waiting > 1 else ' is'} already waiting for the model")
            self._jobs.append(job)
            self._ready.notify()
        return job.future, job.token

    def close(self, timeout: float | None = None) -> None:
        """Stop after the running pass (waits up to ``timeout`` seconds); jobs still queued are dropped."""
        with self._ready:
            self._closed = True
            self._ready.notify()  # wakes an idle worker
        self._thread.join(timeout)

    def _next_pass(self) -> list[_Job] | None:
        """The next pass (``_take``), waiting for a job; None once closed."""
        with self._ready:
            while not self._jobs and not self._closed:
                self._ready.wait()
            return None if self._closed else self._take(lambda job: True)

    def _take(self, may: Callable[[_Job], bool], shortest: bool = False) -> list[_Job] | None:
        """Called with the lock held: the first waiting job that ``may`` run (``shortest``: the first of the
        least audio) and, when it may share its pass, the later ones of its key that fit (and ``may`` run);
        None when no job may."""
        eligible = [job for job in self._jobs if may(job)]
        if not eligible:
            return None
        first = min(eligible, key=lambda job: job.seconds) if shortest else eligible[0]
        self._jobs.remove(first)
        group = [first]
        if first.batching is not None and self.max_group > 1:
            seconds = 0.0  # the companions' audio
            for job in list(self._jobs):
                if len(group) == self.max_group:
                    break
                b = job.batching
                if b is not None and b.key == first.batching.key and seconds + b.seconds <= self.max_group_s and may(job):
                    self._jobs.remove(job)
                    group.append(job)
                    seconds += b.seconds
        return group

    def _work(self) -> None:
        while (group := self._next_pass()) is not None:
            self._busy.set()
            try:
                self._run(group)
            finally:
                self._busy.clear()

    def _run(self, group: list[_Job]) -> None:
        """One pass: its jobs' futures get their outcomes. A long pass lets short jobs in at its reports
        between batches (``_overtake``)."""
        group = [job for job in group if _start(job)]
        if not group:
            return
        long = self.overtake_s > 0 and not self._overtaking and sum(job.seconds for job in group) > self.overtake_s
        between = (lambda: self._overtake(group)) if long else None
        if group[0].batching is None:
            job = group[0]
            job.token._between = between
            try:
                outcomes = [_outcome(lambda: job.run(job.token))]
            finally:
                job.token._between = None
        else:
            outcomes = _outcomes(group, between)
        for job, outcome in zip(group, outcomes):
            if isinstance(outcome, BaseException):
                job.future.set_exception(outcome)
            else:
                job.future.set_result(outcome)

    def _overtake(self, running: list[_Job]) -> None:
        """Run the short jobs waiting now (not those that arrive while they run: the long pass goes on
        after them), in passes of their own, inside the running pass, those of least audio first (a live
        update, which holds none, before the uploads: else it waits for every short upload at each report)."""
        model = running[0].model
        with self._ready:
            now = {id(job) for job in self._jobs
                   if job.seconds <= self.overtake_s and (job.model is None or job.model == model)}
        if not now:
            return
        log.info("%d short jobs run inside a pass of %.0f s of audio", len(now), sum(job.seconds for job in running))
        self._overtaking = True
        try:
            while True:
                with self._ready:
                    group = None if self._closed else self._take(lambda job: id(job) in now, shortest=True)
                if group is None:
                    return
                self._run(group)
        finally:
            self._overtaking = False


def _start(job: _Job) -> bool:
    """Whether the job still runs (its requester may have gone while it waited)."""
    if not job.future.set_running_or_notify_cancel():
        return False
    if job.token.cancelled:
        job.future.set_exception(Cancelled())
        return False
    return True


def _outcome(run: Callable[[], Any]) -> Any:
    try:
        return run()
    except (Cancelled, Exception) as exc:  # the requester decides what a failure means
        return exc


def _outcomes(group: list[_Job], between: Callable[[], None] | None) -> list[Any]:
    """One pass for the group's jobs: each one's result or exception (all the pass's, when it failed);
    ``between``: what runs at its reports between batches."""
    tokens = [job.token for job in group]

    def check(between_batches: bool = False) -> None:
        if all(t.cancelled for t in tokens):
            raise Cancelled
        if between_batches and between is not None:
            between()

    batching = group[0].batching
    outcome = _outcome(lambda: batching.run_many([job.batching.payload for job in group], check))
    if isinstance(outcome, BaseException):
        return [outcome] * len(group)
    if len(outcome) != len(group):
        return [RuntimeError(f"a pass of {len(group)} jobs gave {len(outcome)} results")] * len(group)
    return [Cancelled() if t.cancelled else o for t, o in zip(tokens, outcome)]
