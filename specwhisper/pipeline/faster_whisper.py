"""faster-whisper's ``WhisperModel``, over ``Transcriber``: code written for faster-whisper runs on this
package by changing its import::

    from specwhisper import WhisperModel          # was: from faster_whisper import WhisperModel

    model = WhisperModel("base", device="cpu", compute_type="int8")
    segments, info = model.transcribe("audio.mp3", beam_size=5)
    print(f"language {info.language} ({info.language_probability:.2f})")
    for segment in segments:                      # lazy: each segment as it becomes final
        print(f"[{segment.start:.2f}s -> {segment.end:.2f}s] {segment.text}")

``transcribe`` takes faster-whisper's arguments with faster-whisper's defaults (beam search of 5, each
window after the text of the one before), so a program gets the decoding it asked for; the speculative
drafters pay in greedy decoding (``beam_size=1``), chunks decoded side by side in batches
(``condition_on_previous_text=False``). ``length_penalty`` ranks beams as CTranslate2 does (the
log-probability over length ** penalty: our ``length_exponent``); an argument faster-whisper does not have is
a one-line ValueError, never ignored. The
segments are faster-whisper's fields (``id``, ``seek``, ``start``, ``end``, ``text``, ``tokens``,
``avg_logprob``, ``compression_ratio``, ``no_speech_prob``, ``words``, ``temperature``); ``info`` is its
``TranscriptionInfo`` (the language detected first when none is given, as faster-whisper does).
``BatchedInferencePipeline(model)`` is faster-whisper's batched pipeline, with its defaults.
"""

from __future__ import annotations

import logging
import operator
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from typing import Any, BinaryIO

import numpy as np

from specwhisper.asr.decoding.language import normalize_language
from specwhisper.asr.decoding.quality import schedule_of
from specwhisper.audio.clips import clip_spans, parse_clips
from specwhisper.audio.loading import SAMPLE_RATE, at_rate
from specwhisper.pipeline.api import Audio, Transcriber, load, read_audio
from specwhisper.messages import short_repr
from specwhisper.pipeline.writers import format_timestamp

# faster-whisper's logger (``faster_whisper.utils.get_logger``) and its INFO lines, for programs that read them
LOG = logging.getLogger("faster_whisper")

# compute_type -> (our dtype, int8 weights)
COMPUTE_TYPES = {"default": ("auto", False), "auto": ("auto", False), "float32": ("float32", False),
                 "float16": ("float16", False), "bfloat16": ("bfloat16", False), "int8": ("auto", True),
                 "int8_float32": ("float32", True)}
# CTranslate2's int8 weights with half-precision activations (faster-whisper's README on a GPU): int8 on a CPU,
# that half precision on a GPU (int8 weights run on the CPU only here)
INT8_GPU_TYPES = {"int8_float16": "float16", "int8_bfloat16": "bfloat16"}
# faster-whisper's arguments that only take their default here: name -> (default, why)
ONLY_DEFAULT: dict[str, tuple[Any, str]] = {}
# faster-whisper's name -> ours, where they differ
RENAMED = {"log_prob_threshold": "logprob_threshold", "language_detection_threshold": "language_threshold",
           "length_penalty": "length_exponent"}  # CTranslate2's length ** penalty
# max_new_tokens as faster-whisper documents it, the most tokens a window writes (CTranslate2 itself stops at
# half of the prompt and max_new_tokens: 21 tokens for 40 after a 3-token prompt, measured)
PASSED = ("batch_size", "language", "task", "best_of", "patience", "repetition_penalty", "no_repeat_ngram_size",
          "compression_ratio_threshold", "no_speech_threshold", "condition_on_previous_text", "initial_prompt",
          "without_timestamps", "word_timestamps", "multilingual", "vad_filter", "vad_parameters", "chunk_length",
          "hallucination_silence_threshold", "hotwords", "language_detection_segments", "suppress_tokens",
          "max_new_tokens", "prefix", "prepend_punctuations", "append_punctuations",
          "suppress_blank", "max_initial_timestamp", "prompt_reset_on_temperature")


@dataclass
class FwWord:
    """faster-whisper's ``Word``."""

    start: float
    end: float
    word: str
    probability: float

    def _asdict(self) -> dict:
        """faster-whisper's (deprecated there for ``dataclasses.asdict``, which works too)."""
        return asdict(self)


@dataclass
class FwSegment:
    """faster-whisper's ``Segment``."""

    id: int
    seek: int
    start: float
    end: float
    text: str
    tokens: list[int]
    avg_logprob: float
    compression_ratio: float
    no_speech_prob: float
    words: list[FwWord] | None
    temperature: float | None

    def _asdict(self) -> dict:
        """faster-whisper's (deprecated there for ``dataclasses.asdict``, which works too)."""
        return asdict(self)


@dataclass
class TranscriptionInfo:
    """faster-whisper's ``TranscriptionInfo``; ``duration_after_vad``: the seconds the decoder hears (with
    ``vad_filter`` the VAD's speech alone, with ``clip_timestamps`` the clips: ``Transcriber.speech_spans``);
    ``transcription_options``: the options the transcription ran with, by our names; ``vad_options``:
    faster-whisper's ``vad_parameters`` as applied (with ``vad_filter``)."""

    language: str
    language_probability: float
    duration: float
    duration_after_vad: float
    all_language_probs: list[tuple[str, float]] | None
    transcription_options: dict = field(default_factory=dict)
    vad_options: dict | None = None


def peer_load(model: str, device: Any = "auto", compute_type: str = "default", device_index: int | list[int] = 0,
              threads: int | None = None, cache_dir: str | None = None, draft: str = "auto", **options) -> Transcriber:
    """``load`` from the peers' model arguments (faster-whisper's, WhisperX's and openai-whisper's): ``device``
    None is ``auto``; ``compute_type`` one of ``COMPUTE_TYPES``, one device (index 0); ``options``: more of
    ``load``'s. A ValueError, one line, for a value not offered."""
    if compute_type not in COMPUTE_TYPES and compute_type not in INT8_GPU_TYPES:
        raise ValueError(f"compute_type: one of {', '.join([*COMPUTE_TYPES, *INT8_GPU_TYPES])} here, got {compute_type!r}")
    if device_index not in (0, [0]):
        raise ValueError("device_index: one device (0) per model here; load a model per device")
    from specwhisper.hardware.device import resolve_device

    dtype, int8, warning = compute_weights(compute_type, resolve_device("auto" if device is None else str(device)))
    if warning:
        LOG.warning(warning)
    options.update(draft=draft, device="auto" if device is None else str(device), dtype=dtype)
    if threads is not None:
        options["threads"] = threads
    if cache_dir is not None:
        options["cache_dir"] = cache_dir
    return load(model + (":int8" if int8 else ""), **options)


def compute_weights(compute_type: str, device: str) -> tuple[str, bool, str | None]:
    """A CTranslate2 compute type on a resolved device -> (our dtype, int8 weights, a warning or None). int8
    weights run on the CPU only here: on a GPU an int8 type takes the half precision it names (``int8`` and
    ``int8_float32``: float16, the type WhisperX's README gives a GPU), with a warning, as CTranslate2 itself
    falls back to the nearest type a device has; on a CPU ``int8_float16`` / ``int8_bfloat16`` are CTranslate2's
    int8_float32 fallback."""
    if compute_type in INT8_GPU_TYPES:
        if device == "cpu":
            return "float32", True, None
        dtype = INT8_GPU_TYPES[compute_type]
    elif COMPUTE_TYPES[compute_type][1] and device != "cpu":
        dtype = "float16"
    else:
        return (*COMPUTE_TYPES[compute_type], None)
    return dtype, False, f"compute_type {compute_type}: int8 weights run on the CPU only here; {dtype} weights on the GPU"


def available_models() -> list[str]:
    """faster-whisper's and openai-whisper's ``available_models``: the short model names taken here (each a
    Hugging Face id; ``base`` and ``tiny.en`` are embedded)."""
    from specwhisper.asr.weights.loader import SHORT_NAMES

    return list(SHORT_NAMES)


def decode_audio(input_file: str | BinaryIO, sampling_rate: int = 16000, split_stereo: bool = False):
    """faster-whisper's ``decode_audio``: a path or a binary file object as mono float32 samples at
    ``sampling_rate`` Hz, or with ``split_stereo`` its (left, right) channels (a mono file's one channel twice)."""
    channels = at_rate(read_audio(input_file, channels=split_stereo)[0], sampling_rate)
    if not split_stereo:
        return channels
    if len(channels) > 2:
        raise ValueError(f"decode_audio: split_stereo takes a mono or stereo file, this one has {len(channels)} channels")
    return channels[0], channels[-1]


class WhisperModel:
    """faster-whisper's ``WhisperModel(model_size_or_path, device, compute_type, cpu_threads, download_root)``
    over a ``Transcriber`` (the models load once, here). ``draft``: this package's drafter (``auto``)."""

    def __init__(self, model_size_or_path: str = "base", device: str = "auto", device_index: int | list[int] = 0,
                 compute_type: str = "default", cpu_threads: int = 0, num_workers: int = 1,
                 download_root: str | None = None, local_files_only: bool = False, draft: str = "auto", **kwargs):
        if kwargs:
            raise ValueError(f"WhisperModel: {next(iter(kwargs))} is not taken")
        self.transcriber: Transcriber = peer_load(model_size_or_path, device, compute_type, device_index,
                                                  cpu_threads or None, download_root, draft)

    def transcribe(self, audio: Audio, language: str | None = None, task: str = "transcribe", log_progress: bool = False,
                   beam_size: int = 5, best_of: int = 5, patience: float = 1, temperature: float | Iterable[float] =
                   (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), condition_on_previous_text: bool = True,
                   clip_timestamps: str | list[float] = "0", language_detection_segments: int = 1,
                   **kwargs) -> tuple[Iterator[FwSegment], TranscriptionInfo]:
        """faster-whisper's ``transcribe``: (the segments, lazily, as each becomes final; the info). A numpy
        array is 16 kHz samples, as faster-whisper takes it."""
        if kwargs.get("vad_filter"):
            kwargs["vad_parameters"] = _vad_options(kwargs.get("vad_parameters"))
        engine = self.transcriber.pipeline.asr
        if kwargs.get("initial_prompt") is not None and not isinstance(kwargs["initial_prompt"], str):  # token ids
            kwargs["initial_prompt"] = engine.text_of(token_ids(kwargs["initial_prompt"], "initial_prompt",
                                                                engine.bundle.model.config.vocab_size))
        options = self._options(language, task, beam_size, best_of, patience, temperature, condition_on_previous_text,
                                clip_timestamps, {**kwargs, "language_detection_segments": language_detection_segments})
        if not isinstance(audio, np.ndarray):  # read once: the language, the VAD's spans and the stream read it
            audio = read_audio(audio)[0]
        rate = SAMPLE_RATE  # a numpy array is 16 kHz samples, as faster-whisper takes it
        languages = None
        multilingual = engine.special.multilingual
        options = english_only(multilingual, options)
        options["language"] = normalize_language(options.get("language"))  # "EN", "English": "en"; "auto": None
        if options["language"] is None and not multilingual:
            options["language"] = "en"  # as there: an English-only model's, not detected
        clips = options.get("clip_timestamps")
        unheard = clips is not None and not clip_spans(parse_clips(clips), len(audio))  # no clip within the audio
        if options["language"] is not None:
            language, probability = options["language"], 1.0
        elif unheard:
            language, probability = None, 0.0  # no clip within the audio: nothing heard, no segment
        else:  # known before the first segment, as faster-whisper's info is
            detection_options = {k: options[k] for k in _DETECTION if k in options}
            found = self.transcriber.detect_language(audio, sample_rate=rate, **detection_options)
            languages = sorted(found.probabilities.items(), key=lambda kv: -kv[1])
            if not options.get("multilingual"):
                options["language"] = found.language
            language, probability = found.language, found.probability
            LOG.info("Detected language '%s' with probability %.2f", language, probability)
        progress = _printed if log_progress else None
        stream = self.transcriber.stream(audio, sample_rate=rate, progress=progress, **options)
        duration = heard = stream.duration
        LOG.info("Processing audio with duration %s", format_timestamp(duration))
        if unheard:
            heard = 0.0
        elif options.get("vad_filter") or "clip_timestamps" in options:  # known before the first segment, as there
            heard = sum(b - a for a, b in self.transcriber.speech_spans(audio, sample_rate=rate, **options))
            LOG.info("VAD filter removed %s of audio", format_timestamp(max(duration - heard, 0.0)))
        info = TranscriptionInfo(language, probability, duration, heard, languages, dict(options),
                                 kwargs.get("vad_parameters"))
        return _segments(stream, options.get("word_timestamps", False)), info

    @property
    def supported_languages(self) -> list[str]:
        """faster-whisper's: the language codes the model takes, sorted (``["en"]`` for an English-only one; there
        every code of the newest model's, Cantonese for large-v3 too)."""
        special = self.transcriber.pipeline.asr.special
        return sorted(special.languages) if special.multilingual else ["en"]

    def detect_language(self, audio: Audio, vad_filter: bool = False, vad_parameters: dict | None = None,
                        language_detection_segments: int = 1, language_detection_threshold: float = 0.5
                        ) -> tuple[str, float, list[tuple[str, float]]]:
        """faster-whisper's ``detect_language``: (language, its probability, every language's, most likely first)."""
        rate = 16000 if isinstance(audio, np.ndarray) else None
        found = self.transcriber.detect_language(audio, sample_rate=rate, vad_filter=vad_filter,
                                                 vad_parameters=_vad_options(vad_parameters) if vad_filter else vad_parameters,
                                                 language_detection_segments=language_detection_segments,
                                                 language_threshold=language_detection_threshold)
        return found.language, found.probability, sorted(found.probabilities.items(), key=lambda kv: -kv[1])

    @staticmethod
    def _options(language, task, beam_size, best_of, patience, temperature, condition_on_previous_text,
                 clip_timestamps, kwargs: dict) -> dict:
        """Our options for faster-whisper's arguments; a ValueError for one we do not take."""
        options: dict[str, Any] = {"language": language, "task": task, "best_of": best_of, "patience": patience,
                                   "condition_on_previous_text": condition_on_previous_text,
                                   "beam_size": None if beam_size == 1 else beam_size}
        options.update(temperature_options(temperature))
        options.update(peer_options(kwargs, "faster-whisper", clip_timestamps, ONLY_DEFAULT, PASSED, RENAMED))
        if "chunk_length" in options and options["chunk_length"] is None:  # faster-whisper's default: the model's 30 s
            del options["chunk_length"]
        return options


class BatchedInferencePipeline:
    """faster-whisper's ``BatchedInferencePipeline(model)``: ``transcribe`` with its defaults, the VAD's speech
    alone (``vad_filter``), joined into windows decoded ``batch_size`` at a time without timestamp tokens,
    each at the schedule's first temperature (faster-whisper's batched decoding samples no fallback and
    conditions no window on another)."""

    def __init__(self, model: WhisperModel):
        self.model = model

    def transcribe(self, audio: Audio, language: str | None = None, task: str = "transcribe", log_progress: bool = False,
                   beam_size: int = 5, batch_size: int = 8, vad_filter: bool = True, without_timestamps: bool = True,
                   temperature: float | Iterable[float] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0), condition_on_previous_text: bool = True,
                   **kwargs) -> tuple[Iterator[FwSegment], TranscriptionInfo]:
        """faster-whisper's ``BatchedInferencePipeline.transcribe`` (``condition_on_previous_text`` is taken and,
        as there, not applied). ``clip_timestamps``: as there, the stretches to transcribe, a list of
        ``{"start": s, "end": s}`` in seconds (each transcribed whole, a clip over 30 s too); the VAD is then not
        run, as there; or our ``start,end,...`` form."""
        first = temperature if isinstance(temperature, (int, float)) else next(iter(temperature), 0.0)
        clips = kwargs.get("clip_timestamps")
        if isinstance(clips, (list, tuple)) and any(isinstance(c, dict) for c in clips):
            kwargs["clip_timestamps"] = _clip_seconds(clips)
            vad_filter = False
        if vad_filter and kwargs.get("vad_parameters") is None:  # its own: 160 ms of silence ends a span
            kwargs["vad_parameters"] = {"min_silence_duration_ms": 160}
        return self.model.transcribe(audio, language, task, log_progress, beam_size, temperature=float(first),
                                     condition_on_previous_text=False, vad_filter=vad_filter,
                                     without_timestamps=without_timestamps, batch_size=batch_size, **kwargs)


def _clip_seconds(clips: list[dict]) -> list[float]:
    """faster-whisper's batched ``clip_timestamps`` (``[{"start": s, "end": s}, ...]``) as ours: start, end, ..."""
    out: list[float] = []
    for clip in clips:
        if not isinstance(clip, dict) or not {"start", "end"} <= clip.keys():
            raise ValueError(f"clip_timestamps: each a dict of 'start' and 'end' seconds, got {clip!r}")
        out += [clip["start"], clip["end"]]
    return out


# faster-whisper's ``VadOptions`` defaults that differ from this package's own (``audio.vad``)
VAD_OPTIONS = {"threshold": 0.5, "min_silence_duration_ms": 2000, "speech_pad_ms": 400}


def _vad_options(given):
    """faster-whisper's ``vad_parameters`` as it applies them: what is not given at ``VadOptions``' defaults (a
    span ends at 2 s of silence, where this package's --vad-filter ends it at 160 ms, as the batched pipeline)."""
    if given is None or isinstance(given, dict):
        return {**VAD_OPTIONS, **(given or {})}
    return given  # a VadOptions: every field given


# the options that choose the windows a language is detected on (``Transcriber.detect_language``)
_DETECTION = ("vad_filter", "vad_parameters", "chunk_length", "clip_timestamps", "language_threshold",
              "language_detection_segments")


def english_only(multilingual_model: bool, options: dict) -> dict:
    """``options`` for an English-only model as the peers take them: a language other than English, translation
    and ``multilingual`` ignored, each with faster-whisper's warning, and English transcribed (this package's
    own entry points refuse them with one line instead)."""
    if multilingual_model:
        return options
    out = dict(options)
    if normalize_language(out.get("language")) not in (None, "en"):
        LOG.warning("The current model is English-only but the language parameter is set to '%s'; using 'en' instead.",
                    out["language"])
        out["language"] = "en"
    if out.get("task") == "translate":
        LOG.warning("The current model is English-only and cannot translate; transcribing instead.")
        out["task"] = "transcribe"
    if out.get("multilingual"):
        LOG.warning("The current model is English-only but the multilingual parameter is set to True; setting to False instead.")
        out["multilingual"] = False
    return out


def peer_options(arguments: dict, peer: str, clip_timestamps, only_default: dict[str, tuple[Any, str]],
                 passed: tuple[str, ...], renamed: dict[str, str] | None = None) -> dict:
    """A peer's keyword ``arguments`` as our options: those ``passed`` as they are (or ``renamed``), those
    taken at their default only (``only_default``: name -> (default, why)) checked, any other refused; and
    ``clip_timestamps`` ("0": all of it). A one-line ValueError names the peer."""
    renamed = renamed or {}
    out: dict[str, Any] = {}
    if clip_timestamps not in ("0", [0], [0.0], None):
        out["clip_timestamps"] = clip_timestamps if isinstance(clip_timestamps, str) else list(clip_timestamps)
    for name, value in arguments.items():
        if name in only_default:
            default, why = only_default[name]
            if value != default:
                raise ValueError(f"{name}: only {peer}'s default ({default!r}) here: {why}")
        elif name in renamed or name in passed:
            out[renamed.get(name, name)] = suppress_spec(value) if name == "suppress_tokens" else value
        else:
            raise ValueError(f"transcribe: {name} is not one of {peer}'s arguments")
    return out


def token_ids(value: Any, name: str, vocab_size: int) -> list[int]:
    """A peer's prompt or prefix given as token ids (faster-whisper's ``initial_prompt``, openai-whisper's
    ``DecodingOptions.prompt``): integers in the model's vocabulary, or a one-line ValueError naming ``name``."""
    if isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise ValueError(f"{name}: text or a list of token ids, got {type(value).__name__}")
    try:
        ids = [operator.index(i) for i in value]
    except TypeError:
        raise ValueError(f"{name}: token ids are integers, got {short_repr(value)}") from None
    if (bad := next((i for i in ids if not 0 <= i < vocab_size), None)) is not None:
        raise ValueError(f"{name}: token id {bad} is not in the model's vocabulary (0 to {vocab_size - 1})")
    return ids


def suppress_spec(value: str | Iterable[int] | None) -> str:
    """The peers' ``suppress_tokens`` (openai-whisper's ``"-1,220"`` or a list of ids, faster-whisper's list;
    None or empty: none but what decoding itself needs) as our option's text."""
    if value is None or isinstance(value, str):
        return value or ""
    return ",".join(str(int(i)) for i in value)


def temperature_options(temperature: float | Iterable[float]) -> dict:
    """faster-whisper's and openai-whisper's temperature (one, or its fallback schedule) as ours."""
    if isinstance(temperature, (int, float)):
        return {"temperature": float(temperature), "temperature_increment_on_fallback": None}
    try:
        first, step = schedule_of(temperature)
    except ValueError as exc:
        raise ValueError(f"temperature: {exc}") from None
    return {"temperature": first, "temperature_increment_on_fallback": step}


def _segments(stream, words: bool) -> Iterator[FwSegment]:
    for i, s in enumerate(stream, start=1):
        timed = [FwWord(w.start, w.end, w.text, w.probability) for w in s.words] if words else None
        yield FwSegment(i, s.seek, s.start, s.end, s.text, s.tokens, s.avg_logprob, s.compression_ratio,
                        s.no_speech_prob, timed, s.temperature)


def _printed(stage: str, fraction: float) -> None:
    """``log_progress``: the transcription's share done, on standard error."""
    if stage == "transcribe":
        import sys

        print(f"\rtranscribe: {fraction:5.1%}", end="\n" if fraction >= 1.0 else "", file=sys.stderr, flush=True)
