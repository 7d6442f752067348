"""WhisperX's Python API over this package: ``import specwhisper.whisperx as whisperx`` (specwhisper.pipeline.whisperx)."""

from specwhisper.pipeline.whisperx import (AlignModel, DiarizationPipeline, FasterWhisperPipeline, align,  # noqa: F401
                                           assign_word_speakers, diarize, load_align_model, load_audio, load_model)
