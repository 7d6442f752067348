"""openai-whisper's lower-level API, over this package's engine: the second example of its README runs on
this package by changing its import::

    import specwhisper as whisper                  # was: import whisper

    model = whisper.load_model("base")
    audio = whisper.pad_or_trim(whisper.load_audio("audio.mp3"))
    mel = whisper.log_mel_spectrogram(audio, n_mels=model.dims.n_mels).to(model.device)
    _, probs = model.detect_language(mel)
    result = whisper.decode(model, mel, whisper.DecodingOptions())
    print(result.text)

``model.embed_audio(mel[None])`` is the encoder's output, which ``decode`` and ``detect_language`` take in the
mel's place, as there (several decodes of one window encode it once).

``decode`` is one decode of each 30-second window, as there (no fallback, no seeking): greedy (speculative
where the model's drafter runs: the same tokens), ``beam_size`` beams, or ``best_of`` samples at a
``temperature``; ``prompt`` is the text (or tokens) before the window, ``prefix`` the text (or tokens) it is forced
to start with, left out of the result, as there. A combination openai-whisper refuses is a one-line ValueError.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, at_rate, load_audio as _load_audio

if TYPE_CHECKING:  # torch and the engine load with the models (``import specwhisper`` imports neither)
    import torch

    from specwhisper.asr.engine import AsrEngine

N_SAMPLES = 30 * SAMPLE_RATE  # a window's samples
N_FRAMES = 3000  # a window's log-mel frames


@dataclass(frozen=True)
class DecodingOptions:
    """openai-whisper's ``DecodingOptions``, its fields and defaults (``fp16``: taken and not needed: the dtype
    is chosen when the model loads)."""

    task: str = "transcribe"
    language: str | None = None
    temperature: float = 0.0
    sample_len: int | None = None
    best_of: int | None = None
    beam_size: int | None = None
    patience: float | None = None
    length_penalty: float | None = None
    prompt: str | list[int] | None = None
    prefix: str | list[int] | None = None
    suppress_tokens: str | list[int] | None = "-1"
    suppress_blank: bool = True
    without_timestamps: bool = False
    max_initial_timestamp: float | None = 1.0
    fp16: bool = True


@dataclass(frozen=True)
class DecodingResult:
    """openai-whisper's ``DecodingResult``: ``tokens`` with their timestamp tokens, ``text`` without."""

    audio_features: torch.Tensor
    language: str
    language_probs: dict[str, float] | None = None
    tokens: list[int] = field(default_factory=list)
    text: str = ""
    avg_logprob: float = math.nan
    no_speech_prob: float = math.nan
    temperature: float = math.nan
    compression_ratio: float = math.nan


@dataclass(frozen=True)
class ModelDimensions:
    """openai-whisper's ``ModelDimensions`` of a loaded model (``model.dims``)."""

    n_mels: int
    n_audio_ctx: int
    n_audio_state: int
    n_audio_head: int
    n_audio_layer: int
    n_vocab: int
    n_text_ctx: int
    n_text_state: int
    n_text_head: int
    n_text_layer: int

    @classmethod
    def of(cls, config) -> "ModelDimensions":
        """From a transformers ``WhisperConfig``."""
        return cls(config.num_mel_bins, config.max_source_positions, config.d_model, config.encoder_attention_heads,
                   config.encoder_layers, config.vocab_size, config.max_target_positions, config.d_model,
                   config.decoder_attention_heads, config.decoder_layers)


def load_audio(file: str, sr: int = SAMPLE_RATE) -> np.ndarray:
    """openai-whisper's and WhisperX's ``load_audio``: the file as mono float32 samples at ``sr`` Hz."""
    return at_rate(_load_audio(file), sr)


def pad_or_trim(array, length: int = N_SAMPLES, *, axis: int = -1):
    """openai-whisper's ``pad_or_trim``: a numpy array or tensor cut or zero-padded to ``length`` along ``axis``."""
    size = array.shape[axis]
    if not isinstance(array, np.ndarray):  # a tensor
        import torch

        if size > length:
            return array.index_select(axis, torch.arange(length, device=array.device))
        if size < length:
            pad = [0, 0] * array.dim()
            pad[-2 * (axis % array.dim()) - 1] = length - size
            return torch.nn.functional.pad(array, pad)
        return array
    if size > length:
        return array.take(indices=range(length), axis=axis)
    if size < length:
        widths = [(0, 0)] * array.ndim
        widths[axis] = (0, length - size)
        return np.pad(array, widths)
    return array


@lru_cache(maxsize=None)
def _log_mel(n_mels: int, device: str):
    """Whisper's log-mel of ``n_mels`` bands (``specwhisper.asr.features.LogMel``) on ``device``."""
    from transformers import WhisperFeatureExtractor

    from specwhisper.asr.features import LogMel

    return LogMel(WhisperFeatureExtractor(feature_size=n_mels), device)


def log_mel_spectrogram(audio, n_mels: int = 80, padding: int = 0, device: str | torch.device | None = None) -> torch.Tensor:
    """openai-whisper's ``log_mel_spectrogram``: [n_mels, frames] of a path, or of 16 kHz samples (numpy or a
    tensor) followed by ``padding`` zeros."""
    import torch

    if isinstance(audio, str):
        audio = _load_audio(audio)
    samples = torch.as_tensor(audio, dtype=torch.float32)
    if device is not None:
        samples = samples.to(device)
    if padding > 0:
        samples = torch.nn.functional.pad(samples, (0, padding))
    if n_mels not in (80, 128):
        raise ValueError(f"log_mel_spectrogram: n_mels 80 or 128 (Whisper's), got {n_mels}")
    log_mel = _log_mel(n_mels, str(samples.device))
    if samples.dim() != 1 or len(samples) <= log_mel.n_fft // 2:  # the STFT's reflection needs more than half a frame
        raise ValueError(f"log_mel_spectrogram: mono samples, more than {log_mel.n_fft // 2}, got shape {list(samples.shape)}")
    return log_mel.log_mel(samples[None])[0]


def _checked(engine: AsrEngine, mel: torch.Tensor, options: DecodingOptions) -> torch.Tensor:
    """``mel`` as [rows, mels, frames] (or the encoder's output of such windows, [rows, n_audio_ctx,
    n_audio_state], which openai-whisper takes in its place), or a one-line ValueError (the option
    combinations openai-whisper refuses)."""
    import torch

    if options.task not in ("transcribe", "translate"):
        raise ValueError(f"task: transcribe or translate, got {options.task!r}")
    if options.beam_size is not None and options.best_of is not None:
        raise ValueError("beam_size and best_of can't be given together")
    if options.temperature == 0 and options.best_of is not None:
        raise ValueError("best_of with greedy sampling (T=0) is not compatible")
    if options.patience is not None and options.beam_size is None:
        raise ValueError("patience requires beam_size to be given")
    if not torch.is_tensor(mel):
        mel = torch.as_tensor(np.asarray(mel, np.float32))
    mels = engine.bundle.model.config.num_mel_bins
    if mel.dim() not in (2, 3) or tuple(mel.shape[-2:]) not in ((mels, N_FRAMES), _encoded_shape(engine)):
        ctx, state = _encoded_shape(engine)
        raise ValueError(f"mel: [{mels}, {N_FRAMES}] or [batch, {mels}, {N_FRAMES}] (log_mel_spectrogram of "
                         f"pad_or_trim(audio)), or the encoder's [batch, {ctx}, {state}] (model.embed_audio), "
                         f"got {list(mel.shape)}")
    return mel if mel.dim() == 3 else mel[None]


def detect_language(engine: AsrEngine, mel) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """openai-whisper's ``detect_language`` of [rows, mels, frames]: each row's language token and every
    language's probability."""
    return _languages(engine, _encoded(engine, _checked(engine, mel, DecodingOptions()))[1])


def embed_audio(engine: AsrEngine, mel) -> torch.Tensor:
    """openai-whisper's ``model.embed_audio``: the encoder's output of [rows, mels, frames] windows, which
    ``decode`` and ``detect_language`` take in their place (the encoder then runs no more)."""
    return _encoded(engine, _checked(engine, mel, DecodingOptions()))[1]


def _encoded_shape(engine: AsrEngine) -> tuple[int, int]:
    config = engine.bundle.model.config
    return config.max_source_positions, config.d_model


def _encoded(engine: AsrEngine, mel: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor]:
    """The windows on the model's device and dtype, and their encoder output (once per ``decode``); given
    the encoder's output, no windows (None: a drafter with an encoder of its own then drafts nothing, and the
    tokens are the same)."""
    given = mel.to(engine.device, engine.bundle.model.dtype)
    if tuple(mel.shape[-2:]) == _encoded_shape(engine):
        return None, given
    return given, engine.encoder.encode(given)


def _languages(engine: AsrEngine, enc: torch.Tensor) -> tuple[torch.Tensor, list[dict[str, float]]]:
    """Each encoded row's language token and every language's probability."""
    import torch

    from specwhisper.asr.decoding.language import language_probabilities

    if not engine.special.multilingual:
        raise ValueError("detect_language: this model is English-only and has no language tokens")
    probs = [language_probabilities(engine.runtime, engine.special, enc[i:i + 1]) for i in range(len(enc))]
    return torch.tensor([engine.special.languages[next(iter(p))] for p in probs]), probs


def decode(engine: AsrEngine, mel, options: DecodingOptions) -> list[DecodingResult]:
    """openai-whisper's ``decode`` of [rows, mels, frames] (see the module's docstring)."""
    from specwhisper.asr.decoding.quality import QualityRules, compression_ratio
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.pipeline.faster_whisper import english_only, suppress_spec, token_ids

    mel = _checked(engine, mel, options)
    # beam search ranks log-probabilities at temperature 0, whatever ``temperature`` says, as there
    temperature = 0.0 if options.beam_size is not None else float(options.temperature)
    quality = QualityRules(temperatures=(temperature,), compression_ratio_threshold=None, logprob_threshold=None,
                           no_speech_threshold=None, best_of=options.best_of or 1, sample_tokens_per_s=None,
                           length_penalty=options.length_penalty)
    asked = english_only(engine.special.multilingual, {"language": options.language, "task": options.task})
    opts = DecodeOptions(language=asked["language"], task=asked["task"], beam_size=options.beam_size,
                         patience=options.patience or 1.0, suppress_tokens=suppress_spec(options.suppress_tokens),
                         max_new_tokens=options.sample_len, quality=quality, suppress_blank=options.suppress_blank,
                         max_initial_timestamp=options.max_initial_timestamp)
    opts.validate(engine.special)  # the language a code ("English" -> "en"), or a one-line ValueError
    features, enc = _encoded(engine, mel)
    rows = len(mel)
    languages: list[str] = [opts.language or "en"] * rows
    probs: list[dict[str, float] | None] = [None] * rows
    if opts.language is None and engine.special.multilingual:
        _, found = _languages(engine, enc)
        languages, probs = [next(iter(p)) for p in found], found
    vocab = engine.bundle.model.config.vocab_size
    context = (engine.context_of(options.prompt) if options.prompt is None or isinstance(options.prompt, str)
               else token_ids(options.prompt, "prompt", vocab))
    # the prefix as openai-whisper cuts it: its last n_ctx // 2 - sample_len tokens ([-0:] keeps them all, as there)
    forced = (engine.context_of(options.prefix) if options.prefix is None or isinstance(options.prefix, str)
              else token_ids(options.prefix, "prefix", vocab))
    half = engine.bundle.model.config.max_target_positions // 2
    forced = list(forced)[-(half - (options.sample_len or half)):]
    results: list[DecodingResult | None] = [None] * rows
    for language in dict.fromkeys(languages):  # one prompt per language, its rows decoded together
        picked = [i for i in range(rows) if languages[i] == language]
        prompt = engine.special.prompt(language if engine.special.multilingual else None, options.task,
                                       not options.without_timestamps, context) + forced
        if len(prompt) >= 2 * half - 1:
            raise ValueError(f"prompt and prefix: {len(prompt)} tokens with the start tokens; the decoder holds {2 * half}")
        attempts = engine.decode_windows(enc[picked], None if features is None else features[picked], prompt, opts)
        for i, a in zip(picked, attempts):
            text = engine.text_of(a.seq.tokens).strip()
            results[i] = DecodingResult(enc[i], language, probs[i], list(a.seq.tokens), text, a.seq.avg_logprob,
                                        a.seq.no_speech_prob, float(options.temperature), compression_ratio(text))
    return results  # type: ignore[return-value]


def options_of(options: DecodingOptions | None, overrides: dict[str, Any]) -> DecodingOptions:
    """``options`` with openai-whisper's keyword overrides (``decode(model, mel, options, **kwargs)``)."""
    options = options or DecodingOptions()
    unknown = [k for k in overrides if k not in {f.name for f in fields(DecodingOptions)}]
    if unknown:
        raise ValueError(f"decode: {unknown[0]} is not one of DecodingOptions' fields")
    return replace(options, **overrides) if overrides else options
