"""openai-whisper's ``load_model`` and ``model.transcribe``, over ``Transcriber``: a script written for
openai-whisper runs on this package by changing its import::

    import specwhisper as whisper                  # was: import whisper

    model = whisper.load_model("base")
    result = model.transcribe("audio.mp3")
    print(result["text"])

``transcribe`` takes openai-whisper's arguments with its defaults (greedy at temperature 0 with the
fallback schedule, each window after the text of the one before) and returns its result: a dict of
``text``, ``segments`` (``id``, ``seek``, ``start``, ``end``, ``text``, ``tokens``, ``temperature``,
``avg_logprob``, ``compression_ratio``, ``no_speech_prob``, ``words`` with ``word_timestamps``) and
``language``, which openai-whisper's own writers (``whisper.utils.get_writer``) write. ``verbose=True``
prints each segment as it becomes final, as openai-whisper does. A decoding option whose value this package
does not offer (a ``prefix``, ...) is a one-line ValueError, never ignored;
``condition_on_previous_text=False`` lets the chunks of a file decode side by side in batches. The
lower-level ``detect_language`` and ``decode`` of log-mel windows are ``specwhisper.pipeline.openai_decoding``'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from specwhisper.pipeline import openai_decoding
from specwhisper.pipeline.api import Audio, Transcriber, as_samples
from specwhisper.pipeline.openai_decoding import DecodingOptions, ModelDimensions
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.pipeline.writers import format_timestamp, render
from specwhisper.pipeline.faster_whisper import english_only, peer_load, peer_options, temperature_options
from specwhisper.results.transcript import Transcript, segments_to_dicts

# openai-whisper's transcribe arguments that only take their default here: name -> (default, why)
ONLY_DEFAULT = {
    "prompt": (None, "give the text before the first window as initial_prompt"),
    "prefix": (None, "openai-whisper's transcribe forces it on every window and leaves it out of the text; specwhisper's "
                     "prefix starts a file's transcript, as faster-whisper's does (decode takes openai-whisper's)"),
}
RENAMED = {"sample_len": "max_new_tokens"}
PASSED = ("language", "task", "best_of", "beam_size", "length_penalty", "without_timestamps",
          "compression_ratio_threshold", "logprob_threshold", "no_speech_threshold", "condition_on_previous_text",
          "initial_prompt", "word_timestamps", "hallucination_silence_threshold", "suppress_tokens",
          "prepend_punctuations", "append_punctuations", "suppress_blank", "max_initial_timestamp", "carry_initial_prompt")


class OpenaiWhisperModel:
    """What openai-whisper's ``load_model`` returns: its ``transcribe``, and its lower-level ``detect_language``,
    ``embed_audio`` and ``decode`` of log-mel windows (``specwhisper.pipeline.openai_decoding``), ``dims``, ``device``,
    ``is_multilingual``, ``num_languages``; ``transcriber``: ours."""

    def __init__(self, transcriber: Transcriber):
        self.transcriber = transcriber
        engine = transcriber.pipeline.asr
        self.dims = ModelDimensions.of(engine.bundle.model.config)
        self.device = engine.runtime.device  # a torch.device
        self.is_multilingual = engine.special.multilingual
        self.num_languages = len(engine.special.languages)

    def detect_language(self, mel, tokenizer: Any = None):
        """openai-whisper's ``model.detect_language(mel)``: (the language token, every language's probability)
        of a [n_mels, 3000] window; of a batch, a tensor of tokens and a list of dicts."""
        with self.transcriber.turn:
            tokens, probs = openai_decoding.detect_language(self.transcriber.pipeline.asr, mel)
        return (tokens[0], probs[0]) if _single(mel) else (tokens, probs)

    def embed_audio(self, mel):
        """openai-whisper's ``model.embed_audio(mel)``: the encoder's output [batch, n_audio_ctx, n_audio_state] of
        [batch, n_mels, 3000] windows, for ``decode`` and ``detect_language`` in the mel's place."""
        with self.transcriber.turn:
            return openai_decoding.embed_audio(self.transcriber.pipeline.asr, mel)

    def decode(self, mel, options: DecodingOptions | None = None, **kwargs):
        """openai-whisper's ``model.decode(mel, options)``: a ``DecodingResult`` of a [n_mels, 3000] window, a list
        of them of a batch (``whisper.decode``)."""
        options = openai_decoding.options_of(options, kwargs)
        with self.transcriber.turn:
            results = openai_decoding.decode(self.transcriber.pipeline.asr, mel, options)
        return results[0] if _single(mel) else results

    def transcribe(self, audio: Audio, *, verbose: bool | None = None,
                   temperature: float | tuple[float, ...] = (0.0, 0.2, 0.4, 0.6, 0.8, 1.0),
                   condition_on_previous_text: bool = True, clip_timestamps: str | list[float] = "0",
                   fp16: bool = True, patience: float | None = None, **options) -> dict:
        """openai-whisper's ``transcribe(model, audio, ...)`` (a numpy array is 16 kHz samples, as there).
        ``fp16``: taken and not needed (the dtype is chosen when the model loads: float16 on a GPU)."""
        # best_of: DecodingOptions' None, one sample per fallback temperature (openai-whisper's CLI asks for 5)
        ours: dict[str, Any] = {"condition_on_previous_text": condition_on_previous_text, "best_of": 1,
                                **temperature_options(temperature)}
        if patience is not None:
            if options.get("beam_size") is None:  # openai-whisper's DecodingOptions check
                raise ValueError("patience requires beam_size to be given")
            ours["patience"] = patience
        ours.update(peer_options(options, "openai-whisper", clip_timestamps, ONLY_DEFAULT, PASSED, RENAMED))
        ours = english_only(self.is_multilingual, ours)
        audio = as_samples(audio)  # a tensor of samples, as openai-whisper takes them
        rate = 16000 if isinstance(audio, np.ndarray) else None  # an array is 16 kHz samples, as there
        stream = self.transcriber.stream(audio, sample_rate=rate, **ours)
        for segment in stream:
            if verbose:
                print(f"[{format_timestamp(segment.start)} --> {format_timestamp(segment.end)}] {segment.text}", file=sys.stdout, flush=True)
        result = stream.result
        return {"text": "".join(s.text for s in result.segments),
                "segments": segments_to_dicts(result.segments, strip_text=False), "language": result.language}


def load_model(name: str = "base", device: str | None = None, download_root: str | None = None,
               in_memory: bool = False, draft: str = "auto") -> OpenaiWhisperModel:
    """openai-whisper's ``load_model``: the model by its name (``base``, ``large-v3``, a Hugging Face id or a
    folder); ``device`` None: a GPU where one is usable; ``draft``: this package's drafter."""
    return OpenaiWhisperModel(peer_load(name, device, cache_dir=download_root, draft=draft))


def transcribe(model: OpenaiWhisperModel, audio: Audio, **kwargs) -> dict:
    """openai-whisper's ``whisper.transcribe(model, audio, ...)``: ``model.transcribe``."""
    return model.transcribe(audio, **kwargs)


def decode(model: OpenaiWhisperModel, mel, options: DecodingOptions | None = None, **kwargs):
    """openai-whisper's ``whisper.decode(model, mel, options)``."""
    return model.decode(mel, options, **kwargs)


def detect_language(model: OpenaiWhisperModel, mel, tokenizer: Any = None):
    """openai-whisper's ``whisper.detect_language(model, mel)``."""
    return model.detect_language(mel, tokenizer)


# openai-whisper's writers' formats, in its order ("all": every one)
WRITER_FORMATS = ("txt", "vtt", "srt", "tsv", "json")


class ResultWriter:
    """openai-whisper's writer of one format (``whisper.utils.get_writer``): ``writer(result, audio_path,
    options)`` writes ``<audio stem>.<format>`` in its folder, ``write_result(result, file, options)`` to an open
    file. ``result``: ``transcribe``'s dict (openai-whisper's own too); ``options``: ``max_line_width``,
    ``max_line_count``, ``max_words_per_line``, ``highlight_words``, as a dict or keywords. The text formats are
    this package's writers' (openai-whisper's writers' bytes: tests/test_interop.py); json is the dict, as there."""

    def __init__(self, output_format: str, output_dir: str):
        if output_format not in WRITER_FORMATS:
            raise ValueError(f"get_writer: one of {', '.join(WRITER_FORMATS)} or all, got {output_format!r}")
        self.extension, self.output_dir = output_format, output_dir

    def __call__(self, result: dict, audio_path: str, options: dict | None = None, **kwargs) -> None:
        path = Path(self.output_dir) / f"{Path(audio_path).stem}.{self.extension}"
        with open(path, "w", encoding="utf-8") as file:
            self.write_result(result, file, options, **kwargs)

    def write_result(self, result: dict, file, options: dict | None = None, **kwargs) -> None:
        if self.extension == "json":
            json.dump(result, file)
            return
        given = {k: v for k, v in {**(options or {}), **kwargs}.items() if v is not None}
        if given.get("max_line_width") is None:  # openai-whisper breaks lines only at a width
            given.pop("max_line_count", None)
        layout = SubtitleOptions(**{k: given[k] for k in ("max_line_width", "max_line_count", "max_words_per_line",
                                                          "highlight_words") if k in given})
        file.write(render(Transcript.from_dict(result), self.extension, layout))


def get_writer(output_format: str, output_dir: str):
    """openai-whisper's ``whisper.utils.get_writer``: a ``ResultWriter``, or for ``all`` one call writing each format."""
    if output_format != "all":
        return ResultWriter(output_format, output_dir)
    writers = [ResultWriter(f, output_dir) for f in WRITER_FORMATS]

    def write_all(result: dict, audio_path: str, options: dict | None = None, **kwargs) -> None:
        for writer in writers:
            writer(result, audio_path, options, **kwargs)

    return write_all


def _single(mel) -> bool:
    return len(mel.shape) == 2
