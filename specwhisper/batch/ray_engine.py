"""`--engine ray`: the batch on a Ray cluster, one actor per worker holding a loaded Pipeline.

The driver reads each file and ships its bytes (no shared file system needed), actors decode and
transcribe groups of files (chunks batched across the group, as in the local engine) and send back
transcripts; the driver alone writes outputs and the job database, so no file is lost or done twice.
A group whose actor dies is given to a fresh actor once, then recorded as failed.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from specwhisper.batch.engine import Event, Finished, Started, file_error, transcribe_group
from specwhisper.batch.inputs import Job
from specwhisper.pipeline.config import PipelineConfig, RunOptions
from specwhisper.messages import one_line

Outcome = tuple  # (Transcript | None, error: str | None, load_seconds: float)


class RayEngineError(Exception):
    """Ray could not be started or reached; the message is one line."""


class BatchWorker:
    """A Ray actor: loads the models once, then transcribes groups of files sent as bytes."""

    def __init__(self, config: PipelineConfig, threads: int):
        import warnings

        from dataclasses import replace

        from specwhisper.pipeline.core import Pipeline

        warnings.filterwarnings("ignore")
        self.pipeline = Pipeline(replace(config, threads=threads))

    def check(self, options: RunOptions) -> int:
        """Raises ValueError for options this model cannot take; returns the worker's pid."""
        options.decode.validate(self.pipeline.asr.special)
        return os.getpid()

    def run(self, items: list[tuple[str, bytes]], options: RunOptions) -> list[Outcome]:
        from specwhisper.audio.loading import load_audio

        audios, names, loaded = [], [], {}
        errors: dict[int, tuple[str, float]] = {}
        with tempfile.TemporaryDirectory(prefix="specwhisper-") as tmp:
            for i, (name, data) in enumerate(items):
                # the extension alone: a name of 250 bytes with a prefix is past the file system's 255
                local = Path(tmp) / f"{i}{Path(name).suffix[:16]}"
                t = time.perf_counter()
                try:
                    local.write_bytes(data)
                    audio = load_audio(local, max_seconds=options.max_audio_s, channels=options.multichannel)
                except Exception as exc:
                    errors[i] = (file_error(exc, str(local)).replace(str(local), name), time.perf_counter() - t)
                    continue
                loaded[i] = (len(audios), time.perf_counter() - t)
                audios.append(audio)
                names.append(name)
        outcomes = transcribe_group(self.pipeline, audios, names, options)
        results: list[Outcome] = []
        for i in range(len(items)):
            if i in errors:
                results.append((None, errors[i][0], errors[i][1]))
                continue
            j, seconds = loaded[i]
            out = outcomes[j]
            results.append((None, out, seconds) if isinstance(out, str) else (out, None, seconds))
        return results


def _probe(address: str, timeout: float = 5.0) -> None:
    """Fail fast on a cluster address nobody answers at (Ray itself would retry for minutes)."""
    import socket

    hostport = address.removeprefix("ray://")
    host, sep, port = hostport.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return  # 'auto' or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as exc:
        raise RayEngineError(f"cannot reach a Ray cluster at {address} ({exc.strerror or exc})") from exc


@dataclass
class _Task:
    jobs: list[Job]
    sha256: list[str | None]
    tries: int = 0


class RayEngine:
    """``start()`` connects (``address``) or starts a local Ray with ``workers`` CPUs and creates the
    actors (once: ``run`` may be called again for a watched folder's later looks); ``run(jobs)`` yields
    the same events as the local engine; ``close()`` ends the actors."""

    def __init__(self, config: PipelineConfig, options: RunOptions, address: str | None = None,
                 workers: int | None = None, max_files_per_task: int = 16, threads_per_worker: int = 1):
        if workers is not None and workers < 1:
            raise ValueError(f"--workers must be >= 1, got {workers}")
        self.config = config
        self.options = options
        self.address = address
        self.workers = workers
        self.max_files_per_task = max_files_per_task
        self.threads = config.threads or threads_per_worker
        self._actors: list = []
        self._started_ray = False
        self._worker_cls = None

    def start(self) -> None:
        import ray

        if self._actors:  # a watched folder's later look: the actors wait with their models loaded
            return
        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if not ray.is_initialized():
            local = self.address in (None, "local")
            if not local:
                _probe(self.address)
            try:
                ray.init(
                    address="local" if local else self.address,
                    num_cpus=(self.workers or os.cpu_count() or 1) * self.threads if local else None,
                    include_dashboard=False,
                    logging_level="ERROR",
                    log_to_driver=False,
                    # the workers' OpenMP waits passively, as ours does (specwhisper.hardware.threads), whoever imports torch first
                    runtime_env={"env_vars": {"OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY", "PASSIVE")}},
                )
            except (ConnectionError, RuntimeError, ValueError) as exc:
                raise RayEngineError(f"cannot start or reach Ray at {self.address or 'a local instance'}: "
                                     + one_line(exc)) from exc
            self._started_ray = True
        cpus = int(ray.cluster_resources().get("CPU", 1))
        n = self.workers or max(1, cpus // self.threads)
        self._worker_cls = ray.remote(num_cpus=self.threads)(BatchWorker)
        self._actors = [self._new_actor() for _ in range(n)]
        try:  # models loaded, options checked, before any file is sent
            ray.get([actor.check.remote(self.options) for actor in self._actors])
        except (ray.exceptions.RayTaskError, ray.exceptions.RayActorError) as exc:
            self.close()
            cause = getattr(exc, "cause", None) or exc  # the worker's own exception, when Ray kept it
            lines = [line for line in str(cause).splitlines() if line.strip()]
            raise RayEngineError(f"Ray workers could not start: {lines[-1].strip() if lines else type(cause).__name__}") from exc

    def _new_actor(self):
        return self._worker_cls.remote(self.config, self.threads)

    def close(self) -> None:
        import ray

        for actor in self._actors:
            ray.kill(actor)
        self._actors = []
        if self._started_ray:
            ray.shutdown()
            self._started_ray = False

    def _payload(self, task: _Task) -> tuple[list[tuple[str, bytes]], list[Finished]]:
        """File bytes for the actor; files that cannot be read fail here."""
        items, failed, kept, shas = [], [], [], []
        for job in task.jobs:
            try:
                data = job.path.read_bytes()
            except OSError as exc:
                failed.append(Finished(job, None, file_error(exc, str(job.path)), None))
                continue
            items.append((str(job.path), data))
            kept.append(job)
            shas.append(hashlib.sha256(data).hexdigest())
        task.jobs, task.sha256 = kept, shas
        return items, failed

    def run(self, jobs: list[Job]) -> Iterator[Event]:
        import ray
        from ray.exceptions import RayActorError, WorkerCrashedError

        # Groups small enough that every actor gets about two, at most max_files_per_task files each.
        n = max(1, min(self.max_files_per_task, -(-len(jobs) // (2 * len(self._actors)))))
        queue = deque(_Task(jobs[i : i + n], []) for i in range(0, len(jobs), n))
        inflight: dict = {}  # ObjectRef -> (actor index, actor, task)

        def submit(idx: int) -> Iterator[Event]:
            while queue:
                task = queue.popleft()
                items, failed = self._payload(task)
                yield Started([f.job for f in failed] + task.jobs)
                yield from failed
                if task.jobs:
                    actor = self._actors[idx]
                    inflight[actor.run.remote(items, self.options)] = (idx, actor, task)
                    return

        for idx in range(len(self._actors)):
            for _ in range(2):  # two tasks queued per actor: the next one's bytes travel while one runs
                yield from submit(idx)
        while inflight:
            ready, _ = ray.wait(list(inflight), num_returns=1, timeout=0.5)
            for ref in ready:
                idx, actor, task = inflight.pop(ref)
                try:
                    outcomes = ray.get(ref)
                except (RayActorError, WorkerCrashedError) as exc:
                    if self._actors[idx] is actor:  # its other queued task fails too: replace it once
                        ray.kill(actor)
                        self._actors[idx] = self._new_actor()
                    if task.tries == 0:
                        task.tries += 1
                        queue.appendleft(task)
                    else:
                        msg = one_line(exc)
                        for job, sha in zip(task.jobs, task.sha256):
                            yield Finished(job, None, f"{job.path}: Ray worker died twice ({msg})", sha)
                    yield from submit(idx)
                    continue
                for job, sha, (transcript, error, load_s) in zip(task.jobs, task.sha256, outcomes):
                    if transcript is not None:
                        transcript.timings["load_audio"] = round(load_s, 3)
                    yield Finished(job, transcript, error, sha)
                yield from submit(idx)
