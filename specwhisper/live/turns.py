"""Speech turns in live audio: where a speaker starts and where a pause long enough ends the turn, as
OpenAI's Realtime API's ``server_vad`` turn detection reports them (``specwhisper.serving.http.realtime_ws``).

The speech probabilities are silero-vad's, window by window as the audio arrives
(``specwhisper.audio.vad.SpeechProbStream``), read with silero's own streaming rule (its ``VADIterator``):
a turn starts at the first window at or over the threshold; a pause begins at a window under the
threshold less 0.15 and is forgotten at the next window at or over the threshold; a pause of
``silence_duration_ms`` ends the turn where it reaches that length. What follows a turn is heard alone
(silero's state reset), as the offline pipeline hears every pause again alone
(``VoiceActivityDetector.rehear``): after loud speech silero's state missed a quiet clip that follows it
(bench/realtime.py's talk, 33-37 s at -67 dB: at most 0.06 in the stream, 0.66 on average heard alone).

``semantic_vad`` (OpenAI's turn detection that waits longer when the speaker has not finished) reads the
same probabilities, and asks the turn's text so far (``finished``: its live hypothesis ends a sentence,
with ``.``, ``?`` or ``!``) at each pause: a finished sentence ends the turn after ``silence_duration_ms``,
an unfinished one ("and so my fellow Americans", "I was thinking, um") only after the eagerness's
longest wait, OpenAI's: 8 s low, 4 s medium and auto, 2 s high.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.audio.vad import WINDOW, VoiceActivityDetector

HYSTERESIS = 0.15  # silero's: a pause needs a probability this far under the threshold
EAGERNESS_WAIT_MS = {"low": 8000, "medium": 4000, "auto": 4000, "high": 2000}  # semantic_vad's, unfinished sentences


@dataclass(frozen=True)
class TurnSettings:
    """OpenAI's ``server_vad`` settings, with its defaults; ``eagerness`` set: its ``semantic_vad``."""

    threshold: float = 0.5
    prefix_padding_ms: int = 300  # audio before the turn's first speech that the turn takes along
    silence_duration_ms: int = 500  # a pause this long ends the turn (semantic_vad: a finished sentence's)
    eagerness: str | None = None  # semantic_vad's: how long an unfinished sentence may pause (EAGERNESS_WAIT_MS)

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold must be between 0 and 1 (exclusive), got {self.threshold:g}")
        if not 0 <= self.prefix_padding_ms <= 10_000:
            raise ValueError(f"prefix_padding_ms must be 0 to 10000, got {self.prefix_padding_ms}")
        if not 0 <= self.silence_duration_ms <= 10_000:
            raise ValueError(f"silence_duration_ms must be 0 to 10000, got {self.silence_duration_ms}")
        if self.eagerness is not None and self.eagerness not in EAGERNESS_WAIT_MS:
            raise ValueError(f"eagerness must be one of {', '.join(EAGERNESS_WAIT_MS)}, got {self.eagerness!r}")


@dataclass(frozen=True)
class TurnEvent:
    """``kind``: "started" or "stopped"; ``sample``: where, in samples (16 kHz) from the detector's ``start``:
    a start's first speech window, a stop's end of the pause that ended the turn."""

    kind: str
    sample: int


class TurnDetector:
    """Feed 16 kHz audio in pieces of any length; each call gives the turns' starts and stops it completed.
    ``start``: the sample of the stream where the detector's audio begins (its events are in the stream's time);
    ``finished``: whether the open turn's text so far ends a sentence (read by ``semantic_vad`` only)."""

    def __init__(self, vad: VoiceActivityDetector, settings: TurnSettings, start: int = 0,
                 finished: Callable[[], bool] = lambda: True):
        self.settings = settings
        self.start = start
        self.finished = finished
        self.probs = vad.stream()
        self.speaking = False
        self._pause_from: int | None = None  # where the current pause began (samples)
        self._silence = _samples(settings.silence_duration_ms)
        self._unfinished = self._silence if settings.eagerness is None else _samples(EAGERNESS_WAIT_MS[settings.eagerness])

    def feed(self, audio: np.ndarray) -> list[TurnEvent]:
        events = []
        on, off = self.settings.threshold, self.settings.threshold - HYSTERESIS
        probs = self.probs.feed(audio)
        first, i = self.probs.windows - len(probs), 0
        while i < len(probs):
            p, start = probs[i], self.start + (first + i) * WINDOW
            if not self.speaking:
                if p >= on:
                    self.speaking, self._pause_from = True, None
                    events.append(TurnEvent("started", start))
                i += 1
                continue
            if p >= on:
                self._pause_from = None
            elif p < off and self._pause_from is None:
                self._pause_from = start
            end = start + WINDOW
            if self._pause_from is not None and end - self._pause_from >= self._silence and (
                    end - self._pause_from >= self._unfinished or self.finished()):
                self.speaking, self._pause_from = False, None
                events.append(TurnEvent("stopped", end))
                self.probs.restart(after=first + i)  # what follows is heard alone (the windows after, again)
                probs = self.probs.feed(np.zeros(0, np.float32))
                first, i = self.probs.windows - len(probs), 0
                continue
            i += 1
        return events

    def reset(self) -> None:
        """The turn ended elsewhere (the client committed or cleared the buffer): the next speech starts one."""
        self.speaking, self._pause_from = False, None


def _samples(ms: int) -> int:
    return int(ms * SAMPLE_RATE / 1000)
