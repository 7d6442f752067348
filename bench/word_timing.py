"""Word timestamps against a forced alignment: ours, faster-whisper's and openai-whisper's, on the same base
weights, against the Montreal Forced Aligner's TextGrid of the eval set's mfa/acoustic_corpus (its one clip with
word intervals: 27 s, 58 words).

    python bench/word_timing.py [--threads 2] [--out FILE]

Each system transcribes greedily (beam_size 1, English given, each window alone, temperature fallback on) with
word timestamps; its words are matched to the reference's in order (difflib on their comparison forms). Per
system: ``matched`` words, the median absolute error of their starts and ends (``start_error_median_s``,
``end_error_median_s``), the share of ends within 0.2 s (``end_within_0_2``), and, for the words that end in a
punctuation mark joined to them (``mark_words``), the signed median of their end errors
(``mark_end_signed_median_s``: below 0, they end before the aligner's end) and the mean absolute one.
``probability_max_abs_vs_fw``: the largest difference between a word's probability and faster-whisper's
for the same word, where both have the same words. Writes bench/results/word_timing.json.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import embedded_ct2_folder, machine  # noqa: E402

EVAL = ROOT.parent / "shared" / "eval"
CLIP, GRID = EVAL / "mfa/acoustic_corpus.wav", EVAL / "mfa/acoustic_corpus.TextGrid"
MARKS = ",.!?;:"


def figures(words: list[tuple[str, float, float, float]], reference) -> dict:
    """The errors of ``words`` (text, start, end, probability) against ``reference`` (start, end, word)."""
    from specwhisper.evaluation.transcripts import normalize

    match = difflib.SequenceMatcher(a=[normalize(w[0]) for w in words], b=[normalize(r[2]) for r in reference],
                                    autojunk=False)
    pairs = [(words[b.a + k], reference[b.b + k]) for b in match.get_matching_blocks() for k in range(b.size)]
    starts = np.array([abs(w[1] - r[0]) for w, r in pairs])
    ends = np.array([abs(w[2] - r[1]) for w, r in pairs])
    marked = np.array([w[2] - r[1] for w, r in pairs if w[0].strip()[-1:] in MARKS])
    return dict(matched=len(pairs), reference_words=len(reference),
                start_error_median_s=round(float(np.median(starts)), 3), end_error_median_s=round(float(np.median(ends)), 3),
                end_within_0_2=round(float(np.mean(ends <= 0.2)), 3), mark_words=len(marked),
                mark_end_signed_median_s=round(float(np.median(marked)), 3),
                mark_end_error_mean_s=round(float(np.mean(np.abs(marked))), 3))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "word_timing.json")
    args = ap.parse_args()

    import faster_whisper
    import torch
    import whisper

    from bench.hallucination import openai_model
    from specwhisper.asr.decoding.quality import QualityRules
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import read_textgrid_words
    from specwhisper.pipeline.api import load

    torch.set_num_threads(args.threads)
    reference = read_textgrid_words(GRID)
    audio = load_audio(CLIP)
    engine = load("base").pipeline.asr
    greedy = QualityRules()  # openai-whisper's temperatures, as the peers' defaults
    ours = engine.transcribe(audio, DecodeOptions(language="en", word_timestamps=True, quality=greedy)).segments
    got = {"ours": [(w.text, w.start, w.end, w.probability) for s in ours for w in s.words]}
    fw = faster_whisper.WhisperModel(str(embedded_ct2_folder("base")), device="cpu", compute_type="float32",
                                     cpu_threads=args.threads)
    segments, _ = fw.transcribe(audio, language="en", beam_size=1, condition_on_previous_text=False,
                                word_timestamps=True)
    got["faster-whisper"] = [(w.word, w.start, w.end, w.probability) for s in segments for w in s.words]
    result = whisper.transcribe(openai_model(engine.bundle), audio, language="en", beam_size=1, fp16=False,
                                condition_on_previous_text=False, word_timestamps=True)
    got["openai-whisper"] = [(w["word"], w["start"], w["end"], w["probability"]) for s in result["segments"]
                             for w in s["words"]]
    runs = []
    for name, words in got.items():
        run = {"name": name, **figures(words, reference)}
        same = [w[0] for w in words] == [w[0] for w in got["faster-whisper"]]
        run["probability_max_abs_vs_fw"] = (round(max(abs(a[3] - b[3]) for a, b in zip(words, got["faster-whisper"])), 3)
                                            if same else None)
        runs.append(run)
        print(json.dumps(run))
    args.out.write_text(json.dumps({"machine": machine(args.threads), "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
