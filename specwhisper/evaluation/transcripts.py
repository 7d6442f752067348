"""The public evaluation set (../shared/eval) and scoring helpers for tests and benchmarks."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import jiwer
from transformers.models.whisper.english_normalizer import BasicTextNormalizer, EnglishTextNormalizer

REPO_ROOT = Path(__file__).resolve().parents[2]


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


def deleted_share(reference: str, hypothesis: str, language: str = "en") -> float:
    """The share of the reference's words (after normalisation) missing from the hypothesis."""
    m = jiwer.process_words(normalize(reference, language), normalize(hypothesis, language))
    return m.deletions / max(1, m.hits + m.substitutions + m.deletions)


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


@dataclass(frozen=True)
class Clip:
    """One clip inside a built file: where it is (seconds), its language and its reference."""

    start: float
    end: float
    language: str
    reference: str


@dataclass(frozen=True)
class LongFile:
    """A long recording built from the public clips: where it is, how long, its reference text, and
    each clip's place in it."""

    path: Path
    duration: float
    reference: str
    clips: tuple[Clip, ...]


LONG_KINDS = ("dense", "speakers")  # the long files the benches transcribe by default
PAUSES_S = {"dense": (0.3, 0.8), "speakers": (0.1, 0.4), "paused": (1.0, 20.0)}  # each kind's pauses between clips


def _speaker_of(item: EvalItem) -> str:
    """A voice label for the public clips (same file family, same voice)."""
    name = Path(item.file).name
    if "jfk" in name:
        return "jfk"
    if name.startswith("LJ"):
        return "lj"
    if name.startswith("fleurs-en"):
        return name  # FLEURS clips are read by different people
    return item.file


def build_long_file(kind: str, out_dir: Path, min_seconds: float = 600.0, seed: int = 0) -> LongFile:
    """Concatenate the public English clips into one >= ``min_seconds`` 16 kHz file (cached in ``out_dir``).

    ``dense``: clips back to back with 0.3-0.8 s pauses, each pass over the set in a new order, as
    a talk or an audiobook would be. ``speakers``: a conversation, every clip in another voice than
    the one before, 0.1-0.4 s between turns, levels varied by -8 to +4 dB. ``paused``: as ``dense``
    with 1-20 s of silence between clips (a recording with long waits: Whisper dates a window that
    opens with one from its start). The reference is the clips' references in order."""
    import numpy as np
    import soundfile as sf

    from specwhisper.audio.loading import SAMPLE_RATE, load_audio

    if kind not in PAUSES_S:
        raise ValueError(f"kind must be one of {', '.join(PAUSES_S)}, got '{kind}'")
    out_dir = Path(out_dir)
    path = out_dir / f"long-{kind}-{int(min_seconds)}s-{seed}.wav"
    ref_path = path.with_suffix(".txt")
    items = [i for i in english_set() if _speaker_of(i) != "jfk" or i.file.endswith(".flac")]  # one JFK copy
    gap = PAUSES_S[kind]
    rng = np.random.default_rng(seed)
    order: list[EvalItem] = []
    total = 0.0
    while total < min_seconds:
        batch = [items[k] for k in rng.permutation(len(items))]
        if kind == "speakers":
            for k in range(1, len(batch)):  # no two neighbours in one voice
                if _speaker_of(batch[k]) == _speaker_of(batch[k - 1]):
                    j = next((j for j in range(k + 1, len(batch)) if _speaker_of(batch[j]) != _speaker_of(batch[k - 1])), None)
                    if j is not None:
                        batch[k], batch[j] = batch[j], batch[k]
        for item in batch:
            order.append(item)
            total += item.duration + gap[0]  # the shortest pause: the file is at least this long
            if total >= min_seconds:
                break
    build = not (path.is_file() and ref_path.is_file())
    pieces, clips, cursor = [], [], 0
    for item in order:
        audio = load_audio(item.path)
        if kind == "speakers":
            audio = audio * np.float32(10 ** (rng.uniform(-8, 4) / 20))
        pause = np.zeros(int(rng.uniform(*gap) * SAMPLE_RATE), np.float32)
        clips.append(Clip(cursor / SAMPLE_RATE, (cursor + len(audio)) / SAMPLE_RATE, item.language, item.reference))
        cursor += len(audio) + len(pause)
        if build:
            pieces += [np.clip(audio, -1, 1), pause]
    if build:
        out_dir.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.wav")
        sf.write(tmp, np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
        tmp.replace(path)
        ref_path.write_text(" ".join(i.reference for i in order) + "\n")
    return LongFile(path, sf.info(str(path)).duration, ref_path.read_text().strip(), tuple(clips))


def misdated(segments: list, clips: tuple[Clip, ...], min_words: int = 3, share: float = 0.7, slack_s: float = 1.0) -> list:
    """The ``segments`` (anything with ``start``, ``end``, ``text``) dated away from the clip that holds
    their words: of ``min_words`` or more, ``share`` of their words (normalised) are in one clip's
    reference, and in none of the clips their time overlaps (``slack_s`` either side). WER sees such a
    segment only when it changes the words' order; a subtitle shows it while another voice speaks."""
    refs = [set(normalize(c.reference).split()) for c in clips]
    out = []
    for seg in segments:
        words = normalize(seg.text).split()
        if len(words) < min_words:
            continue
        holds = [sum(w in ref for w in words) >= share * len(words) for ref in refs]
        near = [c.start - slack_s < seg.end and seg.start < c.end + slack_s for c in clips]
        if any(holds) and not any(h and n for h, n in zip(holds, near)):
            out.append(seg)
    return out


@dataclass(frozen=True)
class MixedFile:
    """A file built from public clips in several languages."""

    path: Path
    duration: float
    clips: tuple[Clip, ...]

    def clip_at(self, start: float, end: float) -> Clip | None:
        """The clip a stretch [start, end] overlaps most (None: only silence)."""
        best = max(self.clips, key=lambda c: min(end, c.end) - max(start, c.start))
        return best if min(end, best.end) - max(start, best.start) > 0 else None


def build_multilingual_file(files: list[str], out_dir: Path, gap_s: float = 1.5, window_s: float | None = None,
                            name: str | None = None) -> MixedFile:
    """The public clips ``files`` (MANIFEST paths) one after another, each trimmed to its speech (the
    VAD's spans, 0.2 s kept on each side), with ``gap_s`` of silence between them: a meeting that
    changes language from turn to turn. With ``window_s``, the pause after a clip grows until the
    next clip starts more than a window of that length after the clip's start: the chunker, which
    packs speech into windows from a clip's start, then puts each clip in a window of its own.
    Cached in ``out_dir`` (16 kHz WAV)."""
    import hashlib

    import numpy as np
    import soundfile as sf

    from specwhisper.audio.loading import SAMPLE_RATE, load_audio
    from specwhisper.audio.vad import VoiceActivityDetector

    items = {i.file: i for i in load_manifest()}
    missing = [f for f in files if f not in items or not items[f].reference]
    if missing:
        raise ValueError(f"no public clip with a reference: {missing[0]}")
    key = hashlib.sha256(repr((2, files, gap_s, window_s)).encode()).hexdigest()[:10]  # 2: the layout's version
    path = Path(out_dir) / f"{name or 'multilingual'}-{key}.wav"
    vad = VoiceActivityDetector()
    margin = int(0.2 * SAMPLE_RATE)
    pieces, clips, cursor = [], [], 0
    for k, f in enumerate(files):
        audio = load_audio(items[f].path)
        spans = vad.speech_spans(audio) or [(0, len(audio))]
        a, b = max(0, spans[0][0] - margin), min(len(audio), spans[-1][1] + margin)
        if k:
            gap = gap_s
            if window_s is not None:  # the next clip's speech starts a window after this clip's start
                gap = max(gap, window_s + 1.0 - (clips[-1].end - clips[-1].start))
            pieces.append(np.zeros(int(gap * SAMPLE_RATE), np.float32))
            cursor += int(gap * SAMPLE_RATE)
        clips.append(Clip(cursor / SAMPLE_RATE, (cursor + b - a) / SAMPLE_RATE, items[f].language, items[f].reference))
        pieces.append(audio[a:b])
        cursor += b - a
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp.wav")
        sf.write(tmp, np.concatenate(pieces), SAMPLE_RATE, subtype="PCM_16")
        tmp.replace(path)
    return MixedFile(path, cursor / SAMPLE_RATE, tuple(clips))
