"""The public evaluation set (../shared/eval) and scoring helpers for tests and benchmarks."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jiwer
from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

REPO_ROOT = Path(__file__).resolve().parent.parent


def eval_dir() -> Path:
    """$SPECWHISPER_EVAL_DIR, else the first ``shared/eval`` beside the checkout or one of its parents
    (``../shared/eval`` for a checkout next to the shared folder)."""
    if os.environ.get("SPECWHISPER_EVAL_DIR"):
        return Path(os.environ["SPECWHISPER_EVAL_DIR"])
    for parent in REPO_ROOT.parents:
        if (parent / "shared" / "eval" / "MANIFEST.tsv").is_file():
            return parent / "shared" / "eval"
    return REPO_ROOT.parent / "shared" / "eval"


@dataclass(frozen=True)
class EvalItem:
    file: str
    path: Path
    duration: float
    language: str
    category: str
    reference: str

    @property
    def single_speaker(self) -> bool:
        return self.category.startswith("single")


def load_manifest(root: Path | None = None) -> list[EvalItem]:
    """Audio items of the public split with a reference transcript (if any)."""
    root = root or eval_dir()
    items = []
    with open(root / "MANIFEST.tsv", newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f, delimiter="\t"):
            if row["suggested_split"] != "public" or not row["duration_s"]:
                continue
            items.append(
                EvalItem(
                    file=row["file"],
                    path=root / row["file"],
                    duration=float(row["duration_s"]),
                    language=row["language"],
                    category=row["category"],
                    reference=row["reference_text"],
                )
            )
    return items


def english_set(root: Path | None = None) -> list[EvalItem]:
    """Single-speaker English clips with reference text (the WER set)."""
    return [i for i in load_manifest(root) if i.language == "en" and i.single_speaker and i.reference]


@lru_cache(maxsize=1)
def _english_normalizer() -> EnglishTextNormalizer:
    return EnglishTextNormalizer({})


def normalize(text: str, language: str = "en") -> str:
    """Whisper's text normaliser (lower case, no punctuation, numbers spelled as digits)."""
    if language == "en":
        text = text.replace("[laughter]", "")
        return _english_normalizer()(text)
    return BasicTextNormalizer()(text)


def wer(references: list[str], hypotheses: list[str], language: str = "en") -> float:
    """Corpus WER after normalisation; empty references are skipped."""
    pairs = [(normalize(r, language), normalize(h, language)) for r, h in zip(references, hypotheses)]
    pairs = [(r, h) for r, h in pairs if r.strip()]
    return jiwer.wer([r for r, _ in pairs], [h for _, h in pairs])


def read_textgrid_words(path: Path, tier: str = "words") -> list[tuple[float, float, str]]:
    """(start, end, word) intervals of a short-format Praat TextGrid tier (Montreal Forced Aligner output)."""
    lines = [ln.strip() for ln in Path(path).read_text().splitlines()]
    try:
        i = lines.index(f'"{tier}"')
    except ValueError as exc:
        raise ValueError(f"{path}: no tier named {tier}") from exc
    count = int(lines[i + 3])
    out = []
    for k in range(count):
        start, end, text = lines[i + 4 + 3 * k : i + 7 + 3 * k]
        if text.strip('"'):
            out.append((float(start), float(end), text.strip('"')))
    return out
