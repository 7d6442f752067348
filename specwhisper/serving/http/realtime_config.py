"""A Realtime API transcription session's settings, as OpenAI's ``session.update`` (and the API's beta
``transcription_session.update``) sets them, and the audio formats its appends come in
(:mod:`specwhisper.serving.http.realtime_ws` speaks the session).

Input formats (OpenAI's three): ``{"type": "audio/pcm", "rate": 24000}`` (16-bit little-endian mono
PCM, the default; the beta's ``pcm16``), and G.711 at 8 kHz as telephony sends it, ``{"type":
"audio/pcmu"}`` (mu-law, the beta's ``g711_ulaw``) and ``{"type": "audio/pcma"}`` (A-law, ``g711_alaw``),
decoded by libsndfile (soundfile), bit for bit as ffmpeg's ``pcm_mulaw`` / ``pcm_alaw`` decoders.
"""

from __future__ import annotations

import base64
import binascii
import io
from dataclasses import dataclass, field, replace

import numpy as np
import soundfile as sf

from specwhisper.live.turns import EAGERNESS_WAIT_MS, TurnSettings
from specwhisper.serving.params import ALIAS, RequestError, TranscribeParams, model_named, offered_names, parse_params
from specwhisper.messages import clip, one_line, short_repr

INPUT_RATE = 24_000  # OpenAI's PCM rate
G711_RATE = 8_000
LOGPROBS = "item.input_audio_transcription.logprobs"  # what a session may ``include`` (OpenAI's one value)


class EventError(ValueError):
    """A client event refused: OpenAI's ``error`` event, the session goes on."""

    def __init__(self, message: str, code: str = "invalid_value", param: str | None = None, event_id: str | None = None):
        super().__init__(message)
        self.code, self.param, self.event_id = code, param, event_id


@dataclass(frozen=True)
class InputFormat:
    """The appends' audio: OpenAI's format ``type``, its sample rate, its libsndfile subtype and bytes
    per sample, and its name in the API's beta form."""

    type: str
    rate: int
    subtype: str
    width: int
    beta: str

    def to_json(self) -> dict:
        return {"type": self.type, "rate": self.rate} if self.type == "audio/pcm" else {"type": self.type}

    def decode(self, audio: object) -> np.ndarray:
        """An append's ``audio`` (base64 of this format's bytes) as float32 samples in [-1, 1]."""
        if not isinstance(audio, str):
            raise EventError(f"audio must be a base64 string of {self.type} audio", param="audio")
        try:
            raw = base64.b64decode(audio, validate=True)
        except (binascii.Error, ValueError):
            raise EventError("audio is not valid base64", param="audio") from None
        if len(raw) % self.width:
            raise EventError(f"audio of {len(raw)} bytes is not whole 16-bit samples", param="audio")
        if not raw:
            return np.zeros(0, np.float32)
        if self.subtype == "PCM_16":
            return np.frombuffer(raw, "<i2").astype(np.float32) / 32768.0
        samples, _ = sf.read(io.BytesIO(raw), format="RAW", subtype=self.subtype, samplerate=self.rate, channels=1,
                             dtype="float32")
        return samples


PCM = InputFormat("audio/pcm", INPUT_RATE, "PCM_16", 2, "pcm16")
FORMATS = {f.type: f for f in (PCM, InputFormat("audio/pcmu", G711_RATE, "ULAW", 1, "g711_ulaw"),
                               InputFormat("audio/pcma", G711_RATE, "ALAW", 1, "g711_alaw"))}
BETA_FORMATS = {f.beta: f for f in FORMATS.values()}


@dataclass(frozen=True)
class SessionConfig:
    """A transcription session's settings (``session.update`` changes them)."""

    model: str = ALIAS  # as the client named it: ``whisper-1`` is the deployment's default model
    language: str | None = None
    prompt: str = ""  # each turn's initial prompt (names, a glossary)
    turns: TurnSettings | None = field(default_factory=TurnSettings)  # None: the client commits
    format: InputFormat = PCM
    logprobs: bool = False  # ``include``: the words' log-probabilities in the deltas and the transcript
    params: TranscribeParams | None = None  # the model and language, checked

    def to_beta_json(self) -> dict:
        """The session in the API's beta form (``transcription_session.updated``)."""
        ga = self.to_json()["audio"]["input"]
        return {"object": "realtime.transcription_session", "input_audio_format": self.format.beta,
                "input_audio_transcription": ga["transcription"], "turn_detection": ga["turn_detection"],
                "input_audio_noise_reduction": None, "include": self._include()}

    def to_json(self) -> dict:
        return {"type": "transcription", "object": "realtime.transcription_session", "include": self._include(), "audio": {"input": {
            "format": self.format.to_json(),
            "transcription": {"model": self.model, "language": self.language, "prompt": self.prompt},
            "turn_detection": self._detection(), "noise_reduction": None}}}

    def _detection(self) -> dict | None:
        turns = self.turns
        if turns is None:
            return None
        if turns.eagerness is not None:
            return {"type": "semantic_vad", "eagerness": turns.eagerness}
        return {"type": "server_vad", "threshold": turns.threshold, "prefix_padding_ms": turns.prefix_padding_ms,
                "silence_duration_ms": turns.silence_duration_ms}

    def _include(self) -> list[str] | None:
        return [LOGPROBS] if self.logprobs else None


def checked(config: SessionConfig, choices) -> SessionConfig:
    """``config`` with its request parameters checked (EventError on a model or language not offered)."""
    model = model_named(config.model, choices)
    if model is None:
        raise EventError(f"model '{clip(config.model, 60)}' is not offered here (offered: {', '.join(offered_names(choices))})",
                         param="session.audio.input.transcription.model")
    fields = {"model": model, "language": config.language, "initial_prompt": config.prompt or None}
    try:
        params = parse_params({k: v for k, v in fields.items() if v is not None}, choices)
    except RequestError as exc:
        message = str(exc).removeprefix("parameters.").replace("initial_prompt", "prompt")
        name = next((n for n in ("model", "language") if message.startswith(n)), "prompt")
        raise EventError(message, param=f"session.audio.input.transcription.{name}") from None
    return replace(config, params=params)


def updated(config: SessionConfig, session: object, choices) -> SessionConfig:
    """The config a ``session.update``'s ``session`` asks for (what it leaves out is kept)."""
    entry = _input(session)
    fmt = format_of(session)
    if fmt is not None:
        config = replace(config, format=fmt)
    if "transcription" in entry:
        t = entry["transcription"]
        if not isinstance(t, dict):
            raise EventError("transcription must be an object (this session always transcribes)",
                             param="session.audio.input.transcription")
        prompt = t.get("prompt") or ""
        if not isinstance(prompt, str):
            raise EventError(f"prompt must be a string, got {short_repr(prompt)}", param="session.audio.input.transcription.prompt")
        for key in ("model", "language"):
            if not isinstance(t.get(key) or "", str):
                raise EventError(f"{key} must be a string, got {short_repr(t[key])}",
                                 param=f"session.audio.input.transcription.{key}")
        config = replace(config, model=t.get("model") or ALIAS, language=t.get("language") or None, prompt=prompt)
    if "turn_detection" in entry:
        config = replace(config, turns=_turns(entry["turn_detection"]))
    if "include" in session:
        config = replace(config, logprobs=_include(session["include"]))
    return checked(config, choices)


def format_of(session: object) -> InputFormat | None:
    """The input format a ``session.update``'s ``session`` names (None: it names none)."""
    fmt = _input(session).get("format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or not isinstance(fmt.get("type"), str) or fmt["type"] not in FORMATS:
        raise EventError(f"the input format must be one of {', '.join(FORMATS)}, got {short_repr(fmt)}",
                         param="session.audio.input.format")
    chosen = FORMATS[fmt["type"]]
    if fmt.get("rate", chosen.rate) != chosen.rate:
        raise EventError(f"{chosen.type} is taken at {chosen.rate} Hz, got a rate of {short_repr(fmt.get('rate'))}",
                         param="session.audio.input.format")
    return chosen


def from_beta(session: object) -> object:
    """A ``transcription_session.update``'s session (the API's beta form: ``input_audio_format``,
    ``input_audio_transcription``, ``turn_detection`` at its top) in the form ``updated`` reads."""
    if not isinstance(session, dict):
        return session
    entry: dict = {}
    if session.get("input_audio_format") is not None:
        fmt = session["input_audio_format"]
        entry["format"] = BETA_FORMATS[fmt].to_json() if isinstance(fmt, str) and fmt in BETA_FORMATS else {"type": fmt}
    if "input_audio_transcription" in session:
        entry["transcription"] = session["input_audio_transcription"]
    if "turn_detection" in session:
        entry["turn_detection"] = session["turn_detection"]
    return {"type": "transcription", "audio": {"input": entry}, **({"include": session["include"]} if "include" in session else {})}


def _input(session: object) -> dict:
    """A session's ``audio.input`` (EventError where the session is not a transcription session's)."""
    if not isinstance(session, dict):
        raise EventError(f"session must be an object, got {short_repr(session)}", param="session")
    if session.get("type", "transcription") != "transcription":
        raise EventError(f"this server holds transcription sessions only (session.type 'transcription'), got "
                         f"{short_repr(session.get('type'))}", param="session.type")
    return _object(_object(session, "audio", "session"), "input", "session.audio")


def _object(parent: dict, key: str, where: str) -> dict:
    value = parent.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise EventError(f"{key} must be an object, got {short_repr(value)}", param=f"{where}.{key}")
    return value


def _include(include: object) -> bool:
    if include is None:
        return False
    if not isinstance(include, list) or any(i != LOGPROBS for i in include):
        raise EventError(f"include may hold {LOGPROBS!r} alone, got {short_repr(include)}", param="session.include")
    return bool(include)


def _turns(detection: object) -> TurnSettings | None:
    param = "session.audio.input.turn_detection"
    if detection is None:
        return None
    if not isinstance(detection, dict) or detection.get("type") not in ("server_vad", "semantic_vad"):
        raise EventError(f"turn_detection must be null or of type server_vad or semantic_vad, got {short_repr(detection)}",
                         param=param)
    if detection["type"] == "semantic_vad":  # create_response, interrupt_response: a transcription session makes no responses
        eagerness = detection.get("eagerness") or "auto"
        if not isinstance(eagerness, str) or eagerness not in EAGERNESS_WAIT_MS:
            raise EventError(f"eagerness must be one of {', '.join(EAGERNESS_WAIT_MS)}, got {short_repr(eagerness)}",
                             param=f"{param}.eagerness")
        return TurnSettings(eagerness=eagerness)
    kept = {k: detection[k] for k in ("threshold", "prefix_padding_ms", "silence_duration_ms") if detection.get(k) is not None}
    try:
        return TurnSettings(**{k: (float(v) if k == "threshold" else int(v)) for k, v in kept.items()})
    except (TypeError, ValueError, OverflowError) as exc:  # OverflowError: 1e400 or Infinity as a whole number
        raise EventError(f"turn_detection: {one_line(exc)}", param=param) from None
