"""Playing a recording through a live transcriber as if it were spoken now (the CLI's ``--live``),
or on a simulated clock (the benchmark), with the latency of every confirmed word; or listening to
audio as it arrives (``listen``: ``transcribe - --live`` on a microphone's pipe).

Audio piece k (``chunk_s`` seconds) arrives at (k+1)·chunk_s. An update starts as soon as the
engine is free and a piece has arrived, and takes every piece arrived by then (whisper_streaming's
online mode: an update slower than a piece makes the next one bigger rather than queueing).
A word's latency is the time its update ended less the word's end in the audio; an update's lag
is its end less the end of the audio it had.
"""

from __future__ import annotations

import time
from bisect import bisect_left
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from specwhisper.results.transcript import Word
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.live.stream import StreamingTranscriber, StreamUpdate


class Clock(Protocol):
    def now(self) -> float: ...

    def wait_until(self, t: float) -> None: ...

    def spent(self, seconds: float) -> None:
        """An update computed for ``seconds`` (a wall clock saw them pass already)."""


class WallClock:
    """Real time since the start of the replay."""

    def __init__(self):
        self.start = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.start

    def wait_until(self, t: float) -> None:
        time.sleep(max(0.0, t - self.now()))

    def spent(self, seconds: float) -> None:
        pass


@dataclass
class SimulatedClock:
    """Time that advances by the audio waited for and the updates' measured compute, nothing else:
    a replay on it runs as fast as the machine can and still reports real-time latencies."""

    t: float = 0.0

    def now(self) -> float:
        return self.t

    def wait_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def spent(self, seconds: float) -> None:
        self.t += seconds


@dataclass
class Replay:
    words: list[Word] = field(default_factory=list)
    latencies: list[float] = field(default_factory=list)  # per confirmed word
    lags: list[float] = field(default_factory=list)  # per update
    compute: float = 0.0  # seconds of all updates
    updates: int = 0


def replay(transcriber: StreamingTranscriber, audio: np.ndarray, chunk_s: float = 1.0, clock: Clock | None = None,
           on_update: Callable[[StreamUpdate], None] | None = None) -> Replay:
    """Play ``audio`` through ``transcriber`` on ``clock`` (default: the wall clock), then finish."""
    if not 0.05 <= chunk_s <= 10.0:
        raise ValueError(f"live piece length must be between 0.05 and 10 s, got {chunk_s}")
    clock = clock or WallClock()
    step = int(round(chunk_s * SAMPLE_RATE))
    ends = [min(a + step, len(audio)) for a in range(0, len(audio), step)]
    out, pushed, k = Replay(), 0, 0
    while k < len(ends):
        clock.wait_until(ends[k] / SAMPLE_RATE)
        while k < len(ends) and ends[k] / SAMPLE_RATE <= clock.now() + 1e-9:  # every piece arrived by now
            transcriber.push(audio[pushed : ends[k]])
            pushed = ends[k]
            k += 1
        update = transcriber.update() if k < len(ends) else transcriber.finish()
        clock.spent(update.seconds)
        _record(out, update, clock.now(), pushed, on_update)
    return out


def listen(transcriber: StreamingTranscriber, take: Callable[[], np.ndarray | None],
           on_update: Callable[[StreamUpdate], None] | None = None) -> Replay:
    """Audio as it arrives: ``take()`` waits for some and gives all that arrived since its last call (None
    at the end of the stream); each take is pushed and updated on, whisper_streaming's online mode as in
    ``replay`` (an update slower than the audio makes the next take bigger). The end finishes the stream.
    A word's latency is from the take that brought its last sample to the update that confirmed it."""
    out, heard, start = Replay(), [0], time.monotonic()
    arrived = [0.0]  # the wall clock (from ``start``) of each take, and its last sample in ``heard``
    while (audio := take()) is not None:
        transcriber.push(audio)
        heard.append(heard[-1] + len(audio))
        arrived.append(time.monotonic() - start)
        _record(out, transcriber.update(), time.monotonic() - start, heard[-1], on_update, heard, arrived)
    _record(out, transcriber.finish(), time.monotonic() - start, heard[-1], on_update, heard, arrived)
    return out


def _record(out: Replay, update: StreamUpdate, done: float, pushed: int,
            on_update: Callable[[StreamUpdate], None] | None, heard: list[int] | None = None,
            arrived: list[float] | None = None) -> None:
    """One update's figures; ``done``: its end on the clock. A word's audio arrived at ``word.end`` on that
    clock (a replay's), or at its take's time (``heard``: each take's last sample, ``arrived``: its time)."""
    out.compute += update.seconds
    out.updates += 1
    out.lags.append(done - pushed / SAMPLE_RATE if heard is None else done - arrived[-1])
    out.words += update.confirmed.words
    for w in update.confirmed.words:
        at = w.end if heard is None else arrived[min(bisect_left(heard, w.end * SAMPLE_RATE), len(arrived) - 1)]
        out.latencies.append(done - at)
    if on_update is not None:
        on_update(update)
