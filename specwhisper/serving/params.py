"""Per-request transcription parameters for the web UI and the endpoint, validated with pydantic.

Both entry points build a :class:`TranscribeParams` from what the user sent and turn it into the
pipeline core's ``PipelineConfig`` / ``RunOptions``; a bad value becomes a :class:`RequestError`
with a one-line message and an HTTP-like status.
"""

from __future__ import annotations

import reprlib
from dataclasses import dataclass, replace
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from specwhisper.asr.engine import DecodeOptions
from specwhisper.asr.fallback import QualityRules, temperature_schedule
from specwhisper.pipeline.core import PipelineConfig, RunOptions
from specwhisper.pipeline.writers import ALL_FORMATS

Format = Literal["txt", "srt", "vtt", "json", "tsv", "rttm"]
assert set(Format.__args__) == set(ALL_FORMATS)  # noqa: S101 - the writers and the schema list the same formats


class RequestError(ValueError):
    """A request that cannot be served as asked; ``str()`` is one line meant for users."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


MAX_MESSAGE = 300  # characters of user-sent text an error message repeats


def short_repr(value: object) -> str:
    """A bounded repr (depth, lengths) of a value a request sent."""
    r = reprlib.Repr()
    r.maxlevel, r.maxstring, r.maxother, r.maxlist, r.maxdict = 3, 60, 60, 6, 6
    return r.repr(value)


def clip(text: str, limit: int = MAX_MESSAGE) -> str:
    """``text`` on one line and at most ``limit`` characters (it may come from a hostile request)."""
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(exc: BaseException) -> str:
    """The first line of an exception's message (its type when it has none)."""
    lines = str(exc).strip().splitlines()
    return clip(lines[0]) if lines else type(exc).__name__


@dataclass(frozen=True)
class Choices:
    """What a deployment lets requests pick (a request never names an arbitrary folder or hub id).
    The first of each is the default."""

    models: tuple[str, ...] = ("base", "tiny.en")
    drafters: tuple[str, ...] = ("auto", "none", "ngram", "tiny.en")


class TranscribeParams(BaseModel):
    """The ``parameters`` of a request. Unknown names are refused."""

    model_config = ConfigDict(extra="forbid")

    model: str = "base"
    draft: str = "auto"
    language: str | None = Field(None, pattern=r"^[a-z]{2,3}$", description="language code; None detects it")
    task: Literal["transcribe", "translate"] = "transcribe"
    word_timestamps: bool | None = None  # default: on with diarize
    batch_size: int = Field(8, ge=1, le=64)
    vad_threshold: float = Field(0.5, gt=0.0, lt=1.0)
    beam_size: int | None = Field(None, ge=1, le=10, description="None: greedy (speculative)")
    temperature: float = Field(0.0, ge=0.0, le=1.0)
    temperature_increment_on_fallback: float = Field(0.2, ge=0.0, le=1.0, description="0: no fallback")
    compression_ratio_threshold: float | None = Field(2.4, gt=0.0)
    logprob_threshold: float | None = Field(-1.0, le=0.0)
    no_speech_threshold: float | None = Field(0.6, ge=0.0, le=1.0)
    best_of: int = Field(5, ge=1, le=10)
    condition_on_previous_text: bool = False
    initial_prompt: str | None = Field(None, max_length=2000)
    hotwords: str | None = Field(None, max_length=2000)
    diarize: bool = False
    num_speakers: int | None = Field(None, ge=1, le=32)
    min_speakers: int | None = Field(None, ge=1, le=32)
    max_speakers: int | None = Field(None, ge=1, le=32)
    postedit: bool = False
    formats: list[Format] = Field(default_factory=list, description="rendered outputs to return")

    @field_validator("model", "draft")
    @classmethod
    def _allowed(cls, value: str, info: ValidationInfo) -> str:
        choices: Choices = (info.context or {}).get("choices") or Choices()
        allowed = choices.models if info.field_name == "model" else choices.drafters
        if value not in allowed:
            raise ValueError(f"'{clip(value, 60)}' is not offered here (choose from {', '.join(allowed)})")
        return value

    @field_validator("language", mode="before")
    @classmethod
    def _auto_language(cls, value):
        return None if value in ("", "auto") else value

    def pipeline_config(self, base: PipelineConfig) -> PipelineConfig:
        """The deployment's config with this request's model and drafter."""
        return replace(base, model=self.model, draft=self.draft)

    def _quality(self) -> QualityRules:
        try:
            schedule = temperature_schedule(self.temperature, self.temperature_increment_on_fallback)
        except ValueError as exc:
            raise RequestError(f"parameters: {exc}") from exc
        return QualityRules(temperatures=schedule, compression_ratio_threshold=self.compression_ratio_threshold,
                            logprob_threshold=self.logprob_threshold, no_speech_threshold=self.no_speech_threshold,
                            best_of=self.best_of)

    def run_options(self, max_audio_s: float) -> RunOptions:
        word_ts = self.diarize if self.word_timestamps is None else self.word_timestamps
        opts = RunOptions(
            decode=DecodeOptions(language=self.language, task=self.task, batch_size=self.batch_size,
                                 vad_threshold=self.vad_threshold, word_timestamps=word_ts,
                                 beam_size=self.beam_size, quality=self._quality(),
                                 initial_prompt=self.initial_prompt, hotwords=self.hotwords,
                                 condition_on_previous_text=self.condition_on_previous_text),
            diarize=self.diarize,
            num_speakers=self.num_speakers,
            min_speakers=self.min_speakers,
            max_speakers=self.max_speakers,
            postedit=self.postedit,
            max_audio_s=max_audio_s,
        )
        try:
            opts.validate()
        except ValueError as exc:
            raise RequestError(f"parameters: {exc}") from exc
        return opts


def describe(exc: ValidationError) -> str:
    """The first problem of a pydantic error, as one line naming the parameter."""
    err = exc.errors()[0]
    where = clip(".".join(str(p) for p in err["loc"]) or "parameters", 80)
    if err["type"] == "extra_forbidden":
        return f"parameters: unknown parameter '{where}' (known: {', '.join(TranscribeParams.model_fields)})"
    if err["type"] == "value_error":  # our own validators name the value already
        return clip(f"parameters.{where}: {err['msg'].removeprefix('Value error, ')}")
    return clip(f"parameters.{where}: {err['msg']} (got {short_repr(err['input'])})")


def parse_params(raw: object, choices: Choices) -> TranscribeParams:
    """Validate a request's ``parameters`` (None or a dict) against what the deployment offers."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError(f"parameters must be an object, got {type(raw).__name__}")
    raw = {"model": choices.models[0], "draft": choices.drafters[0], **raw}
    try:
        return TranscribeParams.model_validate(raw, context={"choices": choices})
    except ValidationError as exc:
        raise RequestError(describe(exc)) from exc
