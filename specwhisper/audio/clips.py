"""openai-whisper's and faster-whisper's ``clip_timestamps``: the stretches of a file to transcribe,
as ``start,end,start,end,...`` seconds; a last start without an end runs to the file's end. The rest
of the file is not heard; times stay the file's."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE

Clip = tuple[float, float | None]  # seconds; None: to the file's end


def parse_clips(value: str | Sequence[float]) -> tuple[Clip, ...]:
    """``"0,10,20,30"`` or ``[0, 10, 20, 30]`` as ``((0, 10), (20, 30))``; ``"20"`` as ``((20, None),)``.
    Raises ValueError (one line) unless every value is a number of seconds >= 0 and the clips run
    forward: each ends after it starts, and starts at or after the end of the one before."""
    items = value.split(",") if isinstance(value, str) else list(value)
    if not items or (isinstance(value, str) and not value.strip()):
        raise ValueError("needs start,end seconds (e.g. 0,30 or 0,30,60,90)")
    numbers = []
    for item in items:
        try:
            if isinstance(item, bool):
                raise ValueError
            x = float(item)
        except (TypeError, ValueError):
            raise ValueError(f"must be start,end seconds separated by commas, got '{_short(item)}'") from None
        if not math.isfinite(x) or x < 0:
            raise ValueError(f"must be finite seconds >= 0, got {_short(item)}")
        numbers.append(x)
    clips = tuple(zip(numbers[::2], numbers[1::2] + [None]))
    return check_clips(clips)


def check_clips(clips: Sequence[Clip]) -> tuple[Clip, ...]:
    """``clips`` as a tuple, when they run forward (``parse_clips``); ValueError otherwise."""
    before = 0.0
    for k, (start, end) in enumerate(clips):
        if end is not None and end <= start:
            raise ValueError(f"each clip must end after it starts, got {_num(start)},{_num(end)}")
        if start < before:
            raise ValueError(f"clips must be in order and not overlap: {_num(start)} starts before {_num(before)}")
        if end is None and k != len(clips) - 1:
            raise ValueError("only the last clip may run to the file's end")
        before = start if end is None else end
    return tuple(clips)


def clip_spans(clips: Sequence[Clip], n_samples: int) -> list[tuple[int, int]]:
    """The clips as sample spans of a file of ``n_samples``, cut at its end; a clip that starts at or
    after the end is left out."""
    spans = []
    for start, end in clips:
        a = round(start * SAMPLE_RATE)
        b = n_samples if end is None else min(n_samples, round(end * SAMPLE_RATE))
        if a < b:
            spans.append((a, b))
    return spans


def clips_left_out(clips: Sequence[Clip], n_samples: int) -> str | None:
    """What of ``clips`` a file of ``n_samples`` leaves out (``clip_spans``), in words; None: nothing."""
    seconds = n_samples / SAMPLE_RATE
    if not clip_spans(clips, n_samples):
        return f"no clip is within the {seconds:.1f} s of audio: nothing to transcribe"
    past = [_num(start) for start, _ in clips if round(start * SAMPLE_RATE) >= n_samples]
    if not past:
        return None
    return f"{'the clip' if len(past) == 1 else 'the clips'} from {', '.join(past)} s past the {seconds:.1f} s of audio left out"


@dataclass(frozen=True)
class ClipMap:
    """A file's clips (sample ``spans``, ``clip_spans``) back to back, as the diarization hears them, and
    times between the file and that audio."""

    spans: tuple[tuple[int, int], ...]

    def joined(self, audio: np.ndarray) -> np.ndarray:
        return np.concatenate([audio[a:b] for a, b in self.spans]) if self.spans else audio[:0]

    def to_joined(self, start: float, end: float) -> list[tuple[float, float]]:
        """The parts of the file's ``[start, end]`` (seconds) inside the clips, in the joined audio's time."""
        out, before = [], 0
        for a, b in self.spans:
            lo, hi = max(start, a / SAMPLE_RATE), min(end, b / SAMPLE_RATE)
            if lo <= hi:
                out.append((lo - a / SAMPLE_RATE + before / SAMPLE_RATE, hi - a / SAMPLE_RATE + before / SAMPLE_RATE))
            before += b - a
        return out

    def to_file(self, start: float, end: float) -> list[tuple[float, float]]:
        """The joined audio's ``[start, end]`` (seconds) in the file's time, parted where two clips meet."""
        out, before = [], 0
        for a, b in self.spans:
            lo, hi = max(start, before / SAMPLE_RATE), min(end, (before + b - a) / SAMPLE_RATE)
            if lo < hi:
                out.append((lo - before / SAMPLE_RATE + a / SAMPLE_RATE, hi - before / SAMPLE_RATE + a / SAMPLE_RATE))
            before += b - a
        return out


def clips_text(clips: Sequence[Clip]) -> str:
    """The clips as ``clip_timestamps`` writes them (``parse_clips``' inverse)."""
    return ",".join(_num(x) for clip in clips for x in clip if x is not None)


def _num(x: float) -> str:
    return f"{x:.10g}"


def _short(value, limit: int = 40) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
