"""The model worker's passes (specwhisper.serving.worker): jobs of one key that wait together run
in one pass, within its limits of jobs and seconds; other keys, plain jobs and jobs of unknown length
keep their own passes, in arrival order; a pass that fails fails each of its jobs; a pass stops only
when all of its requesters have gone; a full queue refuses; short jobs run inside a long pass at its
reports between batches. The transcription passes themselves run on real audio in tests/test_openai_api.py
and tests/test_http_overtake.py."""

from __future__ import annotations

import math
import threading

import pytest

from specwhisper.serving.worker import Batching, Cancelled, ModelWorker, QueueFull


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
    for bad in ({"max_waiting": 0}, {"max_waiting": 1, "max_group": 0}, {"max_waiting": 1, "max_group_s": -1.0},
                {"max_waiting": 1, "overtake_s": -1.0}, {"max_waiting": 1, "overtake_s": math.nan}):
        with pytest.raises(ValueError):
            ModelWorker(**bad)


class Batches:
    """A long pass of three batches that records them in ``log``, reports between batches, and waits for
    ``go`` after its first batch (so that the test can queue jobs behind it)."""

    def __init__(self, log: list):
        self.log, self.started, self.go = log, threading.Event(), threading.Event()

    def __call__(self, payloads: list, check) -> list:
        for b in range(3):
            self.log.append(f"long {b}")
            if b == 0:
                self.started.set()
                self.go.wait(10)
            check(between_batches=True)
        return payloads


def _logged(log: list, name: str, then=None):
    def run(payloads, check):
        log.append(name)
        check(between_batches=True)  # a pass run inside another lets none in
        if then is not None:
            then()
        return payloads
    return run


def test_short_jobs_run_inside_a_long_pass_between_its_batches():
    worker = ModelWorker(max_waiting=16, max_group=4, max_group_s=100.0, overtake_s=30.0)
    log: list = []
    long = Batches(log)
    later: list = []
    first = worker.submit_batching(Batching("long", "L", 600.0, long, model="m"))[0]
    assert long.started.wait(10)
    jobs = [
        worker.submit_batching(Batching("other model", "O", 5.0, _logged(log, "other model"), model="n"))[0],
        worker.submit_batching(Batching("long too", "T", 100.0, _logged(log, "100 s"), model="m"))[0],
        # two short uploads of one key share their pass; one arriving while it runs waits for the next report
        worker.submit_batching(Batching("short", "A", 5.0, _logged(log, "short pass", then=lambda: later.append(
            worker.submit_batching(Batching("late", "C", 5.0, _logged(log, "late"), model="m"))[0])), model="m"))[0],
        worker.submit_batching(Batching("short", "B", 5.0, _logged(log, "never alone"), model="m"))[0],
        worker.submit(lambda token: log.append("live update"), seconds=0.0)[0],  # a live stream's: no model to load
        worker.submit_batching(Batching("bad", "X", 5.0, Recorder(fail=True), model="m"))[0],  # fails alone
        worker.submit(lambda token: log.append("unknown length"))[0],
    ]
    long.go.set()
    assert first.result(10) == "L"
    with pytest.raises(ValueError, match="the pass failed"):
        jobs.pop(-2).result(10)
    for f in jobs + later:
        f.result(10)
    assert log == ["long 0", "live update", "short pass", "long 1", "late", "long 2",  # least audio first
                   "other model", "100 s", "unknown length"]
    worker.close(5)


def test_a_long_plain_job_lets_short_ones_in_and_overtaking_can_be_off():
    for overtake_s, expected in ((30.0, ["long 0", "update", "short", "long 1", "long 2"]),
                                 (0.0, ["long 0", "long 1", "long 2", "short", "update"])):
        worker = ModelWorker(max_waiting=8, overtake_s=overtake_s)
        log: list = []
        long = Batches(log)
        first = worker.submit(lambda token: long([], token.check), seconds=600.0, model="m")[0]
        assert long.started.wait(10)
        short = worker.submit_batching(Batching("short", "A", 5.0, _logged(log, "short"), model="m"))[0]
        update = worker.submit(lambda token: log.append("update"), seconds=0.0)[0]  # no audio: still waits when off
        long.go.set()
        first.result(10), short.result(10), update.result(10)
        assert log == expected, overtake_s
        worker.close(5)
