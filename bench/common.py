"""Shared pieces of the benchmarks: isolated runs (own process, own peak RSS) of our engine and of
faster-whisper on the same embedded weights, over the public eval files."""

from __future__ import annotations

import multiprocessing as mp
import os
import platform
import queue
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import specwhisper  # noqa: E402,F401  the thread policy (specwhisper.hardware.threads) before any benchmark process imports torch

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
    import torch

    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    # our engines take a GPU where one is usable (``--device auto``, float16)
    gpu = f"GPU {torch.cuda.get_device_name()} (ours in float16)" if torch.cuda.is_available() else "CPU only"
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, {threads} thread(s), {gpu}; "
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


class _Tally:
    """One configuration's totals over the files: tokens, texts, timings and speculative counters."""

    def __init__(self):
        self.tokens, self.texts = [], []
        self.total = self.dec = self.enc = self.audio_s = 0.0
        self.gen = self.passes = self.drafted = self.accepted = 0

    def add(self, engine, audio, opts) -> None:
        self.audio_s += len(audio) / 16000
        t = time.perf_counter()
        r = engine.transcribe(audio, opts)
        self.total += time.perf_counter() - t
        s = r.stats
        self.dec += s.decoder_seconds
        self.enc += s.encoder_seconds
        self.gen += s.generated_tokens
        self.passes += s.target_passes
        self.drafted += s.drafted_tokens
        self.accepted += s.accepted_tokens
        self.tokens.append([[seg.start, seg.end, seg.tokens] for seg in r.segments])
        self.texts.append(" ".join(seg.text for seg in r.segments))

    def result(self) -> dict:
        return dict(tokens=self.tokens, texts=self.texts, total=self.total, decoder=self.dec, encoder=self.enc,
                    audio_s=self.audio_s, acceptance_rate=self.accepted / self.drafted if self.drafted else 0.0,
                    tokens_per_target_pass=self.gen / self.passes if self.passes else 0.0, peak_rss_mb=peak_rss_mb())


def ours(model: str, draft: str, files: list[str], threads: int, batch_size: int, q) -> None:
    """Our engine on ``files`` (after one warm-up file): tokens, texts, timings and speculative counters."""
    import torch

    torch.set_num_threads(threads)
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions

    engine = AsrEngine(model, decoder_factory=decoder_factory(draft))
    opts = DecodeOptions(language="en", batch_size=batch_size)
    engine.transcribe(load_audio(files[0]), opts)  # warm-up
    tally = _Tally()
    for f in files:
        tally.add(engine, load_audio(f), opts)
    q.put(tally.result())


def ours_interleaved(model: str, drafts: list[str], files: list[str], threads: int, batch_size: int, q) -> None:
    """Our engine with each of ``drafts`` in turn on every file, in one process over one target (the
    first to go rotates per file). Why: this machine's speed drifts by up to 30% over minutes (the
    same target-alone run measured RTF 0.176, 0.205 and 0.241 within an hour); configurations timed
    one after another inherit that drift, configurations interleaved file by file share it."""
    import torch

    torch.set_num_threads(threads)
    from specwhisper.audio.loading import load_audio
    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions

    # one engine per configuration over one set of weights: each has its own runtime (an early-exit
    # drafter re-packs its runtime's head), as in a process of its own
    bundle = AsrEngine(model).bundle
    engines = {d: AsrEngine(model, bundle=bundle, decoder_factory=decoder_factory(d)) for d in drafts}
    opts = DecodeOptions(language="en", batch_size=batch_size)
    warm = load_audio(files[0])
    for d in drafts:
        engines[d].transcribe(warm, opts)
    tallies = {d: _Tally() for d in drafts}
    for i, f in enumerate(files):
        audio = load_audio(f)
        j = i % len(drafts)
        for d in drafts[j:] + drafts[:j]:
            tallies[d].add(engines[d], audio, opts)
    q.put({d: t.result() for d, t in tallies.items()})


def embedded_ct2_folder(model: str) -> Path:
    """The embedded ``model`` as a CTranslate2 folder, faster-whisper's reference decoder of the same weights:
    converted once, into bench/.cache/ct2 (a new temp folder per run left 142 MB behind each time)."""
    from specwhisper.asr.weights.loader import write_ct2_folder

    return write_ct2_folder(model, ROOT / "bench" / ".cache" / "ct2")


def faster_whisper(model: str, files: list[str], threads: int, q) -> None:
    """faster-whisper (CTranslate2) on the same embedded weights, fp32, greedy, no VAD filter."""
    from faster_whisper import WhisperModel

    from specwhisper.audio.loading import load_audio

    fw = WhisperModel(str(embedded_ct2_folder(model)), device="cpu", compute_type="float32",
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
