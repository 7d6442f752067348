"""The local batch engine: audio decoded on a background thread while the models work, and the
chunks of several files decoded together (Pipeline.run_many).

An engine turns a list of jobs into events: ``Started`` when files go to the models, ``Finished``
per file with its transcript or its one-line error. The batch driver (specwhisper/batch/runner.py) is the
only one that writes outputs and the job database.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.results.transcript import Transcript
from specwhisper.batch.inputs import Job
from specwhisper.pipeline.config import PipelineConfig, RunOptions
from specwhisper.pipeline.options import read_align_text
from specwhisper.batch.jobs import file_sha256
from specwhisper.messages import one_line, printable


@dataclass
class Started:
    jobs: list[Job]


@dataclass
class Finished:
    job: Job
    transcript: Transcript | None
    error: str | None  # one line, when the file failed
    sha256: str | None


Event = Started | Finished


@dataclass(frozen=True)
class GroupLimits:
    """How many files have their chunks batched together, and how much decoded audio waits ahead."""

    max_files: int = 16
    max_seconds: float = 600.0  # audio per group; a longer file forms a group of its own
    prefetch_seconds: float = 3600.0  # decoded audio held ahead of the models (float32: 230 MB per hour)


def file_error(exc: BaseException, name: str) -> str:
    """A user-facing one-line error naming the file."""
    msg, name = one_line(exc), printable(name)
    return msg if msg.startswith(name) else f"{name}: {msg}"


def transcribe_group(pipeline, audios: list[np.ndarray], sources: list[str], options: RunOptions,
                     texts: list[str] | None = None, checkpoint: Path | None = None) -> list[Transcript | str]:
    """Transcripts of several files with their chunks batched together (``texts``: each one's text to
    align); when the shared run fails, each file is run alone so that only the failing one is lost (its
    entry is its one-line error). ``checkpoint``: where a group of one file keeps its finished batches
    (specwhisper.pipeline.checkpoint), so that an interrupted run of it resumes there."""
    if len(audios) > 1:
        try:
            return list(pipeline.run_many(audios, options, sources=sources, texts=texts))
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception:
            pass  # each file alone, below
    outcomes: list[Transcript | str] = []
    for n, (audio, source) in enumerate(zip(audios, sources)):
        try:
            alone = options if texts is None else replace(options, align_text=texts[n])
            outcomes.append(pipeline.run(audio, alone, source=source, checkpoint=checkpoint if len(audios) == 1 else None))
        except (KeyboardInterrupt, MemoryError):
            raise
        except Exception as exc:
            outcomes.append(file_error(exc, source))
    return outcomes


@dataclass
class Loaded:
    job: Job
    audio: np.ndarray | None
    error: str | None
    sha256: str | None
    load_seconds: float
    text: str | None = None  # the job's text to align

    @property
    def seconds(self) -> float:
        return 0.0 if self.audio is None else self.audio.shape[-1] / SAMPLE_RATE  # multichannel: channels x samples


def load_job(job: Job, max_seconds: float, channels: bool = False) -> Loaded:
    t = time.perf_counter()
    try:
        sha = file_sha256(job.path)
    except OSError as exc:
        return Loaded(job, None, file_error(exc, str(job.path)), None, time.perf_counter() - t)
    try:
        audio = load_audio(job.path, max_seconds=max_seconds, channels=channels)
    except Exception as exc:  # a bad file is recorded and never stops the others
        return Loaded(job, None, file_error(exc, str(job.path)), sha, time.perf_counter() - t)
    text = None
    if job.text is not None:
        try:
            text = read_align_text(job.text)
        except ValueError as exc:
            return Loaded(job, None, f"{job.path}: the text to align, {exc}", sha, time.perf_counter() - t)
    return Loaded(job, audio, None, sha, time.perf_counter() - t, text)


class AudioPrefetcher:
    """Decodes upcoming files on a background thread (soundfile, soxr and ffmpeg release the GIL),
    holding at most ``limits.prefetch_seconds`` of decoded audio ahead of the consumer."""

    def __init__(self, jobs: list[Job], load: Callable[[Job], Loaded], limits: GroupLimits):
        self._jobs = list(jobs)
        self._load = load
        self._limits = limits
        self._ready: deque[Loaded] = deque()
        self._held = 0.0
        self._finished = False
        self._closed = False
        self._cond = threading.Condition()
        self._thread = threading.Thread(target=self._run, name="audio-prefetch", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        for job in self._jobs:
            with self._cond:
                while self._ready and self._held >= self._limits.prefetch_seconds and not self._closed:
                    self._cond.wait()
                if self._closed:
                    return
            item = self._load(job)
            with self._cond:
                self._ready.append(item)
                self._held += item.seconds
                self._cond.notify_all()
        with self._cond:
            self._finished = True
            self._cond.notify_all()

    def take(self) -> list[Loaded]:
        """The next group: waits for one file, then adds the ones already decoded, within the limits.
        Empty when every file has been taken."""
        with self._cond:
            while not self._ready and not self._finished:
                self._cond.wait(timeout=0.5)
            group: list[Loaded] = []
            seconds = 0.0
            while self._ready and len(group) < self._limits.max_files:
                nxt = self._ready[0]
                if group and seconds + nxt.seconds > self._limits.max_seconds:
                    break
                group.append(self._ready.popleft())
                seconds += nxt.seconds
                self._held -= nxt.seconds
            self._cond.notify_all()
            return group

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._thread.join(timeout=60)


class LocalEngine:
    """One process: the models load once, while the first files decode."""

    def __init__(self, config: PipelineConfig, options: RunOptions, limits: GroupLimits | None = None):
        self.config = config
        self.options = options
        self.limits = limits or GroupLimits()
        self._loaded = None  # the pipeline, kept from one run to the next (a watched folder's looks)

    def start(self) -> None:
        """Nothing to start: the models load in ``run``, while the first files decode."""

    def close(self) -> None:
        """Nothing to end: ``run`` stops its decoding thread when it is closed."""

    def _pipeline(self):
        from specwhisper.pipeline import core  # looked up at run time: tests hand in an already loaded pipeline

        if self._loaded is None:
            self._loaded = core.Pipeline(self.config)
        return self._loaded

    def run(self, jobs: list[Job]) -> Iterator[Event]:
        from specwhisper.pipeline.checkpoint import checkpoint_path

        prefetch = AudioPrefetcher(jobs, lambda job: load_job(job, self.options.max_audio_s, self.options.multichannel), self.limits)
        try:
            pipeline = self._pipeline() if jobs else None
            if pipeline is not None:  # options the model cannot take stop the batch, not each file
                self.options.decode.validate(pipeline.asr.special)
            while group := prefetch.take():
                yield Started([item.job for item in group])
                ok = [item for item in group if item.error is None]
                for item in group:
                    if item.error is not None:
                        yield Finished(item.job, None, item.error, item.sha256)
                texts = None if all(i.text is None for i in ok) else [i.text for i in ok]
                alone = checkpoint_path(ok[0].job.out_dir, ok[0].job.stem) if len(ok) == 1 else None
                outcomes = transcribe_group(pipeline, [i.audio for i in ok], [str(i.job.path) for i in ok], self.options, texts, alone)
                for item, outcome in zip(ok, outcomes):
                    if isinstance(outcome, str):
                        yield Finished(item.job, None, outcome, item.sha256)
                    else:
                        outcome.timings["load_audio"] = round(item.load_seconds, 3)
                        yield Finished(item.job, outcome, None, item.sha256)
        finally:
            prefetch.close()
