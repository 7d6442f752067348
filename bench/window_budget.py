"""Where long-form wall time goes: 30 s windows encoded and decoder work, ours against faster-whisper's
batched pipeline on the 10-minute files of ``bench/longform.py``.

    python bench/window_budget.py [--kinds dense,speakers] [--threads 2]

Each system runs in a process of its own, in turn, on the same base weights, greedy, English given.
Counted in process: windows encoded, encoder seconds (per window), decoder seconds, WER.

- ``ours``: the engine as shipped: chunks cover the whole file (the VAD only chooses cut points,
  so no speech is dropped unheard), and the stretches a decode skipped are decoded again in windows of their own.
- ``ours vad-filter``: ``--vad-filter``: the speech alone, joined into windows of up to 30 s (what
  faster-whisper's batched pipeline decodes), with timestamps, nothing decoded again;
- ``ours vad-filter no-timestamps``: ``--vad-filter --without-timestamps``: that pipeline's work;
- ``fw batched``: ``BatchedInferencePipeline`` (batch 8, its silero VAD, no timestamps), its encoder
  and generate calls timed by wrapping them;
- ``ours ... fw-spans``: a what-if for equal work: our engine given the speech spans of faster-whisper's
  own VAD (its ``get_speech_timestamps`` with its batched pipeline's settings), so both decode the very
  same joined audio (``join_spans`` packs as its ``collect_chunks``); our VAD (silero's PyPI weights)
  keeps more of the files than its silero v6;
- ``... int8``: ours with ``-m base:int8`` (int8 decoder products), faster-whisper with ``compute_type="int8"``.

With ``BENCH_CLOCK=cpu`` (bench/common.py) every figure is CPU seconds: steadier than wall time on a
machine other jobs share.

Writes bench/results/window_budget.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import embedded_ct2_folder, machine, run_isolated  # noqa: E402

SYSTEMS = ("ours", "ours vad-filter", "ours vad-filter no-timestamps", "ours vad-filter no-timestamps int8",
           "ours vad-filter no-timestamps fw-spans", "ours vad-filter no-timestamps fw-spans int8", "fw batched", "fw batched int8")


def _ours(path: str, system: str, threads: int, q) -> None:
    import torch

    from specwhisper.asr import engine as E
    from specwhisper.audio.loading import load_audio

    torch.set_num_threads(threads)
    eng = E.AsrEngine("base:int8" if system.endswith(" int8") else "base")
    if "fw-spans" in system:  # the what-if: faster-whisper's VAD chooses the speech
        from faster_whisper.vad import VadOptions, get_speech_timestamps

        def fw_spans(audio, max_span_s, progress=None, **settings):
            found = get_speech_timestamps(audio, VadOptions(max_speech_duration_s=max_span_s, min_silence_duration_ms=160))
            return [(d["start"], d["end"]) for d in found]

        eng.vad.speech_spans = fw_spans
    audio = load_audio(path)
    t = time.perf_counter()
    opts = E.DecodeOptions(language="en", vad_filter="vad-filter" in system, without_timestamps="no-timestamps" in system)
    res = eng.transcribe(audio, opts)
    s = res.stats
    q.put(dict(seconds=time.perf_counter() - t, windows=len(res.chunks), encoder_s=s.encoder_seconds,
               decoder_s=s.decoder_seconds, vad_s=res.vad_seconds, generated_tokens=s.generated_tokens,
               fallback_passes=s.fallback_passes, speech_s=sum(c.duration_s for c in res.chunks),
               text=" ".join(x.text for x in res.segments)))


def _fw(path: str, compute_type: str, threads: int, q) -> None:
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    model = WhisperModel(str(embedded_ct2_folder("base")), device="cpu",
                         compute_type=compute_type, cpu_threads=threads)
    spent = {"encoder": 0.0, "generate": 0.0, "windows": 0, "tokens": 0}
    encode = model.encode

    def timed_encode(features):
        t = time.perf_counter()
        out = encode(features)
        spent["encoder"] += time.perf_counter() - t
        spent["windows"] += features.shape[0]
        return out

    class Timed:  # ctranslate2's model object cannot take attributes: wrap it
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return getattr(self.inner, name)

        def generate(self, *args, **kwargs):
            t = time.perf_counter()
            out = self.inner.generate(*args, **kwargs)
            spent["generate"] += time.perf_counter() - t
            spent["tokens"] += sum(len(r.sequences_ids[0]) for r in out)
            return out

    model.encode, model.model = timed_encode, Timed(model.model)
    t = time.perf_counter()
    segments, info = BatchedInferencePipeline(model).transcribe(path, language="en", beam_size=1, batch_size=8)
    text = " ".join(s.text for s in segments)
    q.put(dict(seconds=time.perf_counter() - t, windows=spent["windows"], encoder_s=spent["encoder"],
               decoder_s=spent["generate"], generated_tokens=spent["tokens"], speech_s=info.duration_after_vad, text=text))


def main(argv: list[str] | None = None) -> int:
    from specwhisper.evaluation.transcripts import LONG_KINDS, build_long_file, wer

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--kinds", default=",".join(LONG_KINDS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "window_budget.json")
    args = ap.parse_args(argv)
    runs = []
    for kind in args.kinds.split(","):
        long = build_long_file(kind, ROOT / "bench" / ".cache")
        for system in args.systems.split(","):
            if system.startswith("fw batched"):
                r = run_isolated(_fw, str(long.path), "int8" if system.endswith(" int8") else "float32", args.threads)
            else:
                r = run_isolated(_ours, str(long.path), system, args.threads)
            text = r.pop("text")
            r.update(name=f"{system}, {kind}", system=system, file=kind, audio_s=round(long.duration, 1),
                     encoder_s_per_window=r["encoder_s"] / max(1, r["windows"]),
                     wer=wer([long.reference], [text]), words=len(text.split()))
            r = {k: round(v, 4) if isinstance(v, float) else v for k, v in r.items()}
            runs.append(r)
            print(f"{r['name']:>40}: {r['seconds']:6.1f} s, {r['windows']:3d} windows, encoder {r['encoder_s']:5.1f} s "
                  f"({r['encoder_s_per_window']:.3f} s each), decoder {r['decoder_s']:5.1f} s, WER {r['wer']:.3f}", flush=True)
    args.out.write_text(json.dumps({"machine": machine(args.threads), "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
