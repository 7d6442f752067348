"""The Python API: load the models once, transcribe many inputs, get typed results in every format.

A thin facade over ``specwhisper.pipeline.core``: ``load`` builds one ``Pipeline`` (the models
load there, once), ``Transcriber`` turns paths, bytes and numpy arrays into the 16 kHz waveforms
the pipeline takes and keyword options into its ``RunOptions``, and ``Transcription`` is the
pipeline's ``Transcript`` with the writers of ``specwhisper.pipeline.writers`` as methods.

This module imports neither torch nor transformers: they load with the models, in ``load``, so
``import specwhisper`` stays cheap (``tests/test_api.py`` checks it in a fresh interpreter).

Every bad argument (a missing or unreadable file, a bad sample rate, a bad option, an unknown
format) raises ``ValueError`` with a one-line message; audio problems raise its subclass
``specwhisper.AudioError``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Union

import numpy as np

from specwhisper.results.transcript import Transcript
from specwhisper.audio.loading import (DEFAULT_MAX_SECONDS, AudioError, from_array, load_audio,
                                       load_audio_bytes, over_limit)
from specwhisper.pipeline.writers import ALL_FORMATS, check_output_dir, parse_formats, render, write_outputs

if TYPE_CHECKING:
    from specwhisper.pipeline.core import Pipeline, RunOptions

Audio = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray]
Progress = Callable[[str, float], None]  # progress(stage, fraction done of that stage)


class Transcription(Transcript):
    """A ``Transcript`` (segments, words, speakers, language, timings, ...) that renders and writes
    itself in every output format: txt, srt, vtt, json, tsv, rttm."""

    @classmethod
    def of(cls, transcript: Transcript) -> Transcription:
        return cls(**{f.name: getattr(transcript, f.name) for f in fields(Transcript)})

    def to(self, fmt: str) -> str:
        """The text of one format (``"srt"``, ``"json"``, ...), as the CLI writes it."""
        names = parse_formats(fmt)
        if len(names) != 1:
            raise ValueError(f"to() renders one format, got '{fmt}' (write() writes several)")
        return render(self, names[0])

    def write(self, folder: str | os.PathLike, formats: str | Iterable[str] = "all", stem: str | None = None) -> list[Path]:
        """Write ``folder/stem.fmt`` for each format (all or none, as the CLI does) and return the paths.

        ``formats``: ``"srt,json"``, a list, or ``"all"`` (rttm only when diarized). ``stem``: default
        the input file's stem, or ``"audio"`` for arrays and bytes."""
        spec = formats if isinstance(formats, str) else ",".join(formats)
        names = parse_formats(spec)
        if spec.strip().lower() == "all" and self.turns is None:
            names = [n for n in names if n != "rttm"]
        folder = Path(folder)
        check_output_dir(folder)
        return write_outputs(self, folder, stem or (Path(self.source).stem if self.source else "audio"), names)


class Transcriber:
    """Loaded models (one ``Pipeline``) and the default settings of every ``transcribe`` call."""

    def __init__(self, pipeline: Pipeline, diarize: bool = False, postedit: bool = False):
        self.pipeline = pipeline
        self.diarize = diarize
        self.postedit = postedit

    def options(
        self,
        *,
        language: str | None = None,
        task: str = "transcribe",
        beam_size: int | None = None,
        word_timestamps: bool | None = None,
        batch_size: int = 8,
        vad_threshold: float = 0.5,
        initial_prompt: str | None = None,
        hotwords: str | None = None,
        condition_on_previous_text: bool = False,
        diarize: bool | None = None,
        num_speakers: int | None = None,
        min_speakers: int | None = None,
        max_speakers: int | None = None,
        postedit: bool | None = None,
        max_duration: float = DEFAULT_MAX_SECONDS,
    ) -> RunOptions:
        """The keyword options of ``transcribe`` as the pipeline's ``RunOptions``, checked against the
        loaded model (language, task). ``diarize``/``postedit`` default to what ``load`` was given;
        ``word_timestamps`` defaults to on when diarizing (speakers are given word by word)."""
        from specwhisper.asr.engine import DecodeOptions
        from specwhisper.pipeline.core import RunOptions

        diarize = self.diarize if diarize is None else diarize
        decode = DecodeOptions(
            language=language, task=task, beam_size=beam_size, batch_size=batch_size, vad_threshold=vad_threshold,
            word_timestamps=diarize if word_timestamps is None else word_timestamps, initial_prompt=initial_prompt,
            hotwords=hotwords, condition_on_previous_text=condition_on_previous_text)
        opts = RunOptions(decode=decode, diarize=diarize, num_speakers=num_speakers, min_speakers=min_speakers,
                          max_speakers=max_speakers, postedit=self.postedit if postedit is None else postedit,
                          max_audio_s=max_duration)
        if not max_duration > 0:
            raise ValueError(f"max_duration must be > 0 seconds, got {max_duration}")
        opts.validate()
        decode.validate(self.pipeline.asr.special)
        return opts

    def _options(self, options: dict) -> RunOptions:
        try:
            return self.options(**options)
        except TypeError as exc:  # an unknown keyword: one line, the same type as every bad argument
            raise ValueError(f"unknown option ({str(exc).split('() ')[-1]})") from None

    def transcribe(self, audio: Audio, *, sample_rate: int | None = None, progress: Progress | None = None,
                   **options) -> Transcription:
        """Transcribe one input: a path, the bytes of an audio file, or a numpy array of samples
        (``(samples,)`` or ``(samples, channels)``, float in [-1, 1] or integer PCM) with its
        ``sample_rate``. ``options``: see ``Transcriber.options``. ``progress(stage, fraction)`` is
        called as each stage (VAD, transcription, diarization steps, post-edit) advances."""
        opts = self._options(options)
        t = time.perf_counter()
        waveform, source = _waveform(audio, sample_rate, opts.max_audio_s)
        load_s = time.perf_counter() - t
        result = self.pipeline.run(waveform, opts, progress, source=source)
        result.timings["load_audio"] = round(load_s, 3)
        return Transcription.of(result)

    def transcribe_many(self, audios: Iterable[Audio], *, sample_rate: int | None = None,
                        progress: Progress | None = None, **options) -> list[Transcription]:
        """``transcribe`` for several inputs at once: their chunks are decoded in shared batches (the
        tokens each file gets are those it gets alone); diarization and post-edit run per file.
        ``sample_rate`` applies to the arrays among ``audios``. Every input is read (and checked)
        before any is transcribed."""
        opts = self._options(options)
        loaded = [_waveform(a, sample_rate, opts.max_audio_s) for a in audios]
        if not loaded:
            return []
        results = self.pipeline.run_many([w for w, _ in loaded], opts, progress, sources=[s for _, s in loaded])
        return [Transcription.of(r) for r in results]


def _waveform(audio: Audio, sample_rate: int | None, max_seconds: float) -> tuple[np.ndarray, str | None]:
    """Any input -> (16 kHz mono float32 waveform, source name or None)."""
    if isinstance(audio, (str, os.PathLike)):
        return load_audio(audio, max_seconds=max_seconds), os.fspath(audio)
    if isinstance(audio, (bytes, bytearray, memoryview)):
        if sample_rate is not None:
            raise AudioError("bytes: sample_rate is for numpy arrays; the bytes of an audio file carry their own")
        return load_audio_bytes(bytes(audio), name="bytes", max_seconds=max_seconds), None
    if isinstance(audio, np.ndarray):
        if sample_rate is None:
            raise AudioError("array: a numpy array needs its sample_rate (e.g. sample_rate=16000)")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
            raise AudioError(f"array: sample_rate must be a whole number of Hz, got {sample_rate!r}")
        if audio.ndim not in (1, 2) or not (np.issubdtype(audio.dtype, np.floating) or np.issubdtype(audio.dtype, np.integer)):
            raise AudioError(f"array: expected (samples,) or (samples, channels) of numbers, got shape "
                             f"{audio.shape} of {audio.dtype}")
        if len(audio) / max(int(sample_rate), 1) > max_seconds:
            raise over_limit("array", max_seconds, len(audio) / sample_rate)
        return from_array(audio, int(sample_rate)), None
    raise AudioError(f"audio must be a path, the bytes of an audio file or a numpy array, not {type(audio).__name__}")


def load(
    model: str = "base",
    *,
    draft: str = "auto",
    diarize: bool = False,
    postedit: bool = False,
    device: str = "auto",
    dtype: str = "auto",
    threads: int | None = None,
    cache_dir: str | os.PathLike | None = None,
    diarization_model: str | None = None,
    hf_token: str | None = None,
    postedit_model: str | None = None,
    postedit_drafter: str | None = "copy",
) -> Transcriber:
    """Load the models once and return a ``Transcriber`` for any number of inputs.

    ``model``, ``draft``, ``device``, ``dtype``, ``threads``: as the CLI's ``-m``, ``--draft``,
    ``--device``, ``--dtype``, ``--threads``. ``diarize``/``postedit``: load the diarization /
    post-edit models now and use them by default (a call can still ask for them: they then load on
    first use and stay loaded)."""
    from specwhisper.pipeline.core import Pipeline, PipelineConfig

    if threads is not None and threads < 1:
        raise ValueError(f"threads must be >= 1, got {threads}")
    config = PipelineConfig(model=model, draft=draft, device=device, dtype=dtype, threads=threads,
                            cache_dir=Path(cache_dir) if cache_dir is not None else None,
                            diarization_model=diarization_model, hf_token=hf_token, postedit_model=postedit_model,
                            postedit_drafter=postedit_drafter)
    pipeline = Pipeline(config)
    if diarize:
        pipeline.diarizer()
    if postedit:
        pipeline.post_editor()
    return Transcriber(pipeline, diarize=diarize, postedit=postedit)


FORMATS = ALL_FORMATS
__all__ = ["Audio", "FORMATS", "Progress", "Transcriber", "Transcription", "load"]
