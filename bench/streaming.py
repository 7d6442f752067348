"""Live transcription benchmark: a long public recording played in simulated real time through the
streaming engine, with the previous hypothesis drafting every re-decode, side by side with plain
re-decodes.

    python bench/streaming.py [--seconds 120] [--chunk 0.5] [--threads 2] [--clock wall|cpu]

The clock (``specwhisper.live.replay.SimulatedClock``): audio piece k (``--chunk`` s) arrives at
(k+1)·chunk; an update starts when the engine is free and a piece has arrived, takes every piece
arrived by then (whisper_streaming's online mode), and ends its measured compute time later. A
word's latency is the end of the update that confirmed it less the word's end in the audio; an
update's lag is its end less the end of the audio it had; ``rtf`` is the margin, compute seconds
per audio second (below 1: keeps up).

Rows: the speculative engine; the same engine re-decoding plainly (its own clock, its own
confirmed stream); and, on every buffer the speculative engine decoded, a plain greedy decode of the
same encoder output and prompt right after it (interleaved, the same machine state): the decoder
speed-up and the token-identity check come from these pairs. Two bounds, the same re-decodes drafted
by ideal drafters (``SideBySide``): a perfect one (the re-decode's own tokens), and a perfect copy of
the previous hypothesis (its tokens the new output keeps, drafted perfectly, and nothing else). WER of each confirmed stream against
the clips' references and against the offline transcript of the whole file. Writes
bench/results/streaming.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import ROOT, machine, set_clock  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0, help="length of the recording built from the public clips")
    ap.add_argument("--chunk", type=float, default=0.5, help="seconds of audio per piece (0.25-1; the web page sends 0.5)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--encoder", choices=("window", "audio", "both"), default="both",
                    help="the live engine's encoder: the whole 30 s window, the buffer's frames only, or both (one run)")
    ap.add_argument("--clock", choices=("wall", "cpu"), default="wall")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "streaming.json")
    args = ap.parse_args()
    set_clock(args.clock)
    if args.clock == "cpu":  # this process's timers too (common.py patches at import, before the flag is read)
        time.perf_counter = time.process_time
    from specwhisper.hardware.threads import configure

    configure(args.threads)  # the CLI's thread policy (without it a decode step took 10x longer next to other jobs)
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, wer

    long = build_long_file("dense", ROOT / "bench" / ".cache", min_seconds=args.seconds)
    audio = load_audio(long.path)
    engine = AsrEngine("base")
    engine.transcribe(audio[: 5 * 16000], DecodeOptions(language="en"))  # warm-up
    t = time.perf_counter()
    offline = engine.transcribe(audio, DecodeOptions(language="en"))
    offline_s = time.perf_counter() - t
    offline_text = " ".join(s.text.strip() for s in offline.segments)
    pairs = SideBySide(engine)

    duration = len(audio) / 16000
    runs: list[dict] = []
    for encoder in (("window", "audio") if args.encoder == "both" else (args.encoder,)):
        runs += live_rows(engine, audio, args.chunk, encoder, pairs, long.reference, offline_text, duration)
        pairs.rows.clear()
    print(f"{duration:.0f} s audio ({len(long.clips)} clips), {args.chunk} s pieces, {args.threads} thread(s)")
    runs.append({"name": "offline transcript (whole file, plain)", "wer": round(wer([long.reference], [offline_text]), 4),
                 "rtf": round(offline_s / duration, 4)})
    out = args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": machine(args.threads), "audio_seconds": round(duration, 1), "chunk_s": args.chunk, "encoder": args.encoder,
                               "model": "base", "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


class SideBySide:
    """On every buffer the live engine decoded (its observer), right after it: a plain greedy decode
    (the speed-up's reference and the token-identity check), and the same re-decode drafted by two
    ideal drafters: ``perfect`` knows the whole output (the bound of any drafter); ``copy bound`` knows
    the tokens the output shares with the previous hypothesis, in order (difflib's matching blocks,
    exact ids), and drafts nothing else: a perfect copy of the previous hypothesis. The live drafter
    may pass the copy bound: it also drafts a changed word's neighbours and a loop from the output."""

    def __init__(self, engine):
        from specwhisper.asr.decoding.greedy import GreedyDecoder
        from specwhisper.asr.decoding.speculative import SpeculativeDecoder
        from specwhisper.live.decoder import LIVE_LOOKAHEAD

        self.live = None  # the live engine's drafter: its source is the previous hypothesis
        self.plain = GreedyDecoder(engine.runtime, engine.special, engine.rules)
        known_tokens = _known_tokens_drafter()
        self.oracles = [known_tokens(engine.special.timestamp_begin) for _ in range(2)]
        self.bounds = [SpeculativeDecoder(engine.runtime, engine.special, engine.rules, o, LIVE_LOOKAHEAD) for o in self.oracles]
        # (speculative decoder s, plain decoder s, same tokens, perfect-drafter s, copy-bound s)
        self.rows: list[tuple[float, float, bool, float, float]] = []

    def __call__(self, d) -> None:
        import difflib

        self.plain.max_len = d.max_len
        t = time.perf_counter()
        tokens = self.plain.decode(d.encoder_out, d.prompt).sequences[0].tokens
        # the plain decode projects its cross-attention K/V itself; the live one shares its projection
        # with the alignment (``cross_seconds``): counted once on each side
        plain_s = time.perf_counter() - t
        known = [False] * len(d.tokens)
        for m in difflib.SequenceMatcher(a=self.live.src, b=d.tokens, autojunk=False).get_matching_blocks():
            known[m.b : m.b + m.size] = [True] * m.size
        times = []
        for oracle, decoder, mask in zip(self.oracles, self.bounds, ([True] * len(d.tokens), known)):
            oracle.set_known(d.tokens, mask)
            decoder.max_len = d.max_len
            t = time.perf_counter()
            decoder.decode(d.encoder_out, d.prompt)
            times.append(time.perf_counter() - t)
        self.rows.append((d.stats.decoder_seconds + d.cross_seconds, plain_s, tokens == d.tokens, *times))

    def ratios(self) -> dict:
        plain = sum(r[1] for r in self.rows)
        return {"decoder_speedup": round(plain / sum(r[0] for r in self.rows), 3),
                "decoder_speedup_copy_bound": round(plain / sum(r[4] for r in self.rows), 3),
                "decoder_speedup_perfect_drafter": round(plain / sum(r[3] for r in self.rows), 3),
                "token_identical": all(r[2] for r in self.rows), "redecodes_compared": len(self.rows)}


def _known_tokens_drafter() -> type:
    """The bounds' drafter class (defined late: specwhisper is imported after the thread policy is set)."""
    from specwhisper.live.decoder import WhisperHypothesisDrafter

    class KnownTokens(WhisperHypothesisDrafter):
        """Drafts the output's own next tokens while they are marked known (a bound, not a drafter)."""

        name = "known-tokens"

        def set_known(self, tokens: list[int], known: list[bool]) -> None:
            self.set_source(tokens)
            self.known = known

        def _draft(self, generated, k: int) -> list[int]:
            n, out = len(generated), []
            while len(out) < k and n + len(out) < len(self.src) and self.known[n + len(out)]:
                out.append(self.src[n + len(out)])
            return out

    return KnownTokens


def live_rows(engine, audio, chunk, encoder, pairs: SideBySide, reference, offline_text, duration) -> list[dict]:
    """The speculative and the plain live engine with one encoder choice, each on its own simulated clock."""
    from specwhisper.evaluation.transcripts import wer
    from specwhisper.live.replay import Replay, SimulatedClock, replay
    from specwhisper.live.stream import StreamingTranscriber, StreamOptions

    suffix = {"audio": ", encoder over the buffer's frames only (--encoder audio, the live default)",
              "window": ", encoder over the whole 30 s window (--encoder window)"}[encoder]
    spec = StreamingTranscriber(engine, StreamOptions(language="en", encoder=encoder), observer=pairs)
    pairs.live = spec.drafter
    live = replay(spec, audio, chunk, SimulatedClock())
    slow = StreamingTranscriber(engine, StreamOptions(language="en", speculative=False, encoder=encoder))
    live_plain = replay(slow, audio, chunk, SimulatedClock())

    def row(name: str, p: Replay, stats) -> dict:
        text = "".join(w.text for w in p.words)
        r = {"name": name + suffix, "latency_p50_s": round(float(np.percentile(p.latencies, 50)), 3),
             "latency_p90_s": round(float(np.percentile(p.latencies, 90)), 3),
             "rtf": round(p.compute / duration, 4), "max_lag_s": round(max(p.lags), 3),
             "behind_real_time": p.compute > duration or max(p.lags) > 3 * chunk + 2.0,
             "updates": p.updates, "wer": round(wer([reference], [text]), 4),
             "wer_vs_offline": round(wer([offline_text], [text]), 4), "confirmed_words": len(p.words),
             "encoder_s": round(stats.encoder_seconds, 2), "decoder_s": round(stats.decoder_seconds, 2),
             "alignment_s": round(stats.alignment_seconds, 2)}
        if stats.drafted:
            r["acceptance_rate"] = round(stats.acceptance_rate, 4)
            r["tokens_per_target_pass"] = round(stats.tokens_per_target_pass, 3)
        print("  ".join(f"{k}={v}" for k, v in r.items()), flush=True)
        return r

    runs = [row("live, previous hypothesis drafts (speculative)", live, spec.stats)]
    runs[0].update(pairs.ratios())
    print("  ".join(f"{k}={runs[0][k]}" for k in ("decoder_speedup", "decoder_speedup_copy_bound", "decoder_speedup_perfect_drafter",
                                                 "token_identical", "redecodes_compared")))
    runs.append(row("live, plain re-decodes", live_plain, slow.stats))
    return runs


if __name__ == "__main__":
    raise SystemExit(main())
