"""WhisperX's Python API over ``Transcriber``: a script written for WhisperX runs on this package by changing
its import::

    import specwhisper.whisperx as whisperx       # was: import whisperx

    model = whisperx.load_model("base", "cpu", compute_type="int8")
    audio = whisperx.load_audio("audio.mp3")
    result = model.transcribe(audio, batch_size=16)           # {"segments": [...], "language": "en"}
    model_a, metadata = whisperx.load_align_model(language_code=result["language"], device="cpu")
    result = whisperx.align(result["segments"], model_a, metadata, audio, "cpu")  # words dated
    diarize_model = whisperx.DiarizationPipeline(device="cpu")
    result = whisperx.assign_word_speakers(diarize_model(audio), result)       # speakers on segments, words

``transcribe`` is WhisperX's batched pipeline: the VAD's speech joined into windows of up to ``chunk_size``
seconds, decoded side by side without timestamp tokens (beam search of 5, no temperature fallback, nothing
dropped as silence: WhisperX's CTranslate2 call does none of it), one segment per window. The VAD is
silero-vad whatever ``vad_method`` names (WhisperX's default is pyannote's); ``vad_onset`` is its threshold.
Words are dated from Whisper's cross-attention, not a wav2vec2 model: ``load_align_model`` loads a Whisper
model (``model_name``, default ``base``, the embedded one) and ``align`` dates each segment's text word for
word (``align_text``), one segment per sentence as WhisperX splits them; a word's ``score`` is its
probability under the model. ``DiarizationPipeline`` is this package's diarizer (``model_name`` None: the
embedded offline pipeline; a pyannote id or folder otherwise) and answers WhisperX's DataFrame.
``assign_word_speakers`` is WhisperX's rule: the speaker whose turns overlap a segment or word longest.
WhisperX's options that only its CTranslate2 call reads and this package does not offer (a ``prefix``, ...)
are refused in one line (``length_penalty`` is CTranslate2's: our ``length_exponent``); those WhisperX's batched pipeline reads
nowhere (``temperatures``, the thresholds, ...) are taken and unused, as there.
"""

from __future__ import annotations

import numbers
import os
import sys
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.messages import short_repr
from specwhisper.pipeline.openai_decoding import load_audio  # WhisperX's is openai-whisper's
from specwhisper.pipeline.api import Transcriber, as_samples
from specwhisper.pipeline.faster_whisper import english_only, peer_load, suppress_spec
from specwhisper.pipeline.options import check_values

# WhisperX's asr_options its batched decoding reads: ours by the same names (LOAD_READ: chosen when the model loads)
READ = ("beam_size", "patience", "repetition_penalty", "no_repeat_ngram_size", "initial_prompt", "hotwords",
        "suppress_tokens", "suppress_blank")
LOAD_READ = ("suppress_numerals",)
RENAMED = {"length_penalty": "length_exponent"}  # CTranslate2's: the log-probability over length ** penalty
# read by WhisperX, at their default only here: name -> (default, why)
ONLY_DEFAULT = {
    "prefix": (None, "WhisperX forces it on every chunk; specwhisper's prefix starts a file's transcript, as "
                     "faster-whisper's does"),
    "without_timestamps": (True, "WhisperX's batched windows decode without timestamp tokens"),
}
# in WhisperX's TranscriptionOptions but read nowhere by its batched pipeline: taken, unused, as there
UNUSED = ("best_of", "temperatures", "compression_ratio_threshold", "log_prob_threshold", "no_speech_threshold",
          "condition_on_previous_text", "prompt_reset_on_temperature", "max_initial_timestamp", "word_timestamps",
          "prepend_punctuations", "append_punctuations", "multilingual", "max_new_tokens", "clip_timestamps",
          "hallucination_silence_threshold")
VAD_OPTIONS = {"vad_onset": 0.5, "vad_offset": 0.363, "chunk_size": 30}  # WhisperX's defaults
VAD_METHODS = ("pyannote", "silero")  # WhisperX's; the VAD is silero-vad for either


class FasterWhisperPipeline:
    """What WhisperX's ``load_model`` returns, for its ``transcribe``; ``transcriber``: ours."""

    def __init__(self, transcriber: Transcriber, options: dict[str, Any], language: str | None, task: str,
                 vad_options: dict[str, Any]):
        self.transcriber = transcriber
        self.options, self.language, self.task, self.vad_options = options, language, task, vad_options

    def transcribe(self, audio: str | np.ndarray, batch_size: int | None = None, num_workers: int = 0,
                   language: str | None = None, task: str | None = None, chunk_size: float = 30,
                   print_progress: bool = False, combined_progress: bool = False, verbose: bool = False,
                   progress_callback: Callable[[float], None] | None = None) -> dict:
        """WhisperX's ``transcribe``: ``{"segments": [{"text", "start", "end", "avg_logprob"}], "language"}``, a
        segment per window of the VAD's speech (an array is 16 kHz samples, as WhisperX takes it)."""
        options = english_only(self.transcriber.pipeline.asr.special.multilingual,
                               {**self.options, "language": language or self.language, "task": task or self.task,
                                "chunk_length": float(chunk_size), "vad_threshold": self.vad_options["vad_onset"]})
        if batch_size:
            options["batch_size"] = batch_size

        def progress(stage: str, fraction: float) -> None:
            if stage != "transcribe":
                return
            if print_progress:
                print(f"Progress: {fraction * (50 if combined_progress else 100):.2f}%...", flush=True)
            if progress_callback is not None:
                progress_callback(fraction * 100)

        rate = 16000 if isinstance(audio, np.ndarray) else None
        result = self.transcriber.transcribe(audio, sample_rate=rate, progress=progress, **options)
        segments = []
        for s in result.segments:
            if verbose:
                print(f"Transcript: [{round(s.start, 3)} --> {round(s.end, 3)}] {s.text}", flush=True)
            segments.append({"text": s.text, "start": round(s.start, 3), "end": round(s.end, 3),
                             "avg_logprob": s.avg_logprob})
        return {"segments": segments, "language": result.language}


def load_model(whisper_arch: str, device: str = "auto", device_index: int = 0, compute_type: str = "default",
           asr_options: dict | None = None, language: str | None = None, vad_model: Any = None,
           vad_method: str = "pyannote", vad_options: dict | None = None, model: Any = None,
           task: str = "transcribe", download_root: str | None = None, local_files_only: bool = False,
           threads: int | None = None, use_auth_token: str | bool | None = None,
           draft: str = "auto") -> FasterWhisperPipeline:
    """WhisperX's ``load_model``: the Whisper model by its name (``large-v3``, ``base``, a Hugging Face id or a
    folder) with WhisperX's options; ``threads`` None: this package's choice for the machine (WhisperX's
    CTranslate2 takes 4); ``draft``: this package's drafter (it pays in greedy decoding:
    ``asr_options={"beam_size": 1}``)."""
    if vad_model is not None or model is not None:
        raise ValueError("load_model: vad_model and model (objects of WhisperX's) are not taken here")
    if vad_method not in VAD_METHODS:
        raise ValueError(f"vad_method: one of {', '.join(VAD_METHODS)} (the VAD here is silero-vad), got {vad_method!r}")
    vad = dict(VAD_OPTIONS)
    for key, value in (vad_options or {}).items():
        if key not in VAD_OPTIONS:
            raise ValueError(f"vad_options: {str(key)[:40]!r} is not one of WhisperX's ({', '.join(VAD_OPTIONS)})")
        vad[key] = value
    if vad["vad_offset"] != VAD_OPTIONS["vad_offset"]:
        raise ValueError("vad_options: vad_offset only at WhisperX's 0.363: silero-vad takes one threshold (vad_onset)")
    run, at_load = _asr_options(asr_options or {})
    transcriber = peer_load(whisper_arch, device, compute_type, device_index, threads, download_root, draft, **at_load)
    if whisper_arch.endswith(".en"):
        language = "en"
    return FasterWhisperPipeline(transcriber, run, language, task, vad)


def _asr_options(given: dict) -> tuple[dict, dict]:
    """WhisperX's ``asr_options`` as our run options and load options (ValueError, one line, for what is not taken)."""
    run: dict[str, Any] = {"vad_filter": True, "without_timestamps": True, "condition_on_previous_text": False,
                           "temperature": 0.0, "temperature_increment_on_fallback": None, "no_speech_threshold": None,
                           "word_timestamps": False, "beam_size": 5}
    at_load: dict[str, Any] = {}
    for name, value in given.items():
        if name in READ or name in RENAMED:
            run[RENAMED.get(name, name)] = suppress_spec(value) if name == "suppress_tokens" else value
        elif name in LOAD_READ:
            at_load[name] = value
        elif name in ONLY_DEFAULT:
            default, why = ONLY_DEFAULT[name]
            if value != default:
                raise ValueError(f"asr_options: {name} only at WhisperX's default ({default!r}) here: {why}")
        elif name not in UNUSED:
            raise ValueError(f"asr_options: {str(name)[:40]!r} is not one of WhisperX's")
    if run["beam_size"] == 1:
        run["beam_size"] = None  # greedy: where a drafter runs
    check_values(run, "api")  # a value out of range: one line when the model loads, not at its first file
    return run, at_load


class AlignModel:
    """What ``load_align_model`` returns: the Whisper model whose cross-attention dates the words."""

    def __init__(self, transcriber: Transcriber):
        self.transcriber = transcriber


def load_align_model(language_code: str, device: str = "auto", model_name: str | None = None, model_dir: str | None = None,
                     model_cache_only: bool = False) -> tuple[AlignModel, dict]:
    """WhisperX's ``load_align_model``: (the model that dates words, its metadata). ``model_name``: a Whisper
    model (default ``base``, the embedded one): words are dated from its cross-attention."""
    name = model_name or "base"
    return (AlignModel(peer_load(name, device, cache_dir=model_dir, draft="none")),
            {"language": language_code, "dictionary": {}, "type": f"whisper:{name}"})


def align(transcript: Iterable[dict], model: AlignModel, align_model_metadata: dict, audio: str | np.ndarray,
          device: str = "auto", interpolate_method: str = "nearest", return_char_alignments: bool = False,
          print_progress: bool = False, combined_progress: bool = False,
          progress_callback: Callable[[float], None] | None = None) -> dict:
    """WhisperX's ``align``: ``{"segments": [{"start", "end", "text", "words": [{"word", "start", "end",
    "score"}]}], "word_segments": [...]}``, each segment's text dated word for word in its stretch of the
    audio, one segment per sentence; the segments aligned side by side in batches."""
    if return_char_alignments:
        raise ValueError("return_char_alignments: there is no character alignment here (words are dated from "
                         "Whisper's cross-attention)")
    if interpolate_method != "nearest":
        raise ValueError(f"interpolate_method: only 'nearest' here: every word gets a time, nothing is interpolated "
                         f"(got {interpolate_method!r})")
    audio = _samples(audio)
    given = _segments_to_align(transcript)
    if not isinstance(align_model_metadata, dict) or "language" not in align_model_metadata:
        raise ValueError("align: align_model_metadata is the dict load_align_model returns (with its 'language')")
    # a segment's stretch, its start at 0 at least (a negative start would slice from the end)
    pieces = [audio[int(max(s["start"], 0.0) * SAMPLE_RATE) : max(int(s["end"] * SAMPLE_RATE), 0)] if str(s["text"]).strip()
              else audio[:0] for s in given]
    kept = [k for k, piece in enumerate(pieces) if len(piece)]
    transcriber = model.transcriber
    opts = transcriber.options(language=align_model_metadata["language"], condition_on_previous_text=False,
                               segment_resolution="sentence")

    def progress(stage: str, fraction: float) -> None:
        if stage == "transcribe":
            if print_progress:
                print(f"Progress: {(50 + fraction * 50) if combined_progress else fraction * 100:.2f}%...", flush=True)
            if progress_callback is not None:
                progress_callback(fraction * 100)

    with transcriber.turn:
        results = transcriber.pipeline.run_many([pieces[k] for k in kept], opts, progress,
                                                texts=[given[k]["text"] for k in kept]) if kept else []
    aligned = dict(zip(kept, results))
    segments: list[dict] = []
    for k, seg in enumerate(given):
        if k not in aligned:  # no text, or no audio in its stretch: kept as it was, without words (as WhisperX)
            segments.append({"start": float(seg["start"]), "end": float(seg["end"]), "text": seg["text"], "words": []})
            continue
        offset = float(max(seg["start"], 0.0))
        for s in aligned[k].segments:
            words = [{"word": w.text.strip(), "start": round(w.start + offset, 3), "end": round(w.end + offset, 3),
                      "score": round(w.probability or 0.0, 3)} for w in s.words]
            segments.append({"start": round(s.start + offset, 3), "end": round(s.end + offset, 3), "text": s.text,
                             "words": words})
    return {"segments": segments, "word_segments": [w for s in segments for w in s["words"]]}


def _samples(audio: Any) -> np.ndarray:
    """``align``'s audio: a path, or 16 kHz samples (a numpy array or tensor, 1-D or WhisperX's ``[1, n]``)."""
    if isinstance(audio, (str, os.PathLike)):
        return load_audio(os.fspath(audio))
    audio = as_samples(audio)
    if not isinstance(audio, np.ndarray):
        raise ValueError(f"align: audio is a path or 16 kHz samples (a numpy array), got {type(audio).__name__}")
    if audio.ndim == 2 and 1 in audio.shape:
        audio = audio.reshape(-1)
    if audio.ndim != 1:
        raise ValueError(f"align: audio is mono samples (n or [1, n]), got shape {tuple(audio.shape)}")
    return np.ascontiguousarray(audio, dtype=np.float32)


def _segments_to_align(transcript: Any) -> list[dict]:
    """``align``'s segments (``transcribe(...)["segments"]``), each with numeric ``start`` and ``end`` and a
    ``text``; a one-line ValueError naming the first that is not."""
    if isinstance(transcript, dict):
        raise ValueError("align: transcript is the list of segments (result['segments']), got a dict")
    if isinstance(transcript, (str, bytes)) or not isinstance(transcript, Iterable):
        raise ValueError(f"align: transcript is a list of segments, got {type(transcript).__name__}")
    segments = list(transcript)
    for k, seg in enumerate(segments, start=1):
        if not isinstance(seg, dict) or not {"start", "end", "text"} <= seg.keys():
            raise ValueError(f"align: segment {k} is not a dict with 'start', 'end' and 'text': {short_repr(seg)}")
        if not all(isinstance(seg[key], numbers.Real) and not isinstance(seg[key], bool) and np.isfinite(seg[key])
                   for key in ("start", "end")):
            raise ValueError(f"align: segment {k}: start and end are seconds (numbers), got {short_repr(seg['start'])}, "
                             f"{short_repr(seg['end'])}")
    return segments


class DiarizationPipeline:
    """WhisperX's ``DiarizationPipeline``: this package's diarizer (``model_name`` None: the embedded offline
    pipeline; a pyannote pipeline id or folder, with ``token`` for the hub, otherwise)."""

    def __init__(self, model_name: str | None = None, token: str | None = None, device: Any = "cpu",
                 cache_dir: str | None = None, use_auth_token: str | None = None):
        from specwhisper.diarize.pipeline import load_diarizer

        self.diarizer = load_diarizer(model_name, token or use_auth_token, device=str(device))

    def __call__(self, audio: str | np.ndarray, num_speakers: int | None = None, min_speakers: int | None = None,
                 max_speakers: int | None = None, return_embeddings: bool = False,
                 progress_callback: Callable[[float], None] | None = None):
        """WhisperX's answer: a pandas DataFrame of the turns (``segment``, ``label``, ``speaker``, ``start``,
        ``end``), with ``{speaker: embedding}`` beside it when ``return_embeddings``."""
        import pandas as pd
        from pyannote.core import Annotation, Segment

        if isinstance(audio, str):
            audio = load_audio(audio)
        report = None if progress_callback is None else (lambda stage, fraction: progress_callback(fraction * 100))
        turns, embeddings = self.diarizer.run(np.asarray(audio, dtype=np.float32), num_speakers, min_speakers,
                                              max_speakers, report)
        annotation = Annotation()
        for t in turns:
            annotation[Segment(t.start, t.end), annotation.new_track(Segment(t.start, t.end))] = t.speaker
        frame = pd.DataFrame(annotation.itertracks(yield_label=True), columns=["segment", "label", "speaker"])
        frame["start"] = frame["segment"].apply(lambda x: x.start)
        frame["end"] = frame["segment"].apply(lambda x: x.end)
        return (frame, embeddings or None) if return_embeddings else frame


def assign_word_speakers(diarize_df, transcript_result: dict, speaker_embeddings: dict | None = None,
                         fill_nearest: bool = False) -> dict:
    """WhisperX's ``assign_word_speakers``: each segment and each dated word gets the speaker whose turns
    overlap it longest in all (with ``fill_nearest``, one overlapping nothing gets the speaker of the turn
    whose middle is nearest its own); ``speaker_embeddings`` are added to the result as given."""
    segments = transcript_result.get("segments", [])
    if not segments or diarize_df is None or len(diarize_df) == 0:
        return transcript_result
    turns = sorted(zip(diarize_df["start"], diarize_df["end"], diarize_df["speaker"]), key=lambda t: t[0])
    middles = np.array([(a + b) / 2 for a, b, _ in turns])

    def speaker(start: float, end: float) -> str | None:
        overlap: dict[str, float] = {}
        for a, b, who in turns:
            shared = min(b, end) - max(a, start)  # positive: the turn and the span overlap
            if shared > 0:
                overlap[who] = overlap.get(who, 0.0) + shared
        if overlap:
            return max(overlap.items(), key=lambda kv: kv[1])[0]
        return turns[int(np.argmin(np.abs(middles - (start + end) / 2)))][2] if fill_nearest else None

    for seg in segments:
        found = speaker(seg.get("start", 0.0), seg.get("end", 0.0))
        if found is not None:
            seg["speaker"] = found
        for word in seg.get("words", []):
            if "start" in word:
                found = speaker(word["start"], word.get("end", word["start"]))
                if found is not None:
                    word["speaker"] = found
    if speaker_embeddings is not None:
        transcript_result["speaker_embeddings"] = speaker_embeddings
    return transcript_result


diarize = sys.modules[__name__]  # WhisperX 3.4+'s ``whisperx.diarize.DiarizationPipeline``
