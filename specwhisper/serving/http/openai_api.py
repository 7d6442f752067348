"""OpenAI's audio API on the server, so that the official ``openai`` clients (and the apps built on
them) use it as they use OpenAI's: set the client's base URL to ``http://HOST:PORT/v1``.

* ``POST /v1/audio/transcriptions`` and ``POST /v1/audio/translations`` (to English): a
  ``multipart/form-data`` body with ``file`` (any audio or video file ffmpeg reads), ``model``,
  ``language`` (of the speech; optional, detected without it), ``prompt``, ``response_format`` (``json``, the default, ``text``,
  ``srt``, ``verbose_json``, ``vtt``; transcriptions also ``diarized_json``), ``temperature`` and
  ``timestamp_granularities[]`` (``segment``, ``word``: only with ``verbose_json``, as OpenAI's) and
  ``chunking_strategy`` (``auto``, what is done anyway, or ``server_vad`` with a ``threshold``, in brackets
  or as a JSON string), ``keywords[]`` (our ``hotwords``), ``languages[]`` (one: our ``language``) and
  ``include[]=logprobs`` (``json`` only, as OpenAI's: ``logprobs``, one entry per word, ``logprob_entries``)
  and ``known_speaker_names[]`` with ``known_speaker_references[]`` (up to 4 clips of one voice, 2 to 30 s, as data URLs: the
  speakers who sound like them are named so, the others keep ``SPEAKER_NN``; diarization turns on).
  ``model`` is ``whisper-1`` (this deployment's default model), one of the models it offers, or one of its
  aliases for them (``Choices.aliases``: an app's "gpt-4o-transcribe").
  Our own options are further form fields under the names of ``POST /``'s parameters (``diarize``,
  ``num_speakers``, ``min_speakers``, ``max_speakers``, ``draft``, ``beam_size``, ``hotwords``...);
  with ``diarize=true`` the ``verbose_json`` segments and words carry ``speaker``.
* ``GET /v1/models`` and ``GET /v1/models/{model}``: ``whisper-1``, the aliases and the models offered.

Answers follow OpenAI's: ``json`` is ``{"text", "usage"}`` (and ``logprobs`` when included);
``verbose_json`` is ``{"task", "language" (the full name, e.g. "english"), "duration", "text", "segments", "words", "usage"}`` (``segments``
unless only ``word`` was asked for, ``words`` when it was); ``diarized_json`` is ``{"task", "duration",
"text", "segments": [{"type", "id", "start", "end", "text", "speaker"}], "usage"}``; ``text``, ``srt`` and
``vtt`` come as ``text/plain``. With ``stream=true`` (transcriptions, ``json``, ``text`` or ``diarized_json``)
the answer is OpenAI's server-sent events (``stream_events``), the text of each segment once it is final
(``diarized_json``: then each segment with its speaker, once the file is diarized); elsewhere ``stream`` is
ignored, as OpenAI ignores it for ``whisper-1``, and the answer is the format's one answer. Every error
is ``{"error": {"message", "type", "param", "code"}}`` with its HTTP status. Uploads go through the same
steps, limits, queue and deadline as ``POST /`` (:mod:`specwhisper.serving.http.uploads`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response
from pydantic import ValidationError

from specwhisper.asr.decoding.language import language_name, same_language
from specwhisper.diarize.known import ERROR_PREFIX as KNOWN_SPEAKER_ERROR
from specwhisper.results.transcript import Transcript, Word, segments_to_dicts
from specwhisper.pipeline.writers import render
from specwhisper.serving.http.form_upload import CLIP_FIELDS, FILE_FIELD, receive_form
from specwhisper.serving.params import Choices, RequestError, TranscribeParams, model_named, offered_names, parse_params
from specwhisper.messages import clip, short_repr
from specwhisper.pipeline.option import OptionError
from specwhisper.pipeline.options import BY_NAME
from specwhisper.serving.http.uploads import Refusal, StreamEvents, Uploads

OWNER = "specwhisper"
FORMATS = ("json", "text", "srt", "verbose_json", "vtt", "diarized_json")
TEXT_FORMATS = ("text", "srt", "vtt")
STREAM_FORMATS = ("json", "text", "diarized_json")  # OpenAI's: text events (diarized: segment events too)
GRANULARITIES = ("word", "segment")
GRANULARITY_FIELDS = ("timestamp_granularities[]", "timestamp_granularities")
INCLUDE_FIELDS = ("include[]", "include")
INCLUDABLE = ("logprobs",)
SPEAKER_NAME_FIELDS = ("known_speaker_names[]", "known_speaker_names")
KEYWORD_FIELDS = ("keywords[]", "keywords")  # gpt-transcribe's words to favour: our hotwords
LANGUAGES_FIELDS = ("languages[]", "languages")  # gpt-transcribe's possible languages: one is our language
OPENAI_FIELDS = ("model", "language", "prompt", "response_format", "temperature", "stream", "chunking_strategy",
                 *GRANULARITY_FIELDS, *INCLUDE_FIELDS, *SPEAKER_NAME_FIELDS, *CLIP_FIELDS, *KEYWORD_FIELDS, *LANGUAGES_FIELDS)
# chunking_strategy's object form, as the clients send it in a form: chunking_strategy[type]=server_vad ...
VAD_CONFIG = "chunking_strategy["
VAD_KEYS = ("type", "threshold", "prefix_padding_ms", "silence_duration_ms")
VAD_NAMES = {"threshold": "vad_threshold", "silence_duration_ms": "vad_min_silence_ms", "prefix_padding_ms": "vad_speech_pad_ms"}
# TranscribeParams fields an OpenAI field or the route sets; the others are our extra form fields
SET_HERE = {"model", "language", "temperature", "initial_prompt", "task", "word_timestamps", "return_timestamps", "formats",
            "known_speakers"}
EXTRA_FIELDS = tuple(name for name in TranscribeParams.model_fields if name not in SET_HERE)
OPENAI_NAMES = {"initial_prompt": "prompt"}  # our parameter -> the OpenAI field that sets it
# our parameters that OpenAI's own fields set here, and which field to send instead
SET_BY = {**OPENAI_NAMES, "word_timestamps": "timestamp_granularities[]=word with verbose_json",
          "return_timestamps": "response_format verbose_json", "formats": "response_format",
          "task": "the /v1/audio/translations route to translate",
          "known_speakers": "known_speaker_names[] and known_speaker_references[]"}


def is_openai_path(path: str) -> bool:
    """Under OpenAI's /v1/: its routes, or one a client of them may try (``app.refuser`` sets ours apart)."""
    return path.startswith("/v1/")


def error_type(status: int) -> str:
    return "server_error" if status >= 500 else "invalid_request_error"


def openai_refused(refusal: Refusal) -> JSONResponse:
    """OpenAI's error answer: ``{"error": {"message", "type", "param", "code"}}``."""
    body = {"message": clip(str(refusal)), "type": error_type(refusal.status), "param": refusal.param, "code": refusal.code}
    return JSONResponse({"error": body}, status_code=refusal.status, headers=refusal.headers())


def invalid_value(field: str, value: str, allowed: tuple[str, ...]) -> Refusal:
    listed = ", ".join(f"'{a}'" for a in allowed)
    return Refusal(400, f"Invalid value: '{clip(value, 60)}'. Supported values are: {listed}.", param=field, code="invalid_value")


@dataclass(frozen=True)
class OpenAIRequest:
    task: str  # transcribe or translate
    response_format: str
    granularities: frozenset[str]
    params: TranscribeParams
    stream: bool = False  # server-sent events: the text as it becomes final, then the whole (``stream_events``)
    logprobs: bool = False  # include[]=logprobs: the words' log-probabilities (``logprob_entries``)


def _one(fields: Mapping[str, list[str]], name: str) -> str | None:
    """A field given once, None when absent or empty (an unset field in many clients' forms)."""
    values = fields.get(name) or []
    if len(values) > 1:
        raise Refusal(400, f"'{clip(name, 60)}' is given {len(values)} times (once at most)", param=name)
    return values[0].strip() or None if values else None


def _model(name: str | None, choices: Choices) -> str:
    model = model_named(name, choices)
    if model is None:
        raise Refusal(404, f"The model '{clip(name, 60)}' does not exist here (offered: {', '.join(offered_names(choices))}).",
                      param="model", code="model_not_found")
    return model


def _parameter_error(exc: RequestError, names: Mapping[str, str] | None = None) -> Refusal:
    """parse_params' error, its parameter named as the client named it (``prompt``, not ``initial_prompt``;
    ``names``: more of ours -> theirs for this request)."""
    names = {**OPENAI_NAMES, **(names or {})}
    cause, param = exc.__cause__, None
    if isinstance(cause, ValidationError) and cause.errors() and cause.errors()[0]["loc"]:
        param = str(cause.errors()[0]["loc"][0])
        param = names.get(param, param)
    message = str(exc).removeprefix("parameters.").removeprefix("parameters: ")
    for ours, theirs in names.items():
        message = message.replace(ours, theirs)
    return Refusal(exc.status, message, param=param)


# the parameter at fault in what the model or the audio refuses, by the start of the message
REFUSED_PARAMS = {f"{FILE_FIELD}:": FILE_FIELD, KNOWN_SPEAKER_ERROR: CLIP_FIELDS[0], "unknown language code": "language",
                  "this model is English-only; cannot use language": "language",
                  "this model is English-only and cannot translate": "model"}


def _refused_param(message: str) -> str | None:
    return next((p for start, p in REFUSED_PARAMS.items() if message.startswith(start)), None)


def openai_request(fields: Mapping[str, list[str]], task: str, choices: Choices) -> OpenAIRequest:
    """The one mapping of OpenAI's form fields (and our extra ones) onto our request parameters."""
    for name in fields:
        if name in SET_BY:
            raise Refusal(400, f"{name} is set by OpenAI's own fields here: send {SET_BY[name]}", param=name,
                          code="unknown_parameter")
        if name not in OPENAI_FIELDS and name not in EXTRA_FIELDS and not name.startswith(VAD_CONFIG):
            raise Refusal(400, f"Unrecognized request argument supplied: {clip(name, 60)}", param=name, code="unknown_parameter")
    formats = FORMATS if task == "transcribe" else FORMATS[:-1]
    response_format = _one(fields, "response_format") or "json"
    if response_format not in formats:
        raise invalid_value("response_format", response_format, formats)
    granularities = [g for name in GRANULARITY_FIELDS for g in fields.get(name, [])]
    for g in granularities:
        if g not in GRANULARITIES:
            raise invalid_value("timestamp_granularities[]", g, GRANULARITIES)
    if granularities and response_format != "verbose_json":
        raise Refusal(400, "`response_format` must be `verbose_json` if `timestamp_granularities[]` is provided",
                      param="timestamp_granularities[]", code="invalid_value")
    included = [i for name in INCLUDE_FIELDS for i in fields.get(name, [])]
    for i in included:
        if i not in INCLUDABLE:
            raise invalid_value("include[]", i, INCLUDABLE)
    if included and response_format != "json":
        raise Refusal(400, "`response_format` must be `json` if `include[]=logprobs` is provided", param="include[]",
                      code="invalid_value")
    stream = (_one(fields, "stream") or "false").lower()
    if stream not in ("true", "1", "false", "0"):
        raise Refusal(400, f"stream: must be true or false, got {short_repr(stream)}", param="stream", code="invalid_value")
    # no events for translations nor these formats: ignored, as OpenAI ignores it where it cannot stream (whisper-1)
    stream = stream in ("true", "1") and task == "transcribe" and response_format in STREAM_FORMATS
    raw: dict[str, object] = {name: value for name in EXTRA_FIELDS if (value := _one(fields, name)) is not None}
    chunking = _chunking(fields)
    for key, name in VAD_NAMES.items():
        if name in chunking and name in raw:
            raise Refusal(400, f"{name}: given twice (and as chunking_strategy[{key}]); send one",
                          param=f"chunking_strategy[{key}]")
    raw.update(chunking)
    raw.update(model=_model(_one(fields, "model"), choices), task=task)
    for field, name in (("language", "language"), ("prompt", "initial_prompt"), ("temperature", "temperature")):
        if (value := _one(fields, field)) is not None:
            raw[name] = value
    if keywords := _keywords(fields, raw.get("hotwords")):
        raw["hotwords"] = keywords
    if language := _languages(fields, raw.get("language")):
        raw["language"] = language
    if known := _known_speakers(fields, task):
        raw["known_speakers"] = known
    if "word" in granularities or included:  # a word's probability comes with its timing
        raw["word_timestamps"] = True
    if response_format == "diarized_json" and not _flag(raw, "multichannel"):  # its speakers: the diarizer's, or each channel's
        raw.setdefault("diarize", True)
        if _flag(raw, "diarize") is False:
            raise Refusal(400, "diarize: diarized_json needs diarization, or multichannel (drop diarize=false)",
                          param="diarize")
    try:
        params = parse_params(raw, choices)
    except RequestError as exc:
        names = {name: f"chunking_strategy[{key}]" for key, name in VAD_NAMES.items() if name in chunking}
        if keywords:
            names["hotwords"] = "keywords[]"
        refusal = _parameter_error(exc, {**names, "known_speakers": "known_speaker_references[]"})
        if refusal.param == "language" and language and _one(fields, "language") is None:  # named as it was sent
            refusal.param = "languages[]"
        raise refusal from None
    if stream and params.postedit:
        raise Refusal(400, "stream: the post-edit needs the whole file first (send stream=false, or no postedit)",
                      param="stream", code="unsupported_value")
    if stream and params.align_text is not None:
        raise Refusal(400, "stream: the text's times come once the whole file is heard (send stream=false)",
                      param="stream", code="unsupported_value")
    if stream and params.diarize and response_format != "diarized_json":
        raise Refusal(400, "stream: speakers come only in diarized_json's segment events (send response_format "
                           "diarized_json, or stream=false)", param="stream", code="unsupported_value")
    return OpenAIRequest(task, response_format, frozenset(granularities), params, stream, bool(included))


def _keywords(fields: Mapping[str, list[str]], hotwords: object) -> str | None:
    """``keywords[]`` as our ``hotwords`` (the words put in every chunk's prompt), joined with ", " as a
    glossary is written; the same words also given as ``hotwords`` are taken, other words refused."""
    words = [w.strip() for name in KEYWORD_FIELDS for w in fields.get(name, []) if w.strip()]
    if not words:
        return None
    joined = ", ".join(words)
    if hotwords is not None and hotwords != joined:
        raise Refusal(400, f"keywords[] and hotwords say different words ({short_repr(joined)} and "
                           f"{short_repr(hotwords)}); send one", param="keywords[]", code="invalid_value")
    return joined


def _flag(raw: Mapping[str, object], name: str) -> bool | None:
    """A true/false option as the options table reads it ("true", "1", " True "); None when it is not one
    (``parse_params`` then names the bad value)."""
    try:
        return bool(BY_NAME[name].check(raw.get(name, False)))
    except OptionError:
        return None


def _languages(fields: Mapping[str, list[str]], language: object) -> str | None:
    """``languages[]`` as our ``language``: Whisper decodes in one language, given or detected among all of
    its own, so one possible language is taken (it is the language) and several are refused."""
    given = list(dict.fromkeys(v.strip() for name in LANGUAGES_FIELDS for v in fields.get(name, []) if v.strip()))
    if not given:
        return None
    if len(given) > 1:
        raise Refusal(400, f"languages[]: one language is taken here, got {len(given)} ({clip(', '.join(given), 60)}); "
                           "send one, or none to detect it", param="languages[]", code="unsupported_value")
    if language is not None and not same_language(language, given[0]):
        raise Refusal(400, f"languages[] and language say different languages ({short_repr(given[0])} and "
                           f"{short_repr(language)}); send one", param="languages[]", code="invalid_value")
    return given[0]


def _known_speakers(fields: Mapping[str, list[str]], task: str) -> list[tuple[str, str]]:
    """OpenAI's ``known_speaker_names[]`` with their ``known_speaker_references[]`` (data URLs), as pairs in
    the order given (``specwhisper.diarize.known`` names the speakers after them)."""
    names = [n for field in SPEAKER_NAME_FIELDS for n in fields.get(field, [])]
    clips = [c for field in CLIP_FIELDS for c in fields.get(field, [])]
    if not names and not clips:
        return []
    if task != "transcribe":
        raise Refusal(400, "known_speaker_names[]: translations name no speakers", param="known_speaker_names[]",
                      code="unsupported_value")
    if len(names) != len(clips):
        raise Refusal(400, f"known_speaker_names[] and known_speaker_references[] must be as many (got {len(names)} "
                           f"names and {len(clips)} references)", param="known_speaker_references[]", code="invalid_value")
    return list(zip(names, (c.strip() for c in clips)))


def _chunking(fields: Mapping[str, list[str]]) -> dict[str, object]:
    """OpenAI's ``chunking_strategy`` as our parameters. Every file is cut into chunks at the pauses the
    VAD finds, so ``auto`` (which OpenAI's diarizing model wants for audio over 30 s) is what we do; the
    ``server_vad`` object's ``threshold`` (speech sensitivity, 0 to 1), ``silence_duration_ms`` and
    ``prefix_padding_ms`` are our ``vad_threshold``, ``vad_min_silence_ms`` and ``vad_speech_pad_ms``
    (the VAD's span settings: where chunks are cut, and with ``vad_filter`` what is decoded)."""
    strategy = _one(fields, "chunking_strategy")
    config = {name[len(VAD_CONFIG):-1]: _one(fields, name) for name in fields if name.startswith(VAD_CONFIG)}
    if strategy is not None and config:
        raise Refusal(400, "chunking_strategy: 'auto' or a server_vad object, not both", param="chunking_strategy")
    if strategy is not None and strategy.startswith("{"):  # the object as a JSON string, as some clients send it
        config, strategy = _json_object(strategy), None
    if strategy is not None and strategy != "auto":
        raise invalid_value("chunking_strategy", strategy, ("auto",))
    if not config:
        return {}
    for key in config:
        if key not in VAD_KEYS:
            raise Refusal(400, f"Unrecognized request argument supplied: chunking_strategy[{clip(key, 40)}]",
                          param=f"chunking_strategy[{clip(key, 40)}]", code="unknown_parameter")
    if config.get("type") != "server_vad":
        raise invalid_value("chunking_strategy[type]", config.get("type") or "", ("server_vad",))
    return {VAD_NAMES[key]: value for key, value in config.items() if key in VAD_NAMES and value is not None}


def _json_object(text: str) -> dict[str, str | None]:
    """A ``chunking_strategy`` sent as a JSON object, its values as the bracket form's strings, so that both
    forms get the same checks (``null`` is a field not sent)."""
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        value = None
    if not isinstance(value, dict):
        raise Refusal(400, f"chunking_strategy: not 'auto' nor a JSON object ({short_repr(text)})",
                      param="chunking_strategy", code="invalid_value")
    return {str(k): (v.strip() or None) if isinstance(v, str) else None if v is None else json.dumps(v) for k, v in value.items()}


def usage(t: Transcript) -> dict:
    return {"type": "duration", "seconds": math.ceil(t.duration)}


def _segments(t: Transcript) -> list[dict]:
    """OpenAI's segment fields (openai-whisper's), the text as decoded (with its leading space), and
    ``speaker`` where diarization gave one."""
    out = segments_to_dicts(t.segments)
    for d, s in zip(out, t.segments):
        d.pop("words", None)
        d.pop("overlap", None)
        d.pop("language", None)  # the response's own "language" holds it
        d["text"] = s.text
    return out


def _words(t: Transcript) -> list[dict]:
    words = []
    for w in (w for s in t.segments for w in s.words):
        d = {"word": w.text.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
        if w.probability is not None:
            d["probability"] = round(w.probability, 3)
        if w.speaker is not None:
            d["speaker"] = w.speaker
        words.append(d)
    return words


def logprob_entries(words: Iterable[Word], starts_text: bool = False) -> list[dict]:
    """OpenAI's ``logprobs`` (``{"token", "logprob", "bytes"}``), one entry per word where OpenAI's models give
    one per token: ``token`` the word's text as decoded (its leading space included but where the words
    ``starts_text``, as the text starts without it), ``logprob`` the log of Whisper's word probability (the
    mean of its tokens' probabilities, openai-whisper's word timing rule), ``bytes`` the token's UTF-8
    bytes. The entries' tokens joined are the words' text."""
    entries = []
    for w in words:
        if w.probability is not None:
            token = w.text.lstrip() if starts_text and not entries else w.text
            entries.append({"token": token, "logprob": round(math.log(max(w.probability, 1e-12)), 4),
                            "bytes": list(token.encode())})
    return entries


def _logprobs(t: Transcript) -> dict:
    """The whole transcript's ``logprobs`` (a json answer's, the last streamed event's)."""
    return {"logprobs": logprob_entries((w for s in t.segments for w in s.words), starts_text=True)}


def _diarized(t: Transcript) -> list[dict]:
    """``diarized_json``'s segments, which are also its streamed segment events."""
    return [{"type": "transcript.text.segment", "id": f"seg_{i}", "start": round(s.start, 3), "end": round(s.end, 3),
             "text": s.text.strip(), "speaker": s.speaker or "unknown"} for i, s in enumerate(t.segments)]


def openai_answer(t: Transcript, req: OpenAIRequest) -> Response:
    fmt = req.response_format
    if fmt == "text":
        return PlainTextResponse(t.text + "\n")
    if fmt in TEXT_FORMATS:
        return PlainTextResponse(render(t, fmt, req.params.layout()))
    if fmt == "json":
        return JSONResponse({"text": t.text, **(_logprobs(t) if req.logprobs else {}), "usage": usage(t)})
    embeddings = {} if t.speaker_embeddings is None else {"speaker_embeddings": t.speaker_embeddings}  # asked for
    if fmt == "diarized_json":
        return JSONResponse({"task": "transcribe", "duration": round(t.duration, 3), "text": t.text, "segments": _diarized(t),
                             **embeddings, "usage": usage(t)})
    translated = req.task == "translate"
    out = {"task": req.task, "language": "english" if translated else language_name(t.language),
           "duration": round(t.duration, 3), "text": t.text}
    if "segment" in req.granularities or "word" not in req.granularities:
        out["segments"] = _segments(t)
    if "word" in req.granularities:
        out["words"] = _words(t)
    out.update(embeddings)
    if not translated:
        out["usage"] = usage(t)
    return JSONResponse(out)


def _event(data: dict) -> bytes:
    return f"data: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def stream_events(diarized: bool = False, logprobs: bool = False) -> StreamEvents:
    """OpenAI's transcription events: ``transcript.text.delta`` for each final segment's text (the deltas
    joined are the text; with ``logprobs`` its words' entries, and all of them in the last event), with
    ``diarized`` a ``transcript.text.segment`` for each segment of the diarized transcript (``diarized_json``'s segments, speakers included) once it is whole, then
    ``transcript.text.done`` with the whole text, and an error as ``{"error": {...}}``,
    which the ``openai`` client raises."""
    started = [False]

    def segments(segs: list) -> bytes:
        out = b""
        for seg in segs:
            if text := seg.text.strip():
                delta = {"type": "transcript.text.delta", "delta": (" " if started[0] else "") + text}
                out += _event({**delta, "logprobs": logprob_entries(seg.words, not started[0])} if logprobs else delta)
                started[0] = True
        return out

    def done(t: Transcript) -> bytes:
        spoken = b"".join(_event(segment) for segment in _diarized(t)) if diarized else b""
        # no usage: the event's is OpenAI's token-billed kind alone (transcription_text_done_event.Usage), and a
        # typed client refuses the duration kind the other answers carry
        return spoken + _event({"type": "transcript.text.done", "text": t.text, **(_logprobs(t) if logprobs else {})})

    def error(refusal: Refusal) -> bytes:
        return _event({"type": "error", "error": {"message": clip(str(refusal)), "type": error_type(refusal.status),
                                                  "param": refusal.param, "code": refusal.code}})

    return StreamEvents(segments, done, error)


def model_object(name: str) -> dict:
    return {"id": name, "object": "model", "created": 0, "owned_by": OWNER}


def add_openai_routes(app: FastAPI, uploads: Uploads) -> None:
    choices = uploads.endpoint.transcriber.settings.choices
    offered = offered_names(choices)

    async def audio(request: Request, task: str) -> Response:
        async def handle(path: Path) -> Response:
            form = await receive_form(uploads, request, path)
            if not form.has_file:
                raise Refusal(400, "Missing required parameter: 'file'.", param=FILE_FIELD, code="missing_required_parameter")
            if form.file_size == 0:
                raise Refusal(400, "file: the upload is empty (0 bytes)", param=FILE_FIELD)
            req = openai_request(form.fields, task, choices)
            try:
                if req.stream:
                    events = stream_events(diarized=req.response_format == "diarized_json", logprobs=req.logprobs)
                    return await uploads.stream(request, path, FILE_FIELD, req.params, events)
                transcript = await uploads.transcribe(request, path, FILE_FIELD, req.params)
            except RequestError as exc:
                param = _refused_param(str(exc))
                raise Refusal(exc.status, str(exc), param=param) from None
            return openai_answer(transcript, req)

        return await uploads.answer(handle, openai_refused)

    async def transcriptions(request: Request) -> Response:
        return await audio(request, "transcribe")

    async def translations(request: Request) -> Response:
        return await audio(request, "translate")

    async def models() -> JSONResponse:
        return JSONResponse({"object": "list", "data": [model_object(m) for m in offered]})

    async def model(name: str) -> JSONResponse:
        if name not in offered:
            return openai_refused(Refusal(404, f"The model '{clip(name, 60)}' does not exist here (offered: {', '.join(offered)}).",
                                          param="model", code="model_not_found"))
        return JSONResponse(model_object(name))

    app.add_api_route("/v1/audio/transcriptions", transcriptions, methods=["POST"])
    app.add_api_route("/v1/audio/translations", translations, methods=["POST"])
    app.add_api_route("/v1/models", models, methods=["GET"])
    app.add_api_route("/v1/models/{name:path}", model, methods=["GET"])
