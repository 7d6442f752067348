"""What one transcription option is: its name, type, default, valid values, help text and the entry points that
take it, and the checks of a value with their one-line messages (the same at every entry point). The table of
every option is ``specwhisper.pipeline.options``."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

ENTRY_POINTS = ("cli", "http", "api", "ui")
SCOPES = ("load", "run", "output")


class OptionError(ValueError):
    """A value an option does not take; ``problem`` is the part every entry point words the same."""

    def __init__(self, option: Option, problem: str):
        super().__init__(f"{option.name}: {problem}")
        self.option = option
        self.problem = problem


@dataclass(frozen=True)
class Option:
    name: str  # the Python / JSON name (keyword argument, HTTP field); the CLI flag is --name-with-dashes
    kind: type  # bool, int, float, str or Path
    default: Any
    help: str
    scope: str = "run"
    group: str = "transcription"
    nullable: bool = False  # None is a value (detect, switched off, ...)
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # the bound itself is not allowed
    high_open: bool = False
    choices: tuple[str, ...] | None = None
    max_chars: int | None = None
    flags: tuple[str, ...] = ()  # CLI flags when not just --name-with-dashes (e.g. ("-l", "--language"))
    peer_flags: tuple[str, ...] = ()  # openai-whisper's / WhisperX's / faster-whisper's spellings (hidden)
    peer_names: tuple[str, ...] = ()  # request names of transformers' ASR pipeline (chunk_length_s)
    generate_names: tuple[str, ...] = ()  # names in transformers' generate_kwargs (num_beams)
    not_in: dict[str, str] = field(default_factory=dict)  # entry point -> why it does not take this option
    # the option's own reading of a value that passed the checks above (a language name to its code)
    parse: Callable[[Option, Any], Any] | None = None
    takes_list: bool = False  # a list, tuple or dict goes to ``parse`` as it is (the Python API's clip_timestamps=[0, 30])
    # a run option the live engine applies (``specwhisper.live``); one it does not is refused by the live
    # entry points when set to anything but its default (``live_refusal``)
    live: bool = False

    def __post_init__(self):
        assert self.scope in SCOPES and set(self.not_in) <= set(ENTRY_POINTS), self.name  # noqa: S101

    @property
    def entry_points(self) -> tuple[str, ...]:
        return tuple(e for e in ENTRY_POINTS if e not in self.not_in)

    @property
    def cli_flags(self) -> tuple[str, ...]:
        return self.flags or ("--" + self.name.replace("_", "-"),)

    def range_text(self) -> str:
        """The valid values in words ('' when any value of the type goes)."""
        if self.choices:
            return "one of " + ", ".join(self.choices)
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            left, right = ("(" if self.low_open else "["), (")" if self.high_open else "]")
            return f"{left}{_num(lo)}, {_num(hi)}{right}"
        if lo is not None:
            return (">" if self.low_open else ">=") + f" {_num(lo)}"
        if hi is not None:
            return ("<" if self.high_open else "<=") + f" {_num(hi)}"
        return ""

    def describe(self) -> str:
        """The help with the valid values and the default, as --help, the API docstring and docs/cli.md show it."""
        extra = []
        if self.choices:
            extra.append(", ".join(self.choices))
        elif self.range_text():
            extra.append(self.range_text())
        if self.kind is bool and self.default is not None:
            extra.append(f"default: {'on' if self.default else 'off'}")
        elif self.default is not None and "(default" not in self.help:
            extra.append(f"default: {_num(self.default)}")
        return self.help + (f" ({'; '.join(extra)})" if extra else "")

    def check(self, value: Any) -> Any:
        """``value`` converted to this option's type and checked; OptionError (one line) otherwise.
        Text is taken too ("5", "0.2", "true", "None"), as command lines and query strings send it."""
        if value is None or (isinstance(value, str) and value.strip().lower() in ("none", "null") and self.kind is not str):
            if self.nullable or self.default is None:
                return None
            raise OptionError(self, "needs a value")
        if self.takes_list and isinstance(value, (list, tuple, dict)):
            return self.parse(self, value)
        value = self._convert(value)
        if self.choices and value not in self.choices:
            raise OptionError(self, f"must be one of {', '.join(self.choices)}, got '{short_text(value)}'")
        if self.kind in (int, float):
            if (self.low is not None and (value < self.low or (self.low_open and value == self.low))) or (
                    self.high is not None and (value > self.high or (self.high_open and value == self.high))):
                raise OptionError(self, f"must be {self._bounds()}, got {_num(value)}")
        if self.max_chars is not None and isinstance(value, str) and len(value) > self.max_chars:
            raise OptionError(self, f"must be at most {self.max_chars} characters, got {len(value)}")
        return self.parse(self, value) if self.parse else value

    def _bounds(self) -> str:
        lo, hi = self.low, self.high
        if lo is not None and hi is not None:
            if not (self.low_open or self.high_open):
                return f"between {_num(lo)} and {_num(hi)}"
            if self.low_open and self.high_open:
                return f"between {_num(lo)} and {_num(hi)}, exclusive"
            return f"{'>' if self.low_open else '>='} {_num(lo)} and {'<' if self.high_open else '<='} {_num(hi)}"
        return self.range_text()

    def _convert(self, value: Any) -> Any:
        kind = self.kind
        if kind is bool:
            if isinstance(value, bool):
                return value
            if isinstance(value, str) and value.strip().lower() in ("true", "1", "false", "0"):
                return value.strip().lower() in ("true", "1")
            if isinstance(value, int) and value in (0, 1):
                return bool(value)
            raise OptionError(self, f"must be true or false, got '{short_text(value)}'")
        if kind in (int, float):
            if isinstance(value, bool):
                raise OptionError(self, f"must be a number, got {value}")
            try:
                number = float(value) if kind is float else _whole(value)
            except (TypeError, ValueError):
                raise OptionError(self, f"must be {'a whole number' if kind is int else 'a number'}, got '{short_text(value)}'") from None
            if kind is float and not math.isfinite(number):
                raise OptionError(self, f"must be a finite number, got {value}")
            return number
        if kind is Path:
            return Path(value)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)  # ?initial_prompt=1961 arrives as a number
        if not isinstance(value, str):
            raise OptionError(self, f"must be text, got {type(value).__name__}")
        return value


def _whole(value: Any) -> int:
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(value)
        return int(value)
    return int(str(value).strip())


def _num(x: float) -> str:
    return f"{x:g}" if isinstance(x, float) else str(x)


def short_text(value: Any, limit: int = 60) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
