"""The model worker's passes (specwhisper.serving.http.worker): jobs of one key that wait together run
in one pass, within its limits of jobs and seconds; other keys, plain jobs and jobs of unknown length
keep their own passes, in arrival order; a pass that fails fails each of its jobs; a pass stops only
when all of its requesters have gone; a full queue refuses. The transcription passes themselves run
on real audio in tests/test_openai_api.py."""

from __future__ import annotations

import math
import threading

import pytest

from specwhisper.serving.http.worker import Batching, Cancelled, ModelWorker, QueueFull


class Recorder:
    """A pass function that records the payloads of each pass and answers each payload doubled."""

    def __init__(self, fail: bool = False):
        self.passes: list[list] = []
        self.fail = fail

    def __call__(self, payloads: list, check) -> list:
        self.passes.append(list(payloads))
        check()
        if self.fail:
            raise ValueError("the pass failed")
        return [p * 2 for p in payloads]


def _held(worker: ModelWorker) -> threading.Event:
    """Keeps the worker busy until the event is set, so that the jobs submitted meanwhile wait together."""
    release, started = threading.Event(), threading.Event()
    worker.submit(lambda token: (started.set(), release.wait(30)))
    assert started.wait(10)
    return release


def test_jobs_of_one_key_share_a_pass_within_its_limits():
    worker = ModelWorker(max_waiting=16, max_group=3, max_group_s=100.0)
    run = Recorder()
    release = _held(worker)
    jobs = [("a", 1, 10.0), ("b", 2, 10.0), ("a", 3, 10.0), ("a", 4, 85.0), ("a", 5, 500.0), ("a", 6, 10.0),
            ("a", 7, math.inf), ("a", 8, 10.0), ("a", 9, 10.0)]
    futures = [worker.submit_batching(Batching(key, n, s, run))[0] for key, n, s in jobs]
    release.set()
    assert [f.result(10) for f in futures] == [2, 4, 6, 8, 10, 12, 14, 16, 18]
    # the first waiting job takes the later ones of its key that fit: 3 jobs at most, 100 s besides its own;
    # one of unknown length joins no other's pass
    assert run.passes == [[1, 3, 4], [2], [5, 6, 8], [7, 9]]
    worker.close(5)


def test_one_job_per_pass_by_default_and_plain_jobs_alone():
    worker = ModelWorker(max_waiting=8)
    run = Recorder()
    release = _held(worker)
    futures = [worker.submit_batching(Batching("a", n, 1.0, run))[0] for n in (1, 2)]
    plain = worker.submit(lambda token: "plain")[0]
    release.set()
    assert [f.result(10) for f in futures] == [2, 4] and plain.result(10) == "plain"
    assert run.passes == [[1], [2]]
    worker.close(5)


def test_a_failed_pass_fails_each_job_and_the_next_pass_runs():
    worker = ModelWorker(max_waiting=8, max_group=4, max_group_s=100.0)
    bad, good = Recorder(fail=True), Recorder()
    release = _held(worker)
    failing = [worker.submit_batching(Batching("bad", n, 1.0, bad))[0] for n in (1, 2)]
    ok = worker.submit_batching(Batching("good", 3, 1.0, good))[0]
    release.set()
    for f in failing:
        with pytest.raises(ValueError, match="the pass failed"):
            f.result(10)
    assert ok.result(10) == 6 and bad.passes == [[1, 2]]
    worker.close(5)


def test_a_pass_stops_only_when_all_its_requesters_have_gone():
    worker = ModelWorker(max_waiting=8, max_group=4, max_group_s=100.0)
    checked = threading.Event()
    go_on = threading.Event()
    stops: list[bool] = []

    def run(payloads, check):
        checked.set()
        go_on.wait(10)
        try:
            check()
        except Cancelled:
            stops.append(True)
            raise
        stops.append(False)
        return [p for p in payloads]

    release = _held(worker)
    (f1, t1), (f2, t2) = (worker.submit_batching(Batching("a", n, 1.0, run)) for n in (1, 2))
    release.set()
    assert checked.wait(10)
    t1.cancel()  # one requester gone: the pass goes on, and only the other gets its answer
    go_on.set()
    with pytest.raises(Cancelled):
        f1.result(10)
    assert f2.result(10) == 2 and stops == [False]

    checked.clear(), go_on.clear()
    release = _held(worker)
    (f3, t3), (f4, t4) = (worker.submit_batching(Batching("a", n, 1.0, run)) for n in (3, 4))
    release.set()
    assert checked.wait(10)
    t3.cancel(), t4.cancel()  # both gone: the pass stops at its next progress report
    go_on.set()
    for f in (f3, f4):
        with pytest.raises(Cancelled):
            f.result(10)
    assert stops == [False, True]
    worker.close(5)


def test_a_full_queue_refuses_and_bad_limits_are_refused():
    worker = ModelWorker(max_waiting=2, max_group=4, max_group_s=100.0)
    release = _held(worker)
    run = Recorder()
    futures = [worker.submit_batching(Batching("a", n, 1.0, run))[0] for n in (1, 2)]
    with pytest.raises(QueueFull, match="2 requests are already waiting"):
        worker.submit_batching(Batching("a", 3, 1.0, run))
    release.set()
    assert [f.result(10) for f in futures] == [2, 4]
    worker.close(5)
    for bad in ({"max_waiting": 0}, {"max_waiting": 1, "max_group": 0}, {"max_waiting": 1, "max_group_s": -1.0}):
        with pytest.raises(ValueError):
            ModelWorker(**bad)
