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
