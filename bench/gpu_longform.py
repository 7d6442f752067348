"""Long-form transcription on a GPU against the peers, on the same weights: ours (plain and ``--draft auto``,
batch 8 / 16 / 32 and the batch the GPU's free memory gives by default) against faster-whisper's
BatchedInferencePipeline (CTranslate2, float16, batch 8 and 16), the transformers ASR pipeline in
insanely-fast-whisper's settings (chunk_length_s 30, batch 16, float16, sdpa, timestamps, greedy) and, batch 1,
transformers' assisted generation (the seed blog's recipe) beside the same pipeline without assistant.

    python bench/gpu_longform.py --model FOLDER [--device cuda] [--batches 8,16,32] [--budget-s 170]
    python bench/gpu_longform.py --model FOLDER --device cpu --cut-s 60 --batches 2,4 ...   (rehearsal)

``--model``: a Whisper folder in transformers' layout (the GPU check's is the embedded tiny.en with its
weights rounded to int8 per row, the same for every system: bench/gpu/README.md). faster-whisper reads
it converted by CTranslate2's own converter (float16). Files: bench/longform.py's two 10-minute files
(``dense``: a talk, ``speakers``: a conversation) and a 60-minute one made of them (``long``), English.

Each system runs in a process of its own: start-up (imports, model loading, a warm-up on 30 s) is
reported apart from each file's transcription, whose wall time gives ``audio_s_per_s``; WER against
the clips' references (Whisper's English normaliser); ``peak_gpu_mb``: the process's GPU memory at its
highest while the file ran (NVML, sampled every 20 ms; CUDA context included), with torch's own peak
for the torch systems. Ours with ``auto`` is checked token-identical to ours plain at the same batch.
Ours decodes as openai-whisper does, sampling a window again at rising temperatures where its text fails
the compression and log-probability checks; faster-whisper's batched pipeline decodes at its first
temperature only. The row ``ours none, no fallback`` decodes as it does (rows report ``fallback_s``); the row
``ours none, a stream per batch`` samples each batch's failing windows apart, against the default, which
samples those of several batches in one stream (``FallbackPool``).
faster-whisper's CTranslate2 wheel is built for CUDA 12: on a CUDA 13 machine its cuBLAS is looked for
as a link named libcublas.so.12 to the machine's cuBLAS 13 (the functions it calls exist in both);
where it still fails, its rows carry the error. Writes bench/results/gpu_longform.json after each system.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

CACHE = ROOT / "bench" / ".cache"
STUBS = ROOT / "bench" / "gpu" / "stubs"  # an empty ``av``: faster-whisper imports it, we hand it arrays
SYSTEMS = ("ours", "fw batched", "hf pipeline", "hf assisted")
WEIGHTS = {"ours": 0.45, "fw batched": 0.25, "hf pipeline": 0.18, "hf assisted": 0.12}  # shares of --budget-s


# ---------------------------------------------------------------------------------------------- files

def long_files(minutes: float, long_minutes: float, cut_s: float | None) -> list[dict]:
    """The 10-minute files and the long one (made of them, repeated), each as path, seconds, reference;
    ``cut_s``: every file cut to its first seconds (a rehearsal; references cut in proportion)."""
    import numpy as np
    import soundfile as sf

    from specwhisper.evaluation.transcripts import LONG_KINDS, build_long_file

    files = [build_long_file(k, CACHE, minutes * 60) for k in LONG_KINDS]
    out = [dict(kind=k, path=str(f.path), seconds=f.duration, reference=f.reference) for k, f in zip(LONG_KINDS, files)]
    if long_minutes:
        path = CACHE / f"long-{int(long_minutes)}min.wav"
        reps = max(1, round(long_minutes * 60 / sum(f.duration for f in files)))
        if not path.is_file():
            audio = np.concatenate([sf.read(str(f.path), dtype="float32")[0] for f in files] * reps)
            sf.write(str(path), audio, 16000, subtype="PCM_16")
        out.append(dict(kind="long", path=str(path), seconds=sf.info(str(path)).duration,
                        reference=" ".join([f.reference for f in files] * reps)))
    if cut_s:
        for f in out:
            audio = sf.read(f["path"], dtype="float32")[0][: int(cut_s * 16000)]
            cut = CACHE / f"cut-{int(cut_s)}s-{Path(f['path']).name}"
            sf.write(str(cut), audio, 16000, subtype="PCM_16")
            words = f["reference"].split()
            f.update(path=str(cut), reference=" ".join(words[: round(len(words) * min(1.0, cut_s / f["seconds"]))]),
                     seconds=len(audio) / 16000)
    return out


# ---------------------------------------------------------------------------------------------- measuring

BASELINE_ENV = "GPU_LONGFORM_BASELINE_BYTES"  # the GPU's used memory before a child started (run_child)


def device_used_bytes() -> int | None:
    """The GPU's used memory, all processes (NVML); None without NVML."""
    try:
        import pynvml

        pynvml.nvmlInit()
        return int(pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(0)).used)
    except Exception:  # no NVML (a CPU rehearsal)
        return None


class GpuMemory:
    """The peak GPU memory of this process while the block runs (NVML, sampled), in MB; 0 without NVML.
    NVML names a process by its pid in the host's namespace: inside a container no entry is this
    process (or its figure is missing), and the process's memory is then the GPU's used memory less
    what was in use before the process started (``BASELINE_ENV``; one system runs at a time)."""

    def __init__(self, interval: float = 0.02):
        self.interval, self.peak, self._stop = interval, 0, threading.Event()
        self.baseline = int(os.environ.get(BASELINE_ENV) or 0)
        try:
            import pynvml

            pynvml.nvmlInit()
            self._nvml = pynvml
            self._handle = pynvml.nvmlDeviceGetHandleByIndex(0)
        except Exception:  # no NVML (a CPU rehearsal)
            self._nvml = None

    def _used(self) -> int:
        for p in self._nvml.nvmlDeviceGetComputeRunningProcesses(self._handle):
            if p.pid == os.getpid() and p.usedGpuMemory:
                return p.usedGpuMemory
        return max(0, self._nvml.nvmlDeviceGetMemoryInfo(self._handle).used - self.baseline)

    def __enter__(self):
        if self._nvml is not None:
            self._stop.clear()
            self.peak = self._used()
            self._thread = threading.Thread(target=self._sample, daemon=True)
            self._thread.start()
        return self

    def _sample(self):
        while not self._stop.wait(self.interval):
            self.peak = max(self.peak, self._used())

    def __exit__(self, *exc):
        if self._nvml is not None:
            self._stop.set()
            self._thread.join()

    @property
    def mb(self) -> int:
        return round(self.peak / 2**20)


def torch_peak(device: str, reset: bool = False) -> int | None:
    import torch

    if not device.startswith("cuda"):
        return None
    if reset:
        torch.cuda.reset_peak_memory_stats()
        return None
    return round(torch.cuda.max_memory_allocated() / 2**20)


def load(path: str):
    from specwhisper.audio.loading import load_audio

    return load_audio(path)


def row(system: str, f: dict, seconds: float, text: str, extra: dict) -> dict:
    from specwhisper.evaluation.transcripts import wer

    return dict(system=system, file=f["kind"], audio_s=round(f["seconds"], 1), wall_s=round(seconds, 3),
                audio_s_per_s=round(f["seconds"] / seconds, 1), rtf=round(seconds / f["seconds"], 5),
                wer=round(wer([f["reference"]], [text]), 4),
                words=len(text.split()), **extra)


# ---------------------------------------------------------------------------------------------- children

def child_ours(cfg: dict) -> dict:
    import torch

    from specwhisper.asr.decoding.fallback import POOL_BATCHES
    from specwhisper.asr.decoding.quality import QualityRules
    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions

    t = time.perf_counter()
    dev = cfg["device"]
    plain = AsrEngine(cfg["model"], device=dev, dtype=cfg["dtype"])
    auto = AsrEngine(cfg["model"], device=dev, bundle=plain.bundle, decoder_factory=decoder_factory("auto"))
    engines = {"none": plain, "auto": auto}
    features_s = timing(engines.values(), "_features")  # log-mel on the host, a part of stats.encoder_seconds
    captures = capture_timing(dev)
    warm = load(cfg["files"][0]["path"])[: 30 * 16000]
    startup = time.perf_counter() - t
    encoder_ms = encoder_ms_per_window(plain, warm)
    print(f"encoder ms per window: {json.dumps(encoder_ms)}", flush=True)
    rows, tokens = [], {}
    # every configuration on the 10-minute files first, then on the long one: a budget cut short still has
    # each configuration's row on a 10-minute file
    short = [f for f in cfg["files"] if f["kind"] != "long"]
    long = [f for f in cfg["files"] if f["kind"] == "long"]
    for draft, batch, files in [(d, b, fs) for fs in (short, long) for d, b in cfg["configs"]]:
        files = [f for f in files if f["kind"] in cfg["files_for"][f"{draft} {batch}"]]
        if not files:
            continue
        engine = engines[draft.split(",")[0]]
        # "none, no fallback": one temperature, as faster-whisper's batched pipeline decodes (it passes only the
        # first of its temperatures to CTranslate2); ours by default samples again where a window fails the checks
        fallback = {"quality": QualityRules(temperatures=(0.0,))} if draft.endswith("no fallback") else {}
        engine.fallback_pool = 1 if draft.endswith("a stream per batch") else POOL_BATCHES
        opts = DecodeOptions(language="en", batch_size=batch, **fallback)
        engine.transcribe(warm, opts)  # graphs of this batch's shapes, kernels
        for f in files:
            audio = load(f["path"])
            torch_peak(dev, reset=True)
            features_s[0] = 0.0
            captures.update(n=0, s=0.0, passes=0, shapes=set())
            with GpuMemory() as mem:
                t = time.perf_counter()
                res = engine.transcribe(audio, opts)
                seconds = time.perf_counter() - t
            s = res.stats
            toks = [seg.tokens for seg in res.segments]
            tokens[(draft, batch, f["kind"])] = toks
            extra = dict(draft=draft, batch=batch if batch else f"default ({auto_batch(engine)})", peak_gpu_mb=mem.mb,
                         torch_peak_mb=torch_peak(dev), vad_s=round(res.vad_seconds, 3), features_s=round(features_s[0], 3),
                         encoder_s=round(s.encoder_seconds - features_s[0], 3), decoder_s=round(s.decoder_seconds, 3),
                         windows=len(res.chunks), generated_tokens=s.generated_tokens, target_passes=s.target_passes,
                         fallback_passes=s.fallback_passes, fallback_s=round(s.fallback_seconds, 3),
                         decoder_steps=s.decoder_steps, fallback_steps=s.fallback_steps, loops_cut=s.loops_cut,
                         graph_captures=captures["n"], capture_s=round(captures["s"], 3),
                         pass_captures=captures["passes"], pass_shapes=len(captures["shapes"]),
                         redecoded_chunks=s.redecoded_chunks,
                         acceptance_rate=round(s.acceptance_rate, 3) if s.drafted else None,
                         tokens_per_target_pass=round(s.tokens_per_target_pass, 3) if s.drafted else None)
            if draft == "auto":
                extra["token_identical"] = tokens.get(("none", batch, f["kind"])) == toks if ("none", batch, f["kind"]) in tokens else None
                extra["auto"] = auto.decoder.summary()["choices"]
            rows.append(row(f"ours {draft}", f, seconds, " ".join(seg.text for seg in res.segments), extra))
            print(json.dumps(rows[-1]), flush=True)
    del torch
    return dict(startup_s=round(startup, 2), encoder_ms_per_window=encoder_ms, rows=rows)


def capture_timing(device: str) -> dict:
    """Count and time the CUDA graph captures (a decoder pass's, ``PassGraphs``; a choice's or a pick's,
    ``CapturedCall``) while the returned dict lives: ``n``, ``s``, and of the passes' captures ``passes``
    and their distinct ``shapes``. A pass's graphs are keyed by its cache's addresses, so a decode on new
    memory captures again: passes well above shapes say the caches keep moving."""
    from specwhisper.asr.runtime import graphs

    total = {"n": 0, "s": 0.0, "passes": 0, "shapes": set()}

    def timed(f, passes: bool = False):
        def run(*args, **kwargs):
            if passes:  # (self, x, positions, cache, start, stop): the graph's key without its cache's addresses
                key = graphs.PassGraphs.key(*args[1:])
                total["passes"] += 1
                total["shapes"].add(key[:5] + tuple(m[1:] for m in key[5:]))
            import torch

            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            try:
                return f(*args, **kwargs)
            finally:
                if device.startswith("cuda"):
                    torch.cuda.synchronize()
                total["n"] += 1
                total["s"] += time.perf_counter() - t
        return run

    graphs.PassGraphs._capture = timed(graphs.PassGraphs._capture, passes=True)
    init = graphs.CapturedCall.__init__

    def captured_init(self, fn, device_, *args, **kwargs):
        if device_.type != "cuda":
            return init(self, fn, device_, *args, **kwargs)
        return timed(init)(self, fn, device_, *args, **kwargs)

    graphs.CapturedCall.__init__ = captured_init
    return total


def timing(objects, method: str) -> list[float]:
    """Wrap ``method`` of each object so that its seconds add up in the returned one-element list."""
    total = [0.0]
    for obj in objects:
        def timed(*args, _f=getattr(obj, method), **kwargs):
            t = time.perf_counter()
            try:
                return _f(*args, **kwargs)
            finally:
                total[0] += time.perf_counter() - t
        setattr(obj, method, timed)
    return total


def encoder_ms_per_window(engine, audio, rows: int = 16, reps: int = 3) -> dict:
    """Milliseconds per 30 s window of our encoder over ``rows`` windows: one call per window (the CPU's
    way) and one call for all (a GPU's, ``EncoderRuntime.whole_batch``), each waited for."""
    import torch

    from bench.large_target_probe import timed
    from specwhisper.audio.chunking import Chunk

    enc = engine.encoder
    feats = engine.features(audio, [Chunk(0, len(audio))]).expand(rows, -1, -1).contiguous()
    ways = {"alone": lambda: torch.cat([enc._window(feats[i : i + 1]) for i in range(rows)]),
            "batched": lambda: enc._window(feats)}
    with torch.inference_mode():
        out = {name: round(timed(fn, engine.device, reps, warmups=1) / rows, 3) for name, fn in ways.items()}
    return dict(out, rows=rows, used=("batched" if enc.whole_batch else "alone"))


def auto_batch(engine) -> int:
    from specwhisper.asr.batch_memory import fit_batch_size

    return fit_batch_size(None, engine.runtime, warn=False)


def ct2_folder(model: str) -> Path:
    """The model converted by CTranslate2's own converter (float16), once."""
    out = CACHE / "ct2" / (Path(model).name + "-fp16")
    if not (out / "model.bin").is_file():
        from ctranslate2.converters import TransformersConverter

        out.parent.mkdir(parents=True, exist_ok=True)
        TransformersConverter(model, copy_files=["tokenizer.json"]).convert(str(out), quantization="float16", force=True)
    return out


def child_fw(cfg: dict) -> dict:
    import ctranslate2
    from faster_whisper import BatchedInferencePipeline, WhisperModel

    t = time.perf_counter()
    gpu = cfg["device"].startswith("cuda")
    cuda = ctranslate2.get_cuda_device_count() if gpu else 0
    if gpu and not cuda:
        raise RuntimeError("CTranslate2 sees no CUDA device (its CUDA 12 build on this machine's driver and libraries)")
    t1 = time.perf_counter()
    folder = ct2_folder(cfg["model"])
    convert = time.perf_counter() - t1
    model = WhisperModel(str(folder), device="cuda" if gpu else "cpu", compute_type="float16" if gpu else "float32")
    pipe = BatchedInferencePipeline(model)
    warm = load(cfg["files"][0]["path"])[: 30 * 16000]
    list(pipe.transcribe(warm, language="en", beam_size=1, batch_size=8)[0])
    startup = time.perf_counter() - t
    rows = []
    for batch in cfg["batches"]:
        for f in cfg["files"]:
            if f["kind"] not in cfg["files_for"][str(batch)]:
                continue
            audio = load(f["path"])
            with GpuMemory() as mem:
                t = time.perf_counter()
                segments, _ = pipe.transcribe(audio, language="en", beam_size=1, batch_size=batch)
                text = " ".join(s.text.strip() for s in segments)
                seconds = time.perf_counter() - t
            rows.append(row("fw batched", f, seconds, text, dict(batch=batch, peak_gpu_mb=mem.mb, cuda_devices=cuda,
                                                                 compute_type="float16" if gpu else "float32")))
            print(json.dumps(rows[-1]), flush=True)
    return dict(startup_s=round(startup, 2), conversion_s=round(convert, 2), cuda_devices=cuda, rows=rows)


# insanely-fast-whisper's call, greedy (its figures are; transformers 5's pipeline searches 5 beams unless told)
# and, for a multilingual model, in English, as ours and faster-whisper are told: base left to detect the
# language looped on one word to 446 tokens in the dense file's first window, greedy or with 5 beams.
# An English-only model refuses a language or task.
HF_CALL = dict(chunk_length_s=30, return_timestamps=True)


def hf_generate(pipe) -> dict:
    """The generate arguments of the pipeline's calls (above)."""
    english = dict(language="en", task="transcribe") if pipe.model.generation_config.is_multilingual else {}
    return dict(num_beams=1, **english)


def _hf_pipeline(cfg: dict, model=None):
    import torch
    from transformers import pipeline

    gpu = cfg["device"].startswith("cuda")
    dtype = torch.float16 if gpu else torch.float32
    return pipeline("automatic-speech-recognition", model=model or cfg["model"], dtype=dtype, device=cfg["device"],
                    model_kwargs={"attn_implementation": "sdpa"}), dtype


def child_hf_pipeline(cfg: dict) -> dict:
    """insanely-fast-whisper's call: chunk_length_s 30, a batch, timestamps on, float16 with sdpa."""
    t = time.perf_counter()
    pipe, _ = _hf_pipeline(cfg)
    warm = load(cfg["files"][0]["path"])[: 30 * 16000]
    pipe({"raw": warm, "sampling_rate": 16000}, batch_size=cfg["batch"], generate_kwargs=hf_generate(pipe), **HF_CALL)
    startup = time.perf_counter() - t
    rows = []
    for f in cfg["files"]:
        audio = load(f["path"])
        torch_peak(cfg["device"], reset=True)
        with GpuMemory() as mem:
            t = time.perf_counter()
            out = pipe({"raw": audio, "sampling_rate": 16000}, batch_size=cfg["batch"], generate_kwargs=hf_generate(pipe), **HF_CALL)
            seconds = time.perf_counter() - t
        rows.append(row("hf pipeline", f, seconds, out["text"], dict(batch=cfg["batch"], peak_gpu_mb=mem.mb,
                                                                     torch_peak_mb=torch_peak(cfg["device"]))))
        print(json.dumps(rows[-1]), flush=True)
    return dict(startup_s=round(startup, 2), rows=rows)


def child_hf_assisted(cfg: dict) -> dict:
    """The seed blog's recipe: the pipeline at batch 1 with ``assistant_model`` (here the target's own first
    ``assistant_layers`` decoder layers: the same vocabulary and encoder), beside the same call without it."""
    import copy

    import torch
    from transformers import WhisperForConditionalGeneration

    t = time.perf_counter()
    pipe, dtype = _hf_pipeline(cfg)
    assistant = copy.deepcopy(pipe.model)
    assistant.model.decoder.layers = assistant.model.decoder.layers[: cfg["assistant_layers"]]
    assistant.config.decoder_layers = cfg["assistant_layers"]
    assert isinstance(assistant, WhisperForConditionalGeneration)
    startup = time.perf_counter() - t
    rows = []
    for f in cfg["files"]:
        audio = load(f["path"])
        for label, kw in (("hf batch 1", {}), ("hf assisted", {"assistant_model": assistant})):
            torch_peak(cfg["device"], reset=True)
            with GpuMemory() as mem, torch.inference_mode():
                t = time.perf_counter()
                try:
                    out = pipe({"raw": audio, "sampling_rate": 16000}, batch_size=1, generate_kwargs={**hf_generate(pipe), **kw},
                               **HF_CALL)
                    text, error = out["text"], None
                except Exception as exc:  # transformers' assisted generation refuses some settings: say which
                    text, error = "", f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                seconds = time.perf_counter() - t
            extra = dict(batch=1, peak_gpu_mb=mem.mb, torch_peak_mb=torch_peak(cfg["device"]))
            if kw:
                extra["assistant"] = f"the target's first {cfg['assistant_layers']} decoder layers"
            if error:
                extra["error"] = error
            rows.append(row(label, f, seconds, text, extra))
            print(json.dumps(rows[-1]), flush=True)
    del dtype
    return dict(startup_s=round(startup, 2), rows=rows)


CHILDREN = {"ours": child_ours, "fw batched": child_fw, "hf pipeline": child_hf_pipeline, "hf assisted": child_hf_assisted}


def cublas12_folder() -> str | None:
    """A folder with libcublas.so.12 / libcublasLt.so.12 linked to this machine's cuBLAS (13), for
    CTranslate2's CUDA 12 build; None where there is no cuBLAS to link to."""
    import glob
    import site

    roots = [*site.getsitepackages(), "/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib", "/usr/lib/x86_64-linux-gnu"]
    found = {}
    for lib in ("libcublas", "libcublasLt"):
        for root in roots:
            hits = sorted(glob.glob(f"{root}/**/{lib}.so.1[2-9]*", recursive=True))
            if hits:
                found[lib] = hits[-1]
                break
    if "libcublas" not in found:
        return None
    folder = Path(tempfile.mkdtemp(prefix="cublas12-"))
    for lib, target in found.items():
        if not Path(target).name.startswith(f"{lib}.so.12"):
            (folder / f"{lib}.so.12").symlink_to(target)
    return ":".join([str(folder)] + sorted({str(Path(t).parent) for t in found.values()}))


def rows_in(stdout: str) -> list[dict]:
    """The rows a child printed (one json object a line) before it ended or was stopped."""
    rows = []
    for line in stdout.splitlines():
        try:
            row = json.loads(line) if line.startswith("{") else None
        except ValueError:  # a line cut short by the stop
            continue
        if isinstance(row, dict) and "system" in row:
            rows.append(row)
    return rows


def measured_in(stdout: str) -> dict:
    """What a child measured before its rows (``encoder ms per window: {...}``), for a child that did not finish."""
    prefix = "encoder ms per window: "
    found = [line[len(prefix):] for line in stdout.splitlines() if line.startswith(prefix)]
    return dict(encoder_ms_per_window=json.loads(found[0])) if found else {}


def run_child(system: str, cfg: dict, timeout: float) -> dict:
    """One system in a process of its own; its result, or the error that ended it."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), TQDM_DISABLE="1")
    env[BASELINE_ENV] = str(device_used_bytes() or 0)  # the previous child has exited: its memory is free
    if system == "fw batched":
        env["PYTHONPATH"] = os.pathsep.join([env["PYTHONPATH"], str(STUBS)])
        if cfg["device"].startswith("cuda"):
            libs = cublas12_folder()
            if libs:
                env["LD_LIBRARY_PATH"] = os.pathsep.join([libs, os.environ.get("LD_LIBRARY_PATH", "")])
            cfg = dict(cfg, cublas12=libs)
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(cfg, f)
    t = time.perf_counter()
    try:
        proc = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", system, "--config", f.name],
                              env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return dict(rows=rows_in(out), error=f"stopped after {timeout:.0f} s (the bench's budget)", process_s=round(timeout, 1),
                    **measured_in(out))
    wall = time.perf_counter() - t
    result = next((json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")), None)
    if proc.returncode != 0 or result is None:
        lines = [x for x in proc.stderr.strip().splitlines() if x.strip()]
        err = next((x for x in reversed(lines) if "Error" in x or "error" in x), lines[-1] if lines else f"exit {proc.returncode}")
        return dict(rows=rows_in(proc.stdout), error=err.strip()[:400], process_s=round(wall, 1), **measured_in(proc.stdout))
    result["process_s"] = round(wall, 1)
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", help="a Whisper folder in transformers' layout")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--systems", default=",".join(SYSTEMS))
    ap.add_argument("--batches", default="8,16,32", help="ours' batch sizes (and the default, chosen by memory)")
    ap.add_argument("--fw-batches", default="16,8", help="the first also on the long file")
    ap.add_argument("--hf-batch", type=int, default=16)
    ap.add_argument("--minutes", type=float, default=10.0)
    ap.add_argument("--long-minutes", type=float, default=60.0)
    ap.add_argument("--cut-s", type=float, help="cut every file to its first seconds (a rehearsal)")
    ap.add_argument("--assist-s", type=float, default=120.0, help="seconds of the talk for the batch-1 rows")
    ap.add_argument("--assistant-layers", type=int, default=2)
    ap.add_argument("--budget-s", type=float, default=3600.0, help="the whole bench's seconds, shared out over the systems")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "gpu_longform.json")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        cfg = json.loads(Path(args.config).read_text())
        print("RESULT " + json.dumps(CHILDREN[args.child](cfg)), flush=True)
        return 0
    if not args.model:
        ap.error("--model is required")
    t0 = time.perf_counter()
    import torch

    from bench.common import machine

    gpu = args.device.startswith("cuda")
    dtype = "float16" if gpu else "float32"
    files = long_files(args.minutes, args.long_minutes, args.cut_s)
    short = [f["kind"] for f in files if f["kind"] != "long"]
    every = [f["kind"] for f in files]
    batches = [int(b) for b in args.batches.split(",")]
    base = dict(model=args.model, device=args.device, dtype=dtype, files=files)
    # ours: the default batch (None: what the GPU's memory gives) first, then each batch, plain before auto
    # (auto's rows compare their tokens with plain's); all on the 10-minute files, then the default batch's
    # on the long file
    # "a stream per batch": the fallback's samples of each batch in a stream of their own (the engine's fallback_pool
    # 1), against the default's pooled streams
    configs = ([(d, None) for d in ("none", "none, a stream per batch", "none, no fallback", "auto")]
               + [(d, b) for b in batches for d in ("none", "auto")])
    plans = {
        "ours": dict(base, configs=configs, files_for={f"{d} {b}": every if b is None else short for d, b in configs}),
        "fw batched": dict(base, batches=[int(b) for b in args.fw_batches.split(",")],
                           files_for={b: every if i == 0 else short for i, b in enumerate(args.fw_batches.split(","))}),
        "hf pipeline": dict(base, batch=args.hf_batch),
        "hf assisted": dict(base, assistant_layers=args.assistant_layers, files=[_cut(files[0], args.assist_s)]),
    }
    systems = [s.strip() for s in args.systems.split(",")]
    out = {"machine": machine(torch.get_num_threads()) if not gpu else f"{torch.cuda.get_device_name()}; torch {torch.__version__}",
           "model": args.model, "files": {f["kind"]: dict(audio_s=round(f["seconds"], 1)) for f in files},
           "note": "each system in its own process; startup_s: imports, model loading and a 30 s warm-up; wall_s: one "
                   "file's transcription (VAD, features, encoder, decoder; ours: vad_s, features_s (log-mel on the host), encoder_s, decoder_s (fallback_s of it: the temperature fallback's sampled decodes, fallback_passes of target_passes), the rest host work; decoder_steps, fallback_steps: the batched passes, each counted once whatever its rows; graph_captures, capture_s: the CUDA graphs captured during the file, and their seconds, a part of the decoder's); peak_gpu_mb: the process's GPU memory at "
                   "its highest during the file (NVML, CUDA context included)", "systems": {}, "runs": []}
    for i, system in enumerate(systems):
        left = args.budget_s - (time.perf_counter() - t0)
        share = left * WEIGHTS[system] / sum(WEIGHTS[x] for x in systems[i:])
        if share < 10:
            out["systems"][system] = dict(error="skipped: the bench's time budget was spent")
            continue
        print(f"{system}: up to {share:.0f} s", flush=True)
        res = run_child(system, plans[system], timeout=share)
        out["systems"][system] = {k: v for k, v in res.items() if k != "rows"}
        for r in res.get("rows", []):
            r["name"] = f"{r['system']}, {r['file']}, batch {r.get('batch')}"
            out["runs"].append(r)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
        print(f"{system}: {json.dumps(out['systems'][system])}", flush=True)
    compare(out["runs"])
    args.out.write_text(json.dumps(out, indent=1) + "\n")
    summary(out)
    print(f"wrote {args.out}")
    return 0


def _cut(f: dict, seconds: float) -> dict:
    """``f`` cut to its first ``seconds`` (the batch-1 rows: transformers' assisted generation is slow)."""
    import soundfile as sf

    if f["seconds"] <= seconds:
        return f
    audio = sf.read(f["path"], dtype="float32")[0][: int(seconds * 16000)]
    path = CACHE / f"assist-{int(seconds)}s-{Path(f['path']).name}"
    sf.write(str(path), audio, 16000, subtype="PCM_16")
    words = f["reference"].split()
    return dict(f, path=str(path), seconds=seconds, reference=" ".join(words[: round(len(words) * seconds / f["seconds"])]))


def compare(runs: list[dict]) -> None:
    """Ratios between rows of this run on the same file, above 1 where the row is faster: each of ours
    against the fastest faster-whisper batched and transformers pipeline rows (``speedup_vs_fw_batched``,
    ``speedup_vs_hf_pipeline``), the assisted row against the same call without its assistant (``speedup``)."""
    def fastest(system: str, file: str) -> float | None:
        return min((r["wall_s"] for r in runs if r["system"] == system and r["file"] == file), default=None)

    for r in runs:
        if r["system"].startswith("ours"):
            for peer, key in (("fw batched", "speedup_vs_fw_batched"), ("hf pipeline", "speedup_vs_hf_pipeline")):
                theirs = fastest(peer, r["file"])
                if theirs:
                    r[key] = round(theirs / r["wall_s"], 3)
        elif r["system"] == "hf assisted" and not r.get("error"):
            without = fastest("hf batch 1", r["file"])
            if without:
                r["speedup"] = round(without / r["wall_s"], 3)


def summary(out: dict) -> None:
    print("\naudio seconds per second (WER, peak GPU MB):")
    for r in out["runs"]:
        vs = "".join(f"  {r[k]:.2f}x vs {k.removeprefix('speedup_vs_')}" for k in ("speedup_vs_fw_batched", "speedup_vs_hf_pipeline")
                     if k in r)
        print(f"  {r['name']:42s} {r['audio_s_per_s']:>8} x  WER {r['wer']:.3f}  {r.get('peak_gpu_mb', '')} MB{vs}"
              f"{'  NOT IDENTICAL' if r.get('token_identical') is False else ''}{'  ' + r['error'] if r.get('error') else ''}")
    for name, s in out["systems"].items():
        if s.get("error"):
            print(f"  {name}: {s['error']}")
        if s.get("encoder_ms_per_window"):
            print(f"  {name}: encoder ms per window {s['encoder_ms_per_window']}")


if __name__ == "__main__":
    sys.exit(main())
