"""Shared pieces of the benchmarks: isolated runs (own process, own peak RSS) of our engine and of
faster-whisper on the same embedded weights, over the public eval files."""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

# On a shared 2-core machine wall times swing with other jobs. With BENCH_CLOCK=cpu every timer of a
# benchmark process (ours, and the engine's own phase timers, which read time.perf_counter) counts
# the process's CPU seconds instead: with one thread that is the wall time of a quiet machine.
CLOCK = os.environ.get("BENCH_CLOCK", "wall")
if CLOCK == "cpu":
    time.perf_counter = time.process_time


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return 0.0


def set_clock(clock: str) -> None:
    """Choose the clock for this run's benchmark processes (they are spawned and read the variable)."""
    if clock not in ("wall", "cpu"):
        raise ValueError(f"clock must be wall or cpu, got {clock}")
    os.environ["BENCH_CLOCK"] = clock


def machine(threads: int) -> str:
    """The machine in words, with the load average: other jobs on a small CPU skew absolute times
    (ratios measured side by side suffer less, but are noisy too)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} thread(s), CPU only; "
            f"load average at the end {load}; times: {os.environ.get('BENCH_CLOCK', 'wall')} clock")


def run_isolated(fn, *args) -> dict:
    """Run ``fn(*args, queue)`` in a fresh spawned process and return what it puts on the queue."""
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    p = ctx.Process(target=fn, args=(*args, q))
    p.start()
    while True:
        try:
            res = q.get(timeout=5)
            break
        except queue.Empty:
            if not p.is_alive():
                raise RuntimeError(f"{getattr(fn, '__name__', fn)}{args[:2]} failed (exit code {p.exitcode})") from None
    p.join()
    return res


def ours(model: str, draft: str, files: list[str], threads: int, batch_size: int, q) -> None:
    """Our engine on ``files`` (after one warm-up file): tokens, texts, timings and speculative counters."""
    import torch

    torch.set_num_threads(threads)
    from asr.audio import load_audio
    from asr.drafting import decoder_factory
    from asr.engine import AsrEngine, DecodeOptions

    engine = AsrEngine(model, decoder_factory=decoder_factory(draft))
    opts = DecodeOptions(language="en", batch_size=batch_size)
    engine.transcribe(load_audio(files[0]), opts)  # warm-up
    tokens, texts, total, dec, enc, gen, passes, drafted, accepted, audio_s = [], [], 0.0, 0.0, 0.0, 0, 0, 0, 0, 0.0
    for f in files:
        audio = load_audio(f)
        audio_s += len(audio) / 16000
        t = time.perf_counter()
        r = engine.transcribe(audio, opts)
        total += time.perf_counter() - t
        s = r.stats
        dec += s.decoder_seconds
        enc += s.encoder_seconds
        gen += s.generated_tokens
        passes += s.target_passes
        drafted += s.drafted_tokens
        accepted += s.accepted_tokens
        tokens.append([[seg.start, seg.end, seg.tokens] for seg in r.segments])
        texts.append(" ".join(seg.text for seg in r.segments))
    q.put(dict(tokens=tokens, texts=texts, total=total, decoder=dec, encoder=enc, audio_s=audio_s,
               acceptance_rate=accepted / drafted if drafted else 0.0,
               tokens_per_target_pass=gen / passes if passes else 0.0, peak_rss_mb=peak_rss_mb()))


def faster_whisper(model: str, files: list[str], threads: int, q) -> None:
    """faster-whisper (CTranslate2) on the same embedded weights, fp32, greedy, no VAD filter."""
    from faster_whisper import WhisperModel

    from asr.audio import load_audio
    from asr.models import write_ct2_folder

    fw = WhisperModel(str(write_ct2_folder(model, Path(tempfile.mkdtemp()))), device="cpu", compute_type="float32",
                      cpu_threads=threads)
    kw = dict(language="en", beam_size=1, condition_on_previous_text=False, vad_filter=False)
    list(fw.transcribe(load_audio(files[0]), **kw)[0])  # warm-up
    total, audio_s, texts = 0.0, 0.0, []
    for f in files:
        audio = load_audio(f)
        audio_s += len(audio) / 16000
        t = time.perf_counter()
        segs = list(fw.transcribe(audio, **kw)[0])
        total += time.perf_counter() - t
        texts.append(" ".join(s.text for s in segs))
    q.put(dict(texts=texts, total=total, decoder=None, audio_s=audio_s, peak_rss_mb=peak_rss_mb()))
