"""The Python API: load the models once, transcribe many inputs, get typed results in every format.

A thin facade over ``specwhisper.pipeline.core``: ``load`` builds one ``Pipeline`` (the models
load there, once), ``Transcriber`` turns paths, bytes, file objects and numpy arrays into the 16 kHz
waveforms the pipeline takes and keyword options into its ``RunOptions``, and ``Transcription`` is the
pipeline's ``Transcript`` with the writers of ``specwhisper.pipeline.writers`` as methods.

This module imports neither torch nor transformers: they load with the models, in ``load``, so
``import specwhisper`` stays cheap (``tests/test_api.py`` checks it in a fresh interpreter).

Every bad argument (a missing or unreadable file, a bad sample rate, a bad option, an unknown
format) raises ``ValueError`` with a one-line message; audio problems raise its subclass
``specwhisper.AudioError``.
"""

from __future__ import annotations

import inspect
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict, fields, is_dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Union

import numpy as np

from specwhisper.results.language import LanguageDetection
from specwhisper.results.transcript import Segment, Transcript
from specwhisper.audio.chunking import WHISPER_WINDOW_S
from specwhisper.audio.loading import (DEFAULT_MAX_SECONDS, SAMPLE_RATE, AudioError, from_array, load_audio,
                                       load_audio_bytes, load_audio_stream)
from specwhisper.asr.weights.errors import ModelError
from specwhisper.pipeline.options import BY_NAME, check_values, options_for
from specwhisper.pipeline.subtitles import SubtitleOptions
from specwhisper.pipeline.writers import ALL_FORMATS, check_output_dir, formats_of_all, parse_formats, render, write_outputs

if TYPE_CHECKING:
    import torch
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.pipeline.config import RunOptions

Audio = Union[str, os.PathLike, bytes, bytearray, memoryview, np.ndarray, BinaryIO, "torch.Tensor"]
Progress = Callable[[str, float], None]  # progress(stage, fraction done of that stage)


class Transcription(Transcript):
    """A ``Transcript`` (segments, words, speakers, language, timings, ...) that renders and writes
    itself in every output format: txt, srt, vtt, json, tsv, rttm; srt and vtt in the subtitle layout
    the transcription was asked for (``max_line_width=42``, ...)."""

    layout: SubtitleOptions = SubtitleOptions()

    @classmethod
    def of(cls, transcript: Transcript, layout: SubtitleOptions = SubtitleOptions()) -> Transcription:
        made = cls(**{f.name: getattr(transcript, f.name) for f in fields(Transcript)})
        made.layout = layout
        return made

    def to(self, fmt: str) -> str:
        """The text of one format (``"srt"``, ``"json"``, ...), as the CLI writes it."""
        if not isinstance(fmt, str):
            raise ValueError(f"to() takes a format's name ('srt', 'json', ...), got {type(fmt).__name__}")
        names = parse_formats(fmt)
        if len(names) != 1:
            raise ValueError(f"to() renders one format, got '{fmt}' (write() writes several)")
        return render(self, names[0], self.layout)

    def write(self, folder: str | os.PathLike, formats: str | Iterable[str] = "all", stem: str | None = None) -> list[Path]:
        """Write ``folder/stem.fmt`` for each format (all or none, as the CLI does) and return the paths.

        ``formats``: ``"srt,json"``, a list, or ``"all"`` (rttm only with speakers: diarized, or multichannel's
        channels). ``stem``: default the input file's stem, or ``"audio"`` for arrays and bytes."""
        if not isinstance(folder, (str, os.PathLike)):
            raise ValueError(f"write() takes a folder (a path), got {type(folder).__name__}")
        if isinstance(formats, Iterable) and not isinstance(formats, str):
            formats = list(formats)  # a generator too
            formats = ",".join(formats) if all(isinstance(f, str) for f in formats) else formats
        if not isinstance(formats, str):
            raise ValueError(f"formats: give 'srt,json', a list of names or 'all', got {type(formats).__name__}")
        if stem is not None and (not isinstance(stem, str) or not stem or Path(stem).name != stem or stem in (".", "..")):
            raise ValueError(f"stem: the outputs' name in the folder, without a folder of its own, got {stem!r}")
        names = formats_of_all(self) if formats.strip().lower() == "all" else parse_formats(formats)
        folder = Path(folder)
        check_output_dir(folder)
        return write_outputs(self, folder, stem or (Path(self.source).stem if self.source else "audio"), names, self.layout)


class Transcriber:
    """Loaded models (one ``Pipeline``) and the default settings of every ``transcribe`` call."""

    def __init__(self, pipeline: Pipeline, diarize: bool = False, postedit: bool = False):
        self.pipeline = pipeline
        self.diarize = diarize
        self.postedit = postedit
        # one run on the models at a time: calls from several threads, and streams still decoding, wait their turn
        self.turn = threading.RLock()

    def options(self, **options) -> RunOptions:
        """The keyword options of ``transcribe`` (``specwhisper.pipeline.options``, listed in its
        docstring) as the pipeline's ``RunOptions``, checked against the loaded model (language, task).
        ``diarize``/``postedit`` default to what ``load`` was given. faster-whisper's ``vad_parameters``
        (a dict or its ``VadOptions``) is taken too: its ``threshold``, ``min_silence_duration_ms`` and
        ``speech_pad_ms`` are ``vad_threshold``, ``vad_min_silence_ms`` and ``vad_speech_pad_ms``."""
        from specwhisper.pipeline.options import run_options

        load_time = [n for n in options if n in LOAD_NAMES]
        if load_time:
            raise ValueError(f"{load_time[0]} is chosen when the models load: specwhisper.load({load_time[0]}=...)")
        options = {"diarize": self.diarize, "postedit": self.postedit, **_vad_parameters(options)}
        values = check_values(options, "api")
        opts = run_options({k: v for k, v in values.items() if k not in LOAD_NAMES})
        self.pipeline.asr.check(opts.decode)
        return opts

    def transcribe(self, audio: Audio, *, sample_rate: int | None = None, progress: Progress | None = None,
                   **options) -> Transcription:
        """Transcribe one input: a path, the bytes of an audio file or a binary file object reading one, or a
        numpy array of samples (``(samples,)`` or ``(samples, channels)``, float in [-1, 1] or integer PCM) with its
        ``sample_rate``. ``options``: see ``Transcriber.options``. ``progress(stage, fraction)`` is
        called as each stage (VAD, transcription, diarization steps, post-edit) advances; ``"sampling"``
        reports come inside a transcription batch, at its fraction so far. What it raises stops the run."""
        opts = self.options(**options)
        t = time.perf_counter()
        waveform, source = read_audio(audio, sample_rate, opts.max_audio_s, opts.multichannel)
        load_s = time.perf_counter() - t
        with self.turn:
            result = self.pipeline.run(waveform, opts, progress, source=source)
        result.timings["load_audio"] = round(load_s, 3)
        return Transcription.of(result, opts.subtitles)

    def stream(self, audio: Audio, *, sample_rate: int | None = None, progress: Progress | None = None,
               **options) -> SegmentStream:
        """``transcribe``, its segments handed out as they become final, in time order, while the rest of
        the input decodes (faster-whisper's lazy ``segments``)::

            stream = transcriber.stream("talk.mp3")
            for segment in stream:
                print(f"[{segment.start:.2f}s -> {segment.end:.2f}s] {segment.text}")
            result = stream.result  # the whole Transcription

        The options and the audio are checked here, before any decoding (a ValueError or AudioError, as
        ``transcribe`` raises them); a failure while decoding is raised by the iteration. A segment handed
        out is the ASR's: the speakers (``diarize``) and the post-edit need the whole input and are in
        ``result`` only. Leaving the loop early (``break``, or ``close()``) stops the decoding at its next
        batch. Not with ``align_text``, whose segments come once the whole input is heard."""
        opts = self.options(**options)
        if opts.align_text is not None:
            raise ValueError("align_text: the text's segments come once the whole input is heard; use transcribe")
        waveform, source = read_audio(audio, sample_rate, opts.max_audio_s, opts.multichannel)
        return SegmentStream(self, waveform, opts, source, progress)

    def detect_language(self, audio: Audio, *, sample_rate: int | None = None, progress: Progress | None = None,
                        **options) -> LanguageDetection:
        """The language ``transcribe(audio, **options)`` decodes ``audio`` in when no ``language`` is
        given, and every language's probability (a ``LanguageDetection``): detected on the first
        windows with speech, as ``transcribe`` does, without decoding the file. ``options``: those that
        choose the windows (the VAD's settings, ``clip_timestamps``, the language threshold, ...: listed below)."""
        other = [n for n in _vad_parameters(options) if n not in DETECTION_NAMES]
        if other:
            raise ValueError(f"detect_language takes {', '.join(DETECTION_NAMES)}, not {other[0]}")
        opts = self.options(**options)
        waveform, source = read_audio(audio, sample_rate, opts.max_audio_s)
        with self.turn:
            found = self.pipeline.asr.detect_language(waveform, opts.decode_options(), progress)
        found.source = source
        return found

    def speech_spans(self, audio: Audio, *, sample_rate: int | None = None, progress: Progress | None = None,
                     **options) -> list[tuple[float, float]]:
        """The stretches of ``audio``, in seconds, that ``transcribe(audio, **options)`` decodes, without
        decoding: with ``vad_filter`` the VAD's speech spans (the audio between them is never heard; their
        sum is faster-whisper's ``duration_after_vad``), without it the windows that cover the whole input."""
        opts = self.options(**options)
        waveform, _ = read_audio(audio, sample_rate, opts.max_audio_s)
        report = (lambda f: progress("vad", f)) if progress is not None else None
        with self.turn:
            spans = self.pipeline.asr.decoded_spans(waveform, opts.decode_options(), report)
        return [(a / SAMPLE_RATE, b / SAMPLE_RATE) for a, b in spans]

    def transcribe_many(self, audios: Iterable[Audio], *, sample_rate: int | None = None,
                        progress: Progress | None = None, **options) -> list[Transcription]:
        """``transcribe`` for several inputs at once: their chunks are decoded in shared batches (the
        tokens each file gets are those it gets alone); diarization and post-edit run per file.
        ``sample_rate`` applies to the arrays among ``audios``. Every input is read (and checked)
        before any is transcribed."""
        if isinstance(audios, (str, bytes, bytearray, os.PathLike, np.ndarray)) or callable(getattr(audios, "read", None)) \
                or as_samples(audios) is not audios:
            raise ValueError("transcribe_many takes a list of inputs; for one, transcribe(audio) (or transcribe_many([audio]))")
        opts = self.options(**options)
        loaded = [read_audio(a, sample_rate, opts.max_audio_s, opts.multichannel) for a in audios]
        if not loaded:
            return []
        with self.turn:
            results = self.pipeline.run_many([w for w, _ in loaded], opts, progress, sources=[s for _, s in loaded])
        return [Transcription.of(r, opts.subtitles) for r in results]


class SegmentStream:
    """The segments of one transcription as they become final (``Transcriber.stream``): an iterator of
    ``Segment``; ``result`` is the ``Transcription`` once the iteration has ended, ``duration`` the audio's
    seconds. The pipeline runs from the first iteration on (a stream never iterated decodes nothing, as
    faster-whisper's lazy segments), on a thread of its own in the transcriber's turn (``Transcriber.turn``);
    its segments come through a queue. The thread is not a daemon: a daemon thread still decoding when the
    interpreter exited took the process down with it (torch's thread pool: abort, exit status 134)."""

    def __init__(self, transcriber: Transcriber, waveform: np.ndarray, opts: RunOptions, source: str | None,
                 progress: Progress | None):
        self.duration = waveform.shape[-1] / SAMPLE_RATE  # seconds of audio
        self._queue: queue.Queue = queue.Queue()
        self._closed = threading.Event()
        self._result: Transcription | None = None
        self._ended = False

        def report(stage: str, fraction: float) -> None:
            if self._closed.is_set():
                raise _Closed()
            if progress is not None:
                progress(stage, fraction)

        def run() -> None:
            try:
                with transcriber.turn:
                    if self._closed.is_set():  # closed while it waited its turn
                        raise _Closed()
                    t = transcriber.pipeline.run(waveform, opts, report, source=source,
                                                 on_segments=lambda s: self._queue.put(("segments", s)))
                self._queue.put(("done", Transcription.of(t, opts.subtitles)))
            except _Closed:
                self._queue.put(("closed", None))
            except BaseException as exc:  # noqa: BLE001  handed to the iterating thread, raised there
                self._queue.put(("error", exc))

        self._thread = threading.Thread(target=run, name="specwhisper-stream")
        self._started = False

    def __iter__(self) -> Iterator[Segment]:
        return self._segments()

    def _segments(self) -> Iterator[Segment]:
        if not self._started:
            self._started = True
            self._thread.start()
        try:
            while not self._ended:
                kind, value = self._queue.get()
                if kind == "segments":
                    yield from value
                    continue
                self._ended = True
                if kind == "error":
                    raise value
                self._result = value
        finally:
            if not self._ended:  # left early: the run stops at its next report
                self.close()

    def close(self) -> None:
        """Stop the decoding (at its next batch) and wait for it; the stream then has no ``result``."""
        self._closed.set()
        if self._thread.is_alive():
            self._thread.join()
        self._ended = True

    @property
    def result(self) -> Transcription:
        """The whole transcription (diarized, post-edited, as asked), once the iteration has ended."""
        if self._result is None:
            raise ValueError("stream.result: iterate the stream to its end first" if not self._ended
                             else "stream.result: the stream was closed before its end")
        return self._result


class _Closed(Exception):
    """Raised in the pipeline's progress report when the stream was closed: the run stops there."""


# faster-whisper's ``vad_parameters`` keys -> our options (``WhisperModel.transcribe(vad_parameters=...)``)
VAD_PARAMETERS = {"threshold": "vad_threshold", "min_silence_duration_ms": "vad_min_silence_ms",
                  "speech_pad_ms": "vad_speech_pad_ms", "max_speech_duration_s": "vad_max_speech_s"}
# the fields of faster-whisper's ``VadOptions`` taken at their default only: the VAD's own behaviour here
VAD_DEFAULTS = {"neg_threshold": None, "min_speech_duration_ms": 0, "max_speech_duration_s": float("inf")}


def _vad_parameters(options: dict) -> dict:
    """``options`` with faster-whisper's ``vad_parameters`` (a dict, or its ``VadOptions`` dataclass) spelled
    as our options; a key we do not take, or one given both ways, is a ValueError."""
    out = {k: v for k, v in options.items() if k != "vad_parameters"}
    given = options.get("vad_parameters")
    if given is None:
        return out
    if is_dataclass(given) and not isinstance(given, type):  # faster_whisper.vad.VadOptions(...)
        given = {k: v for k, v in asdict(given).items() if not (k in VAD_DEFAULTS and v == VAD_DEFAULTS[k])}
    if not isinstance(given, dict):
        raise ValueError(f"vad_parameters is a dict such as {{'min_silence_duration_ms': 500}}, got {type(given).__name__}")
    for key, value in given.items():
        if key in VAD_DEFAULTS and value == VAD_DEFAULTS[key]:
            continue
        if key == "max_speech_duration_s" and isinstance(value, (int, float)) and value >= WHISPER_WINDOW_S:
            continue  # no span here is longer than a chunk (at most Whisper's window) already
        name = VAD_PARAMETERS.get(key)
        if name is None:
            raise ValueError(f"vad_parameters: {str(key)[:40]!r} is not taken (take {', '.join(VAD_PARAMETERS)}; a "
                             "chunk is at most chunk_length seconds)")
        if name in out:
            raise ValueError(f"vad_parameters[{key!r}] and {name}: given twice; give one")
        out[name] = value
    return out


def as_samples(audio):
    """A torch tensor of samples (the peers' APIs take them) -> its numpy array, on the CPU; anything else as
    given. A program holding a tensor has imported torch, so a tensor is told without importing it here."""
    torch = sys.modules.get("torch")
    if torch is not None and isinstance(audio, torch.Tensor):
        return audio.detach().cpu().numpy()
    return audio


def read_audio(audio: Audio, sample_rate: int | None = None, max_seconds: float = DEFAULT_MAX_SECONDS,
               channels: bool = False) -> tuple[np.ndarray, str | None]:
    """Any input ``transcribe`` takes -> (16 kHz mono float32 waveform, or one row per channel with ``channels``;
    source name or None); an ``AudioError``, one line, for what is not audio."""
    audio = as_samples(audio)
    if isinstance(audio, (str, os.PathLike)):
        return load_audio(audio, max_seconds=max_seconds, channels=channels), os.fspath(audio)
    if isinstance(audio, (bytes, bytearray, memoryview)):
        if sample_rate is not None:
            raise AudioError("bytes: sample_rate is for numpy arrays; the bytes of an audio file carry their own")
        return load_audio_bytes(bytes(audio), name="bytes", max_seconds=max_seconds, channels=channels), None
    if isinstance(audio, np.ndarray):
        if sample_rate is None:
            raise AudioError("array: a numpy array needs its sample_rate (e.g. sample_rate=16000)")
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, (int, np.integer)):
            raise AudioError(f"array: sample_rate must be a whole number of Hz, got {sample_rate!r}")
        if not (np.issubdtype(audio.dtype, np.floating) or np.issubdtype(audio.dtype, np.integer)):
            raise AudioError(f"array: expected numbers, got an array of {audio.dtype}")
        return from_array(audio, int(sample_rate), max_seconds=max_seconds, channels=channels), None
    if callable(getattr(audio, "read", None)):  # a binary file object
        if sample_rate is not None:
            raise AudioError("file object: sample_rate is for numpy arrays; an audio file carries its own")
        name = audio.name if isinstance(getattr(audio, "name", None), str) else "file object"
        return load_audio_stream(audio, name=name, max_seconds=max_seconds, channels=channels), None
    raise AudioError(f"audio must be a path, a binary file object, the bytes of an audio file or an array of samples, "
                     f"not {type(audio).__name__}")


def load(model: str = "base", *, diarize: bool = False, postedit: bool = False, **options) -> Transcriber:
    """Load the models once and return a ``Transcriber`` for any number of inputs.

    ``model`` and the keyword options below are the CLI's ``-m``, ``--draft``, ``--device``, ... (the
    load-time options of ``specwhisper.pipeline.options``). ``diarize``/``postedit``: load the
    diarization / post-edit models now and use them by default (a call can still ask for them: they
    then load on first use and stay loaded)."""
    from specwhisper.pipeline.core import Pipeline
    from specwhisper.pipeline.options import pipeline_config

    run_time = [n for n in options if n in BY_NAME and n not in LOAD_NAMES]
    if run_time:
        raise ValueError(f"{run_time[0]} is an option of each transcription: transcriber.transcribe(audio, {run_time[0]}=...)")
    for name, flag in (("diarize", diarize), ("postedit", postedit)):
        if not isinstance(flag, bool):
            raise ValueError(f"{name}: must be True or False, got {flag!r}")
    values = check_values({"model": model, **options}, "api")
    try:
        pipeline = Pipeline(pipeline_config({k: v for k, v in values.items() if k in LOAD_NAMES}))
        if diarize:
            pipeline.diarizer()
        if postedit:
            pipeline.post_editor()
    except ModelError as exc:  # a model that is not there is a bad argument, as a missing audio file is
        raise ValueError(str(exc)) from None
    return Transcriber(pipeline, diarize=diarize, postedit=postedit)


def _describe(options) -> str:
    lines = []
    for o in options:
        kind = o.kind.__name__ + (" | None" if o.nullable or o.default is None else "")
        lines.append(f"    {o.name} ({kind}, default {o.default!r}): {o.describe()}")
    return "\n".join(lines)


def _with_options(fn, options, keep: int) -> None:
    """Give ``fn`` the options as keyword-only parameters in its signature and docstring (its first
    ``keep`` parameters stay as written)."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[:keep]
    taken = {p.name for p in params}
    params += [inspect.Parameter(o.name, inspect.Parameter.KEYWORD_ONLY, default=o.default,
                                  annotation=(o.kind | None) if o.nullable or o.default is None else o.kind) for o in options
               if o.name not in taken]
    fn.__signature__ = sig.replace(parameters=params)
    fn.__doc__ = (fn.__doc__ or "") + "\n\n    Options:\n" + _describe(options)


LOAD_NAMES = {o.name for o in options_for("api", "load")}
_with_options(Transcriber.transcribe, options_for("api", "run"), keep=4)
_with_options(Transcriber.transcribe_many, options_for("api", "run"), keep=4)
_with_options(Transcriber.stream, options_for("api", "run"), keep=4)
_with_options(load, options_for("api", "load"), keep=3)
# the options that choose the windows a file's language is detected on
DETECTION_NAMES = ("vad_filter", "vad_threshold", "vad_min_silence_ms", "vad_speech_pad_ms", "vad_max_speech_s", "chunk_length",
                   "clip_timestamps", "batch_size", "max_duration", "language_threshold", "language_detection_segments")
_with_options(Transcriber.detect_language, [BY_NAME[n] for n in DETECTION_NAMES], keep=4)


FORMATS = ALL_FORMATS
__all__ = ["Audio", "FORMATS", "LanguageDetection", "Progress", "Transcriber", "Transcription", "load"]
