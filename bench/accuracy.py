"""Accuracy against faster-whisper on the same weights: WER per file and per language group.

Every public eval file with a reference, plus long files built from the clips (specwhisper.evaluation.transcripts
``build_long_file``), transcribed by

- ``ours greedy`` / ``ours beam5``: our pipeline (VAD-chosen chunks covering the whole file, the
  no-speech rule, temperature fallback, re-decoded tails), language detected;
- ``fw greedy`` / ``fw beam5``: faster-whisper's ``WhisperModel.transcribe`` on the same embedded base
  weights (a CTranslate2 copy, float32), language detected, without its VAD and with it
  (``vad_filter=True``).

For each file: WER, and the longest run of reference words missing from the hypothesis (a dropped
chunk or stretch shows up as a long run; ``max_deleted_run``). Per language group: corpus WER. Our
runs also count chunks whose speech was dropped (VAD speech, but no text kept) and tails decoded
again. Writes bench/results/accuracy.json.

    python bench/accuracy.py [--long-minutes 3] [--systems ours-greedy,fw-greedy,...]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import embedded_ct2_folder, machine  # noqa: E402

CACHE = ROOT / "bench" / ".cache"
OUT = ROOT / "bench" / "results" / "accuracy.json"
SYSTEMS = ("ours-greedy", "ours-beam5", "fw-greedy", "fw-greedy-vad", "fw-beam5", "fw-beam5-vad")


@dataclass
class Case:
    name: str
    path: Path
    language: str
    reference: str


def cases(long_minutes: float) -> list[Case]:
    from specwhisper.evaluation.transcripts import build_long_file, load_manifest

    out = [Case(i.file, i.path, i.language, i.reference) for i in load_manifest() if i.reference and i.single_speaker]
    if long_minutes > 0:
        for kind in ("dense", "speakers"):
            f = build_long_file(kind, CACHE, long_minutes * 60)
            out.append(Case(f"long-{kind}-{int(long_minutes * 60)}s", f.path, "en", f.reference))
    return out


def _group(case: Case) -> str:
    return "en-long" if case.name.startswith("long-") else case.language


def max_deleted_run(reference: str, hypothesis: str, language: str) -> int:
    """The longest run of consecutive reference words the hypothesis leaves out (jiwer's alignment)."""
    import jiwer

    from specwhisper.evaluation.transcripts import normalize

    ref, hyp = normalize(reference, language), normalize(hypothesis, language)
    if not ref.split():
        return 0
    if not hyp.split():
        return len(ref.split())
    best = 0
    for chunk in jiwer.process_words(ref, hyp).alignments[0]:
        if chunk.type == "delete":
            best = max(best, chunk.ref_end_idx - chunk.ref_start_idx)
    return best


def ours(beam: int | None):
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions

    engine = AsrEngine("base")

    def run(case: Case) -> dict:
        result = engine.transcribe(load_audio(case.path), DecodeOptions(beam_size=beam))
        kept = {s.seek for s in result.segments}
        dropped = sum(1 for c in result.chunks if c.speech and c.start // 160 not in kept)
        return {"text": " ".join(s.text.strip() for s in result.segments), "dropped_chunks": dropped,
                "redecoded_chunks": result.stats.redecoded_chunks, "fallback_passes": result.stats.fallback_passes,
                "chunks": len(result.chunks)}

    return run


def faster_whisper(beam: int, vad: bool):
    from faster_whisper import WhisperModel

    model = WhisperModel(str(embedded_ct2_folder("base")), device="cpu", compute_type="float32")

    def run(case: Case) -> dict:
        segments, _ = model.transcribe(str(case.path), beam_size=beam, vad_filter=vad)
        return {"text": " ".join(s.text.strip() for s in segments)}

    return run


def system(name: str):
    return {
        "ours-greedy": lambda: ours(None),
        "ours-beam5": lambda: ours(5),
        "fw-greedy": lambda: faster_whisper(1, False),
        "fw-greedy-vad": lambda: faster_whisper(1, True),
        "fw-beam5": lambda: faster_whisper(5, False),
        "fw-beam5-vad": lambda: faster_whisper(5, True),
    }[name]()


def main(argv: list[str] | None = None) -> int:
    from specwhisper.evaluation.transcripts import wer

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--long-minutes", type=float, default=3.0, help="length of the built long files (0: none)")
    p.add_argument("--systems", default=",".join(SYSTEMS))
    args = p.parse_args(argv)
    names = [s for s in args.systems.split(",") if s]
    unknown = [s for s in names if s not in SYSTEMS]
    if unknown:
        p.error(f"unknown system(s) {', '.join(unknown)}; choose from {', '.join(SYSTEMS)}")
    todo = cases(args.long_minutes)
    runs, texts = [], {}
    for name in names:
        run = system(name)
        t0 = time.perf_counter()
        for case in todo:
            out = run(case)
            texts[(name, case.name)] = out.pop("text")
            hyp = texts[(name, case.name)]
            row = {"name": f"{name} {case.name}", "system": name, "file": case.name, "language": case.language,
                   "wer": round(wer([case.reference], [hyp], case.language), 4),
                   "max_deleted_run": max_deleted_run(case.reference, hyp, case.language), **out}
            runs.append(row)
            print(f"{name:14s} {case.name:42s} wer {row['wer']:.3f} max_deleted_run {row['max_deleted_run']}", flush=True)
        print(f"{name}: {time.perf_counter() - t0:.1f} s", flush=True)
    groups = sorted({_group(c) for c in todo})
    for name in names:
        for group in groups:
            members = [c for c in todo if _group(c) == group]
            lang = members[0].language
            score = wer([c.reference for c in members], [texts[(name, c.name)] for c in members], lang)
            runs.append({"name": f"{name} {group}", "system": name, "group": group, "files": len(members),
                         "wer": round(score, 4)})
            print(f"{name:14s} {group:8s} files {len(members):2d} corpus wer {score:.4f}")
    OUT.parent.mkdir(parents=True, exist_ok=True)
    if OUT.is_file():  # keep the earlier runs of the systems not run this time
        runs = [r for r in json.loads(OUT.read_text())["runs"] if r["system"] not in names] + runs
    OUT.write_text(json.dumps({"machine": machine(2), "runs": runs}, indent=1) + "\n")
    print(f"wrote {OUT.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
