"""faster-whisper's penalties on repetition (``--repetition-penalty``, ``--no-repeat-ngram-size``) on the public
English clips of 30 s or less (one window each), Whisper base, English given, greedy without fallback:

    python bench/repetition.py [--settings off,rp1.1,ng3] [--out FILE]  (also rp1.5, ng2)

Per setting, side by side in one process (interleaved file by file):

- ``wer`` ours and ``faster_whisper_wer`` (faster-whisper on the same embedded weights, float32, the same
  setting), ``same_text``: the share of clips whose text is faster-whisper's, word for word;
- ``speedup``: our plain decoder's seconds per token written without the penalties over its seconds per
  token with them (under 1: what they cost a token);
- ``token_identical``, ``decoder_speedup``, ``acceptance_rate``: the tiny.en drafter under the same
  setting against plain decoding (tokens, timestamps included).

Writes bench/results/repetition.json.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import embedded_ct2_folder, machine  # noqa: E402

SETTINGS = {"off": (1.0, 0), "rp1.1": (1.1, 0), "rp1.5": (1.5, 0), "ng2": (1.0, 2), "ng3": (1.0, 3)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--settings", default="off,rp1.1,ng3")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "repetition.json"))
    args = ap.parse_args()
    names = args.settings.split(",")
    unknown = [n for n in names if n not in SETTINGS]
    if unknown:
        ap.error(f"unknown setting {unknown[0]} (known: {', '.join(SETTINGS)})")

    import torch
    from faster_whisper import WhisperModel

    from specwhisper.asr.decoding.quality import QualityRules
    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import english_set, normalize, wer

    torch.set_num_threads(args.threads)
    items = [i for i in english_set() if i.duration <= 30.0]
    engine = AsrEngine("base")
    plain, drafted = decoder_factory("none")(engine), decoder_factory("tiny.en")(engine)
    fw = WhisperModel(str(embedded_ct2_folder("base")), device="cpu", compute_type="float32",
                      cpu_threads=args.threads)
    greedy = QualityRules(temperatures=(0.0,))
    tally = {n: dict(ours=[], theirs=[], same=0, plain_s=0.0, tokens=0, spec_s=0.0, identical=True, drafted=0, accepted=0)
             for n in names}
    audios = [load_audio(i.path) for i in items]
    engine.transcribe(audios[0], DecodeOptions(language="en", quality=greedy), decoder=plain)  # warm-up
    for k, audio in enumerate(audios):
        order = names[k % len(names):] + names[: k % len(names)]
        for n in order:
            penalty, ngram = SETTINGS[n]
            opts = DecodeOptions(language="en", quality=greedy, repetition_penalty=penalty, no_repeat_ngram_size=ngram)
            ours = engine.transcribe(audio, opts, decoder=plain)
            fast = engine.transcribe(audio, opts, decoder=drafted)
            theirs = " ".join(s.text.strip() for s in fw.transcribe(
                audio, language="en", beam_size=1, temperature=0.0, condition_on_previous_text=False, vad_filter=False,
                repetition_penalty=penalty, no_repeat_ngram_size=ngram)[0])
            text = " ".join(s.text.strip() for s in ours.segments)
            t = tally[n]
            t["ours"].append(text)
            t["theirs"].append(theirs)
            t["same"] += normalize(text) == normalize(theirs)
            t["plain_s"] += ours.stats.decoder_seconds
            t["tokens"] += ours.stats.generated_tokens
            t["spec_s"] += fast.stats.decoder_seconds
            t["identical"] &= [(s.start, s.end, s.tokens) for s in fast.segments] == \
                [(s.start, s.end, s.tokens) for s in ours.segments]
            t["drafted"] += fast.stats.drafted_tokens
            t["accepted"] += fast.stats.accepted_tokens
        print(f"{k + 1}/{len(items)} {items[k].file}", flush=True)

    refs = [i.reference for i in items]
    off = tally.get("off")
    per_token = off["plain_s"] / off["tokens"] if off else None
    runs = []
    for n in names:
        t = tally[n]
        penalty, ngram = SETTINGS[n]
        run = dict(name=n, repetition_penalty=penalty, no_repeat_ngram_size=ngram, files=len(items),
                   wer=round(wer(refs, t["ours"]), 4), faster_whisper_wer=round(wer(refs, t["theirs"]), 4),
                   same_text=round(t["same"] / len(items), 3), token_identical=t["identical"],
                   decoder_speedup=round(t["plain_s"] / t["spec_s"], 3),
                   acceptance_rate=round(t["accepted"] / t["drafted"], 3) if t["drafted"] else 0.0)
        if per_token is not None:
            run["speedup"] = round(per_token / (t["plain_s"] / t["tokens"]), 3)
            run["tokens"] = t["tokens"]
        runs.append(run)
        print(json.dumps(run))
    out = {"machine": machine(args.threads), "model": "base (embedded weights), English given, greedy, no fallback; "
           "faster-whisper float32 on the same weights; drafter tiny.en", "runs": runs}
    Path(args.out).write_text(json.dumps(out, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
