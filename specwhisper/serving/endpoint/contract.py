"""The Inference Endpoint contract over the pipeline core: ``{"inputs", "parameters"}`` in, a dict out.

``inputs`` is the audio file as raw bytes or as a base64 string (a ``data:`` URL prefix is
allowed); ``parameters`` is validated by :mod:`specwhisper.serving.params`. ``Endpoint(data)`` returns
every failure as ``{"error": "<one line>", "status": 4xx/5xx}`` (our HTTP server sends that status);
``Endpoint.predict(data)`` raises it as a :class:`RequestError` instead, which is what the Hugging Face
inference toolkit needs: it answers a handler's return value with 200 whatever it holds, and any
exception with 400 and ``{"error": str(exc)}`` (huggingface-inference-toolkit 0.5.6,
``webservice_starlette.predict``).
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import BinaryIO

from specwhisper.audio.loading import AudioError, InMemoryAudio
from specwhisper.asr.decoding.language import language_name
from specwhisper.hardware.device import resolve_device, resolve_dtype
from specwhisper.asr.weights.loader import ModelError
from specwhisper.results.language import LanguageDetection
from specwhisper.results.transcript import Segment, Transcript
from specwhisper.pipeline.core import Progress
from specwhisper.pipeline.config import PipelineConfig
from specwhisper.pipeline.option import OptionError
from specwhisper.pipeline.options import BY_NAME, STAGE_SETTINGS
from specwhisper.serving.params import Choices, RequestError, TranscribeParams, model_named, offered_names, parse_params
from specwhisper.messages import clip, one_line
from specwhisper.serving.service import LiveLimits, ServiceSettings, PipelinePool
from specwhisper.pipeline.writers import render

log = logging.getLogger(__name__)
REQUEST_FIELDS = ("inputs", "parameters")
BASE64_SLICE = 1 << 22  # characters of base64 decoded at a time


def settings_from_env(env: Mapping[str, str]) -> ServiceSettings:
    """Deployment settings from ``SPECWHISPER_*`` variables (how Inference Endpoints pass configuration)."""

    def items(name: str, default: tuple[str, ...]) -> tuple[str, ...]:
        value = env.get(name, "")
        return tuple(v.strip() for v in value.split(",") if v.strip()) or default

    def number(name: str, default: float) -> float:
        try:
            return float(env.get(name, default))
        except ValueError:
            raise ValueError(f"{name} must be a number, got {env.get(name)!r}") from None

    cache = env.get("SPECWHISPER_CACHE_DIR")
    threads = env.get("SPECWHISPER_THREADS")
    if threads is not None and not (threads.isdigit() and int(threads) >= 1):
        raise ValueError(f"SPECWHISPER_THREADS must be a whole number >= 1, got {threads!r}")
    device = env.get("SPECWHISPER_DEVICE", "auto")
    dtype = env.get("SPECWHISPER_DTYPE", "auto")
    try:
        resolved = resolve_device(device)
    except ValueError as exc:
        raise ValueError(f"SPECWHISPER_DEVICE: {exc}") from None
    try:
        resolve_dtype(dtype, resolved)
    except ValueError as exc:
        raise ValueError(f"SPECWHISPER_DTYPE: {exc}") from None
    max_audio_s, max_upload_mb = number("SPECWHISPER_MAX_AUDIO_S", 4 * 3600), number("SPECWHISPER_MAX_UPLOAD_MB", 200)
    if not (max_audio_s > 0 and max_upload_mb > 0):
        name, value = ("SPECWHISPER_MAX_AUDIO_S", max_audio_s) if not max_audio_s > 0 else ("SPECWHISPER_MAX_UPLOAD_MB", max_upload_mb)
        raise ValueError(f"{name} must be more than 0, got {value:g}")
    try:
        live = LiveLimits(max_streams=int(number("SPECWHISPER_LIVE_STREAMS", LiveLimits.max_streams)),
                          idle_timeout_s=number("SPECWHISPER_LIVE_IDLE_S", LiveLimits.idle_timeout_s),
                          session_idle_s=number("SPECWHISPER_REALTIME_IDLE_S", LiveLimits.session_idle_s),
                          max_ahead_s=number("SPECWHISPER_LIVE_AHEAD_S", LiveLimits.max_ahead_s))
    except ValueError as exc:
        raise ValueError(f"SPECWHISPER_LIVE_*: {exc}") from None
    aliases = []
    for item in items("SPECWHISPER_MODEL_ALIASES", ()):
        name, _, model = (part.strip() for part in item.partition("="))
        if not (name and model):
            raise ValueError(f"SPECWHISPER_MODEL_ALIASES: each item is NAME=MODEL (gpt-4o-transcribe=base), got {item!r}")
        aliases.append((name, model))
    try:
        choices = Choices(models=items("SPECWHISPER_MODELS", Choices.models), drafters=items("SPECWHISPER_DRAFTERS", Choices.drafters),
                          aliases=tuple(aliases))
    except ValueError as exc:
        raise ValueError(f"SPECWHISPER_MODEL_ALIASES: {exc}") from None
    stages = {}  # the diarizer's and the post-edit's models, checked as every entry point checks them
    for name in STAGE_SETTINGS:
        if (value := env.get(f"SPECWHISPER_{name.upper()}")) is not None:
            try:
                stages[name] = BY_NAME[name].check(value)
            except OptionError as exc:
                raise ValueError(f"SPECWHISPER_{name.upper()}: {exc.problem}") from None
    ttl = number("SPECWHISPER_MODEL_TTL", -1)
    if not (ttl >= 0 or ttl == -1):
        raise ValueError(f"SPECWHISPER_MODEL_TTL is seconds a model may stay idle before it is unloaded (-1: never), got {ttl:g}")
    return ServiceSettings(
        base=PipelineConfig(device=device, dtype=dtype, threads=int(threads) if threads else None,
                            cache_dir=Path(cache) if cache else None, **stages),
        choices=choices,
        max_audio_s=max_audio_s, max_upload_bytes=max(1, int(max_upload_mb * 2**20)), live=live,
        model_ttl_s=None if ttl == -1 else ttl)


def base64_to_file(text: str, out: BinaryIO, max_bytes: int) -> int:
    """Decode a base64 string (optionally a ``data:...;base64,`` URL; whitespace ignored) into
    ``out`` a slice at a time, so no second copy of the upload is ever held; returns the bytes written."""
    start = text.index(",") + 1 if text.startswith("data:") and "," in text else 0
    if (len(text) - start) * 3 // 4 > max_bytes + 2:
        raise RequestError(f"inputs: the upload is larger than {max_bytes} bytes", status=413)
    written, carry = 0, ""
    for i in range(start, len(text), BASE64_SLICE):
        piece = carry + "".join(text[i : i + BASE64_SLICE].split())
        whole = len(piece) - len(piece) % 4
        carry = piece[whole:]
        try:
            data = base64.b64decode(piece[:whole], validate=True)
        except (binascii.Error, ValueError):
            raise RequestError("inputs: not valid base64 (send the audio file as raw bytes or base64)") from None
        written += len(data)
        if written > max_bytes:
            raise RequestError(f"inputs: the upload is larger than {max_bytes} bytes", status=413)
        out.write(data)
    if carry:
        raise RequestError("inputs: not valid base64 (send the audio file as raw bytes or base64)")
    return written


def decode_inputs(inputs: object, max_bytes: int, name: str = "inputs") -> bytes | InMemoryAudio:
    """Raw bytes, a base64 string (optionally a ``data:...;base64,`` URL) to the bytes of an audio file;
    transformers' samples (``{"raw" or "array": [...], "sampling_rate": 16000}``) to those samples."""
    if isinstance(inputs, (bytes, bytearray, memoryview)):
        data = bytes(inputs)
    elif isinstance(inputs, str):
        buf = io.BytesIO()
        base64_to_file(inputs, buf, max_bytes)
        data = buf.getvalue()
    elif isinstance(inputs, Mapping):
        return samples_of(inputs, max_bytes, name)
    elif inputs is None:
        raise RequestError(f"{name}: missing (send the audio file as raw bytes or a base64 string)")
    else:
        raise RequestError(f"{name}: expected audio bytes, a base64 string or {{\"raw\": samples, \"sampling_rate\": Hz}}, "
                           f"got {type(inputs).__name__}")
    if not data:
        raise RequestError(f"{name}: the upload is empty (0 bytes)")
    if len(data) > max_bytes:
        raise RequestError(f"{name}: the upload is larger than {max_bytes} bytes", status=413)
    return data


def samples_of(inputs: Mapping, max_bytes: int, name: str) -> InMemoryAudio:
    """transformers' ASR pipeline's dict input (``raw``, or ``array`` as the datasets library names it, and
    ``sampling_rate``; a dataset row's ``path`` is ignored, as there) as float samples, checked."""
    import numpy as np

    key = "raw" if "raw" in inputs else "array"
    unknown = [k for k in inputs if k not in (key, "sampling_rate", "path")]
    if key not in inputs or "sampling_rate" not in inputs or unknown:
        raise RequestError(f"{name}: samples come as {{\"raw\": [...], \"sampling_rate\": Hz}}"
                           + (f" (unknown key '{clip(str(unknown[0]), 40)}')" if unknown else ""))
    rate = inputs["sampling_rate"]
    if isinstance(rate, bool) or not isinstance(rate, int) or not 1000 <= rate <= 384000:
        raise RequestError(f"{name}.sampling_rate: a whole number of Hz from 1000 to 384000, got {clip(repr(rate), 40)}")
    raw = inputs[key]
    if isinstance(raw, (list, tuple)) and len(raw) * 4 > max_bytes:
        raise RequestError(f"{name}: the upload is larger than {max_bytes} bytes", status=413)
    try:
        samples = np.asarray(raw, dtype=np.float32)
    except (TypeError, ValueError):
        raise RequestError(f"{name}.{key}: expected a list of numbers (samples)") from None
    if samples.ndim == 2 and min(samples.shape) <= 8:  # channels, either way round: mixed down as a file's are
        samples = samples if samples.shape[1] <= samples.shape[0] else samples.T
    elif samples.ndim != 1:
        raise RequestError(f"{name}.{key}: expected samples (one row per channel), got shape {samples.shape}")
    if not np.isfinite(samples).all():
        raise RequestError(f"{name}.{key}: the samples must be finite numbers")
    if samples.nbytes > max_bytes:
        raise RequestError(f"{name}: the upload is larger than {max_bytes} bytes", status=413)
    return InMemoryAudio(samples, rate)


def error(message: str, status: int) -> dict:
    return {"error": message, "status": status}


def timestamp_chunks(segments: list[dict], kind: bool | str, language: str | None = None) -> list[dict]:
    """transformers' ASR pipeline's ``chunks``: ``{"text", "timestamp": (start, end)}`` per segment
    (``return_timestamps=True``) or per word (``"word"``), so a Hugging Face ASR client reads them; with
    ``return_language`` (``language``: the transcript's) each names its language, as there ("english"), and
    without ``return_timestamps`` holds the segment's text and language alone."""
    chunks = []
    for seg in segments:
        said = {"language": language_name(seg.get("language") or language)} if language is not None else {}
        if kind == "word":
            chunks += [{"text": w.get("word", w.get("text")), "timestamp": (w["start"], w["end"]), **said}
                       for w in seg.get("words") or []]
        else:
            chunks.append({"text": seg["text"], **({"timestamp": (seg["start"], seg["end"])} if kind else {}), **said})
    return chunks


def response(transcript: Transcript, params: TranscribeParams, request_s: float) -> dict:
    """Text, segments (times, speaker, words), language, timing and speculative facts; ``chunks``
    when ``return_timestamps`` or ``return_language`` asks for them."""
    out = transcript.to_dict()
    out.pop("source", None)
    for seg in out["segments"]:
        seg.pop("tokens", None)
    out["timings"]["request"] = round(request_s, 3)
    if params.return_timestamps or params.return_language:
        out["chunks"] = timestamp_chunks(out["segments"], params.return_timestamps,
                                         (out.get("language") or "") if params.return_language else None)
    if params.formats:
        out["outputs"] = {fmt: render(transcript, fmt, params.layout()) for fmt in params.formats}
    return out


def outputs_again(answer: dict, params: TranscribeParams) -> dict[str, str]:
    """The formats ``params`` asks for, in its subtitle layout, rendered from an answer (``response``) read
    back: a job's result, in formats its submission did not ask for."""
    transcript = Transcript.from_dict(answer)
    return {fmt: render(transcript, fmt, params.layout()) for fmt in params.formats}


def _request_error(exc: Exception) -> RequestError:
    """A failure as the one-line error its requester gets (a traceback only in the log)."""
    if isinstance(exc, RequestError):
        return exc
    if isinstance(exc, (AudioError, ValueError)):  # bad audio; options the model refuses (language, task)
        return RequestError(one_line(exc), 400)
    if isinstance(exc, (ModelError, OSError)):
        log.error("model unavailable", exc_info=exc)
        return RequestError(f"model unavailable: {one_line(exc)}", 503)
    log.error("request failed", exc_info=exc)
    return RequestError(f"internal error: {one_line(exc)}", 500)


def is_error(result: dict | list) -> bool:
    return isinstance(result, dict) and set(result) == {"error", "status"}


class Endpoint:
    """Callable request handler; the models load once, when it is built."""

    def __init__(self, settings: ServiceSettings | None = None, preload: bool = True):
        self.transcriber = PipelinePool(settings)
        # called with each transcript ``run`` and ``run_many`` make (the HTTP server's metrics)
        self.on_transcript: Callable[[Transcript], None] | None = None
        if preload:  # a deployment starting: every offered name is checked, the default loaded
            self.transcriber.check_choices("SPECWHISPER_MODELS", "SPECWHISPER_DRAFTERS")
            self.transcriber.preload(parse_params({}, self.transcriber.settings.choices))

    def parse(self, data: object) -> TranscribeParams:
        """Check a request's shape and parameters (not its audio); RequestError when they are bad."""
        if not isinstance(data, Mapping):
            raise RequestError(f"the request must be an object with 'inputs' (and 'parameters'), got {type(data).__name__}")
        unknown = [k for k in data if k not in REQUEST_FIELDS]
        if unknown:
            raise RequestError(f"unknown field '{clip(str(unknown[0]))}' (a request has {' and '.join(REQUEST_FIELDS)})")
        return parse_params(data.get("parameters"), self.transcriber.settings.choices)

    def __call__(self, data: object) -> dict | list[dict]:
        """The answer to a request; for a list of ``inputs`` (transformers' pipeline takes a batch so) the list of
        their answers, transcribed in one pass, or the first failure's error."""
        t0 = time.perf_counter()
        try:
            params = self.parse(data)
            inputs, limit = data.get("inputs"), self.transcriber.settings.max_upload_bytes
            if not isinstance(inputs, list):
                return self.transcribe(decode_inputs(inputs, limit), params, t0=t0)
            if not inputs:
                raise RequestError("inputs: an empty list (send one audio file, or a list of them)")
            uploads = [(decode_inputs(item, limit, f"inputs[{i}]"), f"inputs[{i}]") for i, item in enumerate(inputs)]
            if sum(audio.nbytes if isinstance(audio, InMemoryAudio) else len(audio) for audio, _ in uploads) > limit:
                raise RequestError(f"inputs: the uploads are larger than {limit} bytes together", status=413)
        except RequestError as exc:
            return error(str(exc), exc.status)
        outcomes = self.run_many(uploads, params)
        failed = next((o for o in outcomes if isinstance(o, RequestError)), None)
        if failed is not None:
            return error(str(failed), failed.status)
        return [response(t, params, time.perf_counter() - t0) for t in outcomes]

    def predict(self, data: object) -> dict | list[dict]:
        """The answer, or a :class:`RequestError` (one-line message, ``status``) raised for a failure."""
        result = self(data)
        if is_error(result):
            raise RequestError(result["error"], status=result["status"])
        return result

    def run(self, source: str | Path | bytes | InMemoryAudio, params: TranscribeParams, progress: Progress | None = None,
            name: str = "inputs", on_segments: Callable[[list[Segment]], None] | None = None) -> Transcript:
        """Transcribe an upload (bytes or a file, called ``name`` in messages) with checked parameters;
        any failure is raised as a :class:`RequestError` (one line, its status), never a traceback.
        ``on_segments`` gets the segments as they become final (``Pipeline.run_many``'s)."""
        try:
            transcript = self.transcriber.transcribe_input(source, name, params, progress, on_segments)
        except Exception as exc:  # noqa: BLE001 - the contract is an error answer, never a traceback
            raise _request_error(exc) from None
        self._made([transcript])
        return transcript

    def run_many(self, inputs: list[tuple[str | Path | bytes | InMemoryAudio, str]], params: TranscribeParams,
                 progress: Progress | None = None, most_s: list[float] | None = None) -> list[Transcript | RequestError]:
        """``run`` for several uploads with the same parameters, in one pass (their chunks batched across
        files; ``most_s``: ``PipelinePool.transcribe_inputs``): each one's transcript, or its failure as a
        :class:`RequestError`."""
        try:
            outcomes = self.transcriber.transcribe_inputs(inputs, params, progress, most_s)
        except Exception as exc:  # noqa: BLE001 - the contract is an error answer, never a traceback
            if len(inputs) == 1:
                return [_request_error(exc)]
            log.warning("a pass of %d uploads failed (%s): each runs alone", len(inputs), one_line(exc))
            return [self.run_many([item], params, progress)[0] for item in inputs]
        self._made([o for o in outcomes if not isinstance(o, Exception)])
        return [_request_error(o) if isinstance(o, Exception) else o for o in outcomes]

    def _made(self, transcripts: list[Transcript]) -> None:
        if self.on_transcript is not None:
            for transcript in transcripts:
                self.on_transcript(transcript)

    def detect_language(self, source: str | Path | bytes | InMemoryAudio, params: TranscribeParams, name: str = "inputs") -> LanguageDetection:
        """The language of an upload (``PipelinePool.detect_language``); a failure is raised as a
        :class:`RequestError`."""
        try:
            return self.transcriber.detect_language(source, name, params)
        except Exception as exc:  # noqa: BLE001 - the contract is an error answer, never a traceback
            raise _request_error(exc) from None

    def offered(self, name: str) -> str:
        """The offered model ``name`` stands for (``model_named``); a 404 otherwise."""
        model = model_named(name, self.transcriber.settings.choices)
        if model is None:
            raise RequestError(f"no model '{clip(name)}' here (offered: {', '.join(offered_names(self.transcriber.settings.choices))})", 404)
        return model

    def load_model(self, name: str) -> tuple[str, str, bool]:
        """Load an offered model (with the deployment's default drafter) so that no request waits for it:
        (model, drafter, whether it was loaded already)."""
        params = parse_params({"model": self.offered(name)}, self.transcriber.settings.choices)
        before = (params.model, params.draft) in self.transcriber.loaded()
        try:
            self.transcriber.preload(params)
        except Exception as exc:  # noqa: BLE001 - the contract is an error answer, never a traceback
            raise _request_error(exc) from None
        return params.model, params.draft, before

    def unload_model(self, name: str) -> tuple[str, list[str]]:
        """Unload an offered model now, with every drafter it was loaded with: (model, those drafters); a 404
        when it is not loaded."""
        model = self.offered(name)
        drafters = self.transcriber.unload(model)
        if not drafters:
            raise RequestError(f"the model '{model}' is not loaded", 404)
        return model, drafters

    def pass_key(self, params: TranscribeParams) -> str:
        """What uploads must share to be transcribed in one pass (``run_many``): the model and the options
        that shape the transcript, not the answer's form (formats, subtitle layout, timestamps asked)."""
        options = asdict(params.run_options(self.transcriber.settings.max_audio_s))
        options.pop("subtitles")
        return json.dumps([self.transcriber.pipeline_key(params), options], sort_keys=True, default=str)

    def transcribe(self, source: str | Path | bytes | InMemoryAudio, params: TranscribeParams, progress: Progress | None = None,
                   t0: float | None = None) -> dict:
        """Transcribe an upload (bytes or a file) with checked parameters; the answer, or an error dict."""
        t0 = time.perf_counter() if t0 is None else t0
        try:
            transcript = self.run(source, params, progress)
        except RequestError as exc:
            return error(str(exc), exc.status)
        return response(transcript, params, time.perf_counter() - t0)
