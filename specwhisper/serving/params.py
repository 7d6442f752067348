"""Per-request transcription parameters of the servers (HTTP, the OpenAI routes, the endpoint handler,
the web UI): a pydantic model made from the options schema (``specwhisper.pipeline.options``).

Every server builds a :class:`TranscribeParams` from what the user sent and turns it into the
pipeline core's ``PipelineConfig`` / ``RunOptions``; a bad value becomes a :class:`RequestError`
with a one-line message and an HTTP-like status. Besides our own names, the parameters of transformers'
ASR pipeline are taken (``return_timestamps``, ``chunk_length_s``, ``batch_size``, ``generate_kwargs``
with ``language``/``task``/``num_beams``/``temperature``...), so a Hugging Face client's request works
as it is; values may arrive as query-string text ("srt,vtt", "true", "5", "0.2") and are converted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, create_model, field_validator

from specwhisper.asr.decoding.quality import schedule_of
from specwhisper.asr.decoding.language import same_language
from specwhisper.pipeline.config import PipelineConfig, RunOptions
from specwhisper.pipeline.option import Option, OptionError
from specwhisper.pipeline.options import (BY_NAME, known_speaker_pairs, options_for, pipeline_config, run_options,
                                          subtitle_options)
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.pipeline.writers import WRITERS, with_all
from specwhisper.messages import clip, short_repr

Format = Literal["txt", "srt", "vtt", "json", "tsv", "rttm", "aud", "textgrid"]
assert set(Format.__args__) == set(WRITERS)  # noqa: S101 - the writers and the schema list the same formats


class RequestError(ValueError):
    """A request that cannot be served as asked; ``str()`` is one line meant for users."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Choices:
    """What a deployment lets requests pick (a request never names an arbitrary folder or hub id).
    The first of each is the default."""

    models: tuple[str, ...] = ("base", "tiny.en")
    drafters: tuple[str, ...] = ("auto", "none", "ngram", "tiny.en")
    # other names the OpenAI routes take for offered models (an app written for "gpt-4o-transcribe"): name -> model
    aliases: tuple[tuple[str, str], ...] = ()

    def __post_init__(self) -> None:
        for name, model in self.aliases:
            if model not in self.models:
                raise ValueError(f"the alias {name!r} names {model!r}, which is not offered (offered: {', '.join(self.models)})")
            if name in self.models:
                raise ValueError(f"the alias {name!r} is the name of an offered model")


ALIAS = "whisper-1"  # what OpenAI's clients and the apps built on them name by default: the default model


def offered_names(choices: Choices) -> tuple[str, ...]:
    """The model names the OpenAI routes and ``/api/ps`` take: ``whisper-1`` (the default model), the
    deployment's aliases, the offered models."""
    return (ALIAS, *(name for name, _ in choices.aliases), *choices.models)


def model_named(name: str | None, choices: Choices) -> str | None:
    """The offered model a name stands for (``whisper-1`` and the aliases; an offered model's own name); None
    for a name not offered."""
    if name is None or name == ALIAS:
        return choices.models[0]
    return dict(choices.aliases).get(name, name if name in choices.models else None)


class _ParamsBase(BaseModel):
    """What every request's parameters share: the checks of ``specwhisper.pipeline.options`` on each
    field, and the fields that shape the answer. Unknown names are refused."""

    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)  # ?initial_prompt=1961 arrives as int 1961

    return_timestamps: bool | Literal["word"] = Field(False, description="transformers' ASR pipeline: add `chunks`")
    return_language: bool = Field(False, description=BY_NAME["return_language"].help)
    stride_length_s: float | tuple[float, float] | None = Field(None, description=BY_NAME["stride_length_s"].help)
    ignore_warning: bool = Field(False, description=BY_NAME["ignore_warning"].help)
    decoder_kwargs: dict | None = Field(None, description=BY_NAME["decoder_kwargs"].help)
    formats: list[Format] = Field(default_factory=list, description="rendered outputs to return")

    @field_validator("*", mode="before")
    @classmethod
    def _option_check(cls, value, info: ValidationInfo):
        option = BY_NAME.get(info.field_name)
        if option is None or option.scope == "output":
            return value
        try:
            return option.check(value)
        except OptionError as exc:
            raise ValueError(exc.problem) from None

    @field_validator("model", "draft", check_fields=False)
    @classmethod
    def _allowed(cls, value: str, info: ValidationInfo) -> str:
        choices: Choices = (info.context or {}).get("choices") or Choices()
        allowed = choices.models if info.field_name == "model" else choices.drafters
        if value not in allowed:
            raise ValueError(f"'{clip(value, 60)}' is not offered here (choose from {', '.join(allowed)})")
        return value

    @field_validator("known_speakers", check_fields=False)
    @classmethod
    def _clips_sent(cls, value: str | None) -> str | None:
        """A request's reference clips come in it, as data URLs: a path would read the server's files."""
        for name, source in known_speaker_pairs(value):
            if not source.startswith("data:"):
                raise ValueError(f"'{clip(name, 40)}': send the clip itself as a data URL (data:audio/wav;base64,...), "
                                 "not a file name")
        return value

    @field_validator("formats", mode="before")
    @classmethod
    def _format_list(cls, value):
        """A query string's ``formats=srt,vtt`` arrives as one string; ``all`` is every format (the CLI's
        and the Python API's word)."""
        names = [f.strip() for f in value.split(",") if f.strip()] if isinstance(value, str) else value
        return with_all(names) if isinstance(names, list) and "all" in names else names  # unknown names: refused next

    @field_validator("return_timestamps", mode="before")
    @classmethod
    def _timestamps_kind(cls, value):
        kinds = {"true": True, "1": True, "false": False, "0": False, "word": "word"}
        key = value.strip().lower() if isinstance(value, str) else value
        if key is None:  # transformers' default
            return False
        if isinstance(key, str) and key in kinds:
            return kinds[key]
        if key in (True, False):
            return bool(key)
        raise ValueError(f"must be true, false or 'word', got {short_repr(value)}")

    @field_validator("return_language", "ignore_warning", mode="before")
    @classmethod
    def _flag(cls, value):
        return False if value is None else value  # transformers' default None is off

    @field_validator("stride_length_s", mode="before")
    @classmethod
    def _stride(cls, value):
        if value is None:
            return None
        if isinstance(value, str):  # a query string's "5" or "4,2"
            value = [v.strip() for v in value.split(",")] if "," in value else value.strip()
        values = value if isinstance(value, (list, tuple)) else [value]
        try:
            seconds = [float(v) for v in values if not isinstance(v, bool)]
        except (TypeError, ValueError):
            seconds = []
        if len(seconds) != len(values) or len(seconds) not in (1, 2) or not all(0 <= v < 3600 for v in seconds):
            raise ValueError(f"seconds of overlap, one number or [left, right], got {short_repr(value)}")
        return seconds[0] if len(seconds) == 1 else tuple(seconds)

    def pipeline_config(self, base: PipelineConfig) -> PipelineConfig:
        """The deployment's config with this request's model and drafter."""
        return pipeline_config({o.name: getattr(self, o.name) for o in options_for("http", "load")}, base)

    def layout(self) -> SubtitleOptions:
        """The srt and vtt layout this request asked for."""
        return subtitle_options({o.name: getattr(self, o.name) for o in options_for("http") if o.group == "subtitles"})

    def run_options(self, max_audio_s: float) -> RunOptions:
        values = {o.name: getattr(self, o.name) for o in options_for("http", "run")}
        if self.return_timestamps == "word":
            if values["word_timestamps"] is False:
                raise RequestError("parameters: return_timestamps='word' needs word_timestamps (it is false)")
            values["word_timestamps"] = True
        try:
            return run_options({**values, "max_duration": max_audio_s})
        except ValueError as exc:
            raise RequestError(f"parameters: {exc}") from exc


def _annotation(option: Option):
    kind = option.kind
    if option.choices:
        kind = Literal[option.choices]  # type: ignore[valid-type]
    return (kind | None) if option.nullable or option.default is None else kind


# The request model: one field per option the HTTP routes take (``specwhisper.pipeline.options``).
TranscribeParams = create_model(
    "TranscribeParams", __base__=_ParamsBase, __doc__="The ``parameters`` of a request. Unknown names are refused.",
    **{o.name: (_annotation(o), Field(o.default, description=o.help)) for o in options_for("http") if o.scope != "output"},
)


def describe(exc: ValidationError) -> str:
    """The first problem of a pydantic error, as one line naming the parameter."""
    err = exc.errors()[0]
    where = clip(".".join(str(p) for p in err["loc"]) or "parameters", 80)
    if err["type"] == "extra_forbidden":
        return f"parameters: unknown parameter '{where}' (known: {', '.join(TranscribeParams.model_fields)}, generate_kwargs)"
    if err["type"] == "value_error":  # our own validators name the value already
        return clip(f"parameters.{where}: {err['msg'].removeprefix('Value error, ')}")
    return clip(f"parameters.{where}: {err['msg']} (got {short_repr(err['input'])})")


def parse_params(raw: object, choices: Choices) -> TranscribeParams:
    """Validate a request's ``parameters`` (None or a dict) against what the deployment offers."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise RequestError(f"parameters must be an object, got {type(raw).__name__}")
    raw, spelled = peer_names(raw)
    raw = {"model": choices.models[0], "draft": choices.drafters[0], **fold_generate_kwargs(raw)}
    try:
        return TranscribeParams.model_validate(raw, context={"choices": choices})
    except ValidationError as exc:
        message = describe(exc)
        for ours, theirs in spelled.items():  # the error names the parameter as the request spelled it
            message = message.replace(f"parameters.{ours}:", f"parameters.{theirs}:")
        raise RequestError(message) from exc


# transformers' ``generate_kwargs`` for Whisper -> our parameter names. ``temperature`` may be a list
# (transformers' fallback schedule, e.g. [0.0, 0.2, ..., 1.0]): it must then be openai-whisper's
# evenly spaced one, which is what our fallback runs.
GENERATE_KWARGS = {
    **{name: name for name in ("language", "task", "temperature", "compression_ratio_threshold", "logprob_threshold",
                               "no_speech_threshold", "return_timestamps")},
    **{peer: o.name for o in options_for("http") for peer in o.generate_names},  # num_beams, condition_on_prev_tokens
}


# generate flags Whisper decides itself: transformers' Whisper generate samples exactly when the temperature is
# above 0 (``generate_with_fallback`` sets do_sample so), as the temperature here does; the cache is always used
DECIDED_BY_WHISPER = ("do_sample", "use_cache")


def _schedule(values: list) -> dict:
    """A temperature list -> our first temperature and fallback increment."""
    try:
        first, step = schedule_of(values)
    except ValueError as exc:
        raise RequestError(f"parameters.generate_kwargs.temperature: {exc}") from None
    return {"temperature": first, "temperature_increment_on_fallback": step or 0.0}


def _same(name: str, a: object, b: object) -> bool:
    """Equal values, or the same language written two ways ("en", "english")."""
    return same_language(a, b) if name == "language" else a == b


def peer_names(raw: dict) -> tuple[dict, dict[str, str]]:
    """The peers' names of our options (transformers' pipeline: ``chunk_length_s``) as ours, and which
    were spelled so (ours -> theirs); the same setting given both ways with different values is refused."""
    raw, spelled = dict(raw), {}
    for option in options_for("http"):
        # transformers' pipeline takes its generate kwargs (num_beams) among its own parameters too
        for peer in (*option.peer_names, *(g for g in option.generate_names if g != option.name)):
            if peer in raw:
                value = raw.pop(peer)
                if option.name in raw and not _same(option.name, raw[option.name], value):
                    raise RequestError(f"parameters: {option.name} is {short_repr(raw[option.name])} but {peer} is "
                                       f"{short_repr(value)}")
                raw[option.name] = value
                spelled[option.name] = peer
    return raw, spelled


def fold_generate_kwargs(raw: dict) -> dict:
    """``generate_kwargs`` (or ``generation_parameters``, the toolkit's newer name) merged into the flat
    parameters; the same setting given both ways with different values is refused."""
    raw = dict(raw)
    given = [k for k in ("generate_kwargs", "generation_parameters") if k in raw]
    if len(given) > 1:
        raise RequestError("parameters: give generate_kwargs or generation_parameters, not both")
    kwargs = raw.pop(given[0]) if given else None
    if kwargs is None:
        return raw
    if not isinstance(kwargs, dict):
        raise RequestError(f"parameters.{given[0]} must be an object, got {type(kwargs).__name__}")
    for key, value in kwargs.items():
        if key in DECIDED_BY_WHISPER:  # checked, no effect
            if not isinstance(value, bool):
                raise RequestError(f"parameters.{given[0]}.{key}: must be true or false, got {short_repr(value)}")
            continue
        name = GENERATE_KWARGS.get(key)
        if name is None:
            raise RequestError(f"parameters.{given[0]}: unknown key '{clip(str(key), 60)}' "
                               f"(known: {', '.join([*GENERATE_KWARGS, *DECIDED_BY_WHISPER])})")
        values = _schedule(value) if name == "temperature" and isinstance(value, (list, tuple)) else {name: value}
        for flat, v in values.items():
            if flat in raw and not _same(flat, raw[flat], v):
                raise RequestError(f"parameters: {flat} is {short_repr(raw[flat])} but {given[0]}.{key} is {short_repr(v)}")
            raw[flat] = v
    return raw
