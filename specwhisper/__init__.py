"""specwhisper: exact speculative Whisper transcription with diarization and LLM post-edit.

The Python API (README, "Python API")::

    import specwhisper
    transcriber = specwhisper.load("base")            # the models load once
    result = transcriber.transcribe("talk.wav")       # a path, bytes, or an array with sample_rate=
    result.write("out", ["srt", "json"])

Names are imported on first use: ``import specwhisper`` does not import torch or transformers
(they load with the models), so a program can import it at no cost and load later.
"""

from __future__ import annotations

from importlib import import_module, metadata

from specwhisper.hardware.threads import set_wait_policy

# Before any module of the package imports torch: its OpenMP runtime reads the wait policy once, at load.
set_wait_policy()

try:
    __version__ = metadata.version("specwhisper")
except metadata.PackageNotFoundError:  # run from a source tree that was never installed
    __version__ = "0+unknown"

_LAZY = {
    "load": "specwhisper.pipeline.api",
    "Transcriber": "specwhisper.pipeline.api",
    "Transcription": "specwhisper.pipeline.api",
    "FORMATS": "specwhisper.pipeline.api",
    "WhisperModel": "specwhisper.pipeline.faster_whisper",
    "BatchedInferencePipeline": "specwhisper.pipeline.faster_whisper",
    "decode_audio": "specwhisper.pipeline.faster_whisper",
    "available_models": "specwhisper.pipeline.faster_whisper",
    "format_timestamp": "specwhisper.pipeline.writers",
    "load_model": "specwhisper.pipeline.openai_whisper",
    "transcribe": "specwhisper.pipeline.openai_whisper",
    "decode": "specwhisper.pipeline.openai_whisper",
    "detect_language": "specwhisper.pipeline.openai_whisper",
    "DecodingOptions": "specwhisper.pipeline.openai_decoding",
    "DecodingResult": "specwhisper.pipeline.openai_decoding",
    "load_audio": "specwhisper.pipeline.openai_decoding",
    "pad_or_trim": "specwhisper.pipeline.openai_decoding",
    "log_mel_spectrogram": "specwhisper.pipeline.openai_decoding",
    "LanguageDetection": "specwhisper.results.language",
    "AudioError": "specwhisper.audio.loading",
    "Transcript": "specwhisper.results.transcript",
    "Segment": "specwhisper.results.transcript",
    "Word": "specwhisper.results.transcript",
    "SpeakerTurn": "specwhisper.results.transcript",
    "DecodeStats": "specwhisper.results.transcript",
}
__all__ = ["__version__", *_LAZY]


# modules of peers' names: ``whisper.utils`` (openai-whisper's) under ``import specwhisper as whisper``
_SUBMODULES = ("utils",)


def __getattr__(name: str):
    if name in _SUBMODULES:
        return import_module(f"specwhisper.{name}")
    if name in _LAZY:
        value = getattr(import_module(_LAZY[name]), name)
        globals()[name] = value  # once imported, a plain attribute
        return value
    raise AttributeError(f"module 'specwhisper' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY) | set(_SUBMODULES))
