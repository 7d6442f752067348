"""Packs what the lent GPU machine lacks into ``.gpu/`` (git-ignored), within what one GPU run takes along.

    .venv/bin/python bench/gpu/pack.py        (or: sh bench/gpu/pack.sh)

The machine (bench/gpu/README.md) has Python 3.12 with torch, transformers, tokenizers, huggingface_hub,
numpy, onnxruntime, pytest and nvidia-ml-py, and no network. One run carries the working tree and the
folders it names, 64 MiB in all. Three files:

- ``site.tar.xz``: our other dependencies and faster-whisper's, unpacked from their cp312 manylinux
  wheels (the versions of requirements.lock): soundfile, cffi, pycparser, soxr, silero-vad (its jit
  model alone: the other seven model files are 11 MB), jiwer, rapidfuzz, faster-whisper, ctranslate2
  (its libraries' debug sections stripped: 150 MB of its 155 are DWARF and symbol tables; 43 MB as a
  wheel, 14 MB here). PyAV (36 MB) stays behind: faster-whisper is handed arrays (bench/gpu/stubs/av).
- ``model.tar.xz``: the embedded tiny.en, its weight matrices rounded to int8 per row (an fp16 scale
  per row; norms, biases and position embeddings fp16): 27 MB. unpack.py makes of it the float16
  folder that every system of bench/gpu_longform.py reads, so all run the very same weights. Base
  does not fit: its fp16 weights are 145 MB, 131 MB compressed (tiny.en's fp16: 68 MB compressed).
  Also base's json files without its weights: the random-weight checkpoints of the tests and the
  benches take base's tokenizer (tests.random_whisper).
- ``eval.tar``: the single-speaker English clips of the eval set with their manifest rows (the long
  files and the batched bench's windows are built from them on the machine).

Prints the size of what a run will take along (working tree + .gpu): it must stay under 64 MiB.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

WHEELS = ("soundfile", "cffi", "pycparser", "soxr", "silero-vad", "jiwer", "RapidFuzz", "faster-whisper", "ctranslate2")
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64")
LIMIT = 64 * 2**20
MODEL = "tiny.en"


def locked(name: str) -> str:
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        if line.lower().startswith(name.lower() + "=="):
            return line.strip()
    raise SystemExit(f"pack: {name} is not in requirements.lock")


def download(cache: Path) -> list[Path]:
    """The cp312 manylinux wheels, fetched once into ``cache``."""
    cache.mkdir(parents=True, exist_ok=True)
    specs = [locked(n) for n in WHEELS]
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:", "--python-version", "3.12",
           "--implementation", "cp", "-d", str(cache), *[a for p in PLATFORMS for a in ("--platform", p)], *specs]
    subprocess.run(cmd, check=True)
    wheels = []
    for spec in specs:
        name, version = spec.split("==")
        hits = [w for w in cache.glob("*.whl") if w.name.lower().startswith(name.lower().replace("-", "_") + "-" + version)]
        if not hits:
            raise SystemExit(f"pack: no cp312 wheel of {spec} in {cache}")
        wheels.append(hits[0])
    return wheels


def pack_site(wheels: list[Path], staging: Path, out: Path) -> None:
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    for w in wheels:
        zipfile.ZipFile(w).extractall(staging)
    data = staging / "silero_vad" / "data"
    for f in data.iterdir():  # the jit model is the one specwhisper.audio.vad loads
        if f.name not in ("silero_vad.jit", "__init__.py"):
            f.unlink()
    for lib in [*(staging / "ctranslate2").glob("*.so"), *(staging / "ctranslate2.libs").glob("*.so*")]:
        subprocess.run(["strip", "--strip-debug", "--strip-unneeded", str(lib)], check=True)
    for cache in staging.rglob("__pycache__"):
        shutil.rmtree(cache)
    subprocess.run(["tar", "cJf", str(out), "-C", str(staging), "."], check=True, env={"XZ_OPT": "-6 -T2", "PATH": "/usr/bin:/bin"})


def pack_model(out: Path) -> dict:
    """tiny.en's weights as int8 rows with fp16 scales, and its json files."""
    import torch
    from safetensors.torch import load_file, save

    from specwhisper.asr.weights.loader import resolve_model_path

    folder = Path(resolve_model_path(MODEL))
    tensors = load_file(str(folder / "model.safetensors"))
    packed = {}
    for name, t in tensors.items():
        if t.ndim >= 2 and "embed_positions" not in name:
            w = t.float().reshape(t.shape[0], -1)
            scale = (w.abs().amax(1).clamp(min=1e-12) / 127).half()
            packed[name + ".q8"] = torch.round(w / scale.float()[:, None]).clamp(-127, 127).to(torch.int8).reshape(t.shape)
            packed[name + ".scale"] = scale
        else:
            packed[name] = t.half()
    files = {"weights.safetensors": save({k: v.contiguous() for k, v in packed.items()})}
    for f in sorted(folder.glob("*.json")):
        files[f.name] = f.read_bytes()
    # base's json files (no weights): tests.random_whisper gives random checkpoints base's tokenizer
    for f in sorted(Path(resolve_model_path("base")).glob("*.json")):
        files[f"base-json/{f.name}"] = f.read_bytes()
    with tarfile.open(out, "w:xz", preset=9) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return {"model": MODEL, "tensors": len(tensors), "params": sum(t.numel() for t in tensors.values())}


def unpack_model(pack: Path, out: Path) -> Path:
    """The float16 folder in transformers' layout that every system reads: int8 rows times their scales."""
    from safetensors.torch import load, save_file

    from specwhisper.asr.weights.loader import CONVERTER_VERSION, default_cache_dir

    out.mkdir(parents=True, exist_ok=True)
    with tarfile.open(pack) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar if m.isfile()}  # in order: xz cannot seek back cheaply
    packed = load(members.pop("weights.safetensors"))
    base = default_cache_dir() / "models" / f"base-ct2conv{CONVERTER_VERSION}"  # where resolve_model_path("base") looks
    for name in [n for n in members if n.startswith("base-json/")]:
        if not (base / "model.safetensors").exists():  # never over a real conversion of base
            base.mkdir(parents=True, exist_ok=True)
            (base / Path(name).name).write_bytes(members[name])
        members.pop(name)
    weights = {}
    for name, t in packed.items():
        if name.endswith(".q8"):
            base = name[: -len(".q8")]
            scale = packed[base + ".scale"].float()
            weights[base] = (t.float().reshape(t.shape[0], -1) * scale[:, None]).reshape(t.shape).half()
        elif not name.endswith(".scale"):
            weights[name] = t
    save_file(weights, str(out / "model.safetensors"), metadata={"format": "pt"})
    for name, data in members.items():
        (out / name).write_bytes(data)
    return out


def check_model(pack: Path, out: Path) -> dict:
    """WER of the embedded tiny.en and of its int8-row copy (the pack's) through our engine on this CPU, on
    bench/longform.py's two 10-minute files: what rounding the weights costs."""
    import tempfile

    from bench.common import machine
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import LONG_KINDS, build_long_file, wer

    folder = unpack_model(pack, Path(tempfile.mkdtemp()) / "tiny.en-q8")
    runs = []
    for kind in LONG_KINDS:
        f = build_long_file(kind, ROOT / "bench" / ".cache")
        audio = load_audio(str(f.path))
        for name, model in ((MODEL, MODEL), (f"{MODEL}, int8 rows", str(folder))):
            res = AsrEngine(model).transcribe(audio, DecodeOptions(language="en"))
            text = " ".join(s.text for s in res.segments)
            runs.append(dict(name=f"{name}, {kind}", file=kind, model=name, wer=round(wer([f.reference], [text]), 4),
                             words=len(text.split()), reference_words=len(f.reference.split())))
            print(runs[-1], flush=True)
    import torch

    result = {"machine": machine(torch.get_num_threads()), "note": "ours, --draft none, greedy, language en, float32 CPU",
              "runs": runs}
    out.write_text(json.dumps(result, indent=1) + "\n")
    return result


def pack_eval(out: Path) -> int:
    from specwhisper.evaluation.transcripts import english_set, eval_dir

    root = eval_dir()
    keep = {i.file for i in english_set(root)}  # the single-speaker English clips with references: 4.8 MB
    with open(root / "MANIFEST.tsv", newline="", encoding="utf-8") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["file"] in keep]
    text = io.StringIO()
    w = csv.DictWriter(text, fieldnames=list(rows[0]), delimiter="\t", lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    data = text.getvalue().encode()
    with tarfile.open(out, "w") as tar:
        info = tarfile.TarInfo("MANIFEST.tsv")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for r in rows:
            tar.add(root / r["file"], arcname=r["file"])
    return len(rows)


def tree_bytes() -> int:
    """What a run sends besides the carried folders: tracked files and untracked ones git does not ignore."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    return sum((ROOT / n.decode()).stat().st_size for n in names if n and (ROOT / n.decode()).is_file())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=ROOT / ".gpu")
    ap.add_argument("--only", help="comma-separated: site, model, eval (default: all)")
    ap.add_argument("--unpack", type=Path, metavar="DIR", help="on the GPU machine: unpack --out's files into DIR "
                    "(DIR/site, DIR/eval, DIR/tiny.en-q8), with Python's own tar and xz")
    ap.add_argument("--unpack-model", type=Path, metavar="MODEL_TAR", help="make the model folder alone")
    ap.add_argument("--to", type=Path, help="with --unpack-model: the folder to make")
    ap.add_argument("--check-model", action="store_true", help="the WER the int8 rows cost, on the 10-minute files "
                    "(bench/results/gpu_pack_model.json)")
    args = ap.parse_args(argv)
    if args.check_model:
        check_model(args.out / "model.tar.xz", ROOT / "bench" / "results" / "gpu_pack_model.json")
        return 0
    if args.unpack_model:
        print(unpack_model(args.unpack_model, args.to))
        return 0
    if args.unpack:
        for name, sub in (("site.tar.xz", "site"), ("eval.tar", "eval")):
            shutil.rmtree(args.unpack / sub, ignore_errors=True)
            with tarfile.open(args.out / name) as tar:
                tar.extractall(args.unpack / sub, filter="tar")
        print(unpack_model(args.out / "model.tar.xz", args.unpack / f"{MODEL}-q8"))
        return 0
    parts = set((args.only or "site,model,eval").split(","))
    args.out.mkdir(parents=True, exist_ok=True)
    made = {}
    if "site" in parts:
        pack_site(download(ROOT / "bench" / ".cache" / "gpu-wheels"), ROOT / "bench" / ".cache" / "gpu-site", args.out / "site.tar.xz")
        made["wheels"] = [locked(n) for n in WHEELS]
    if "model" in parts:
        made["model"] = pack_model(args.out / "model.tar.xz")
    if "eval" in parts:
        made["eval_files"] = pack_eval(args.out / "eval.tar")
    sizes = {f.name: f.stat().st_size for f in sorted(args.out.iterdir()) if f.is_file() and f.name != "pack.json"}
    tree = tree_bytes()
    total = tree + sum(sizes.values())
    (args.out / "pack.json").write_text(json.dumps(dict(made, sizes=sizes, tree_bytes=tree, total_bytes=total), indent=1) + "\n")
    for name, n in sizes.items():
        print(f"  .gpu/{name:16s} {n / 2**20:6.1f} MiB")
    print(f"  working tree       {tree / 2**20:6.1f} MiB\n  a run takes along  {total / 2**20:6.1f} MiB of 64")
    if total > LIMIT:
        print("pack: over the 64 MiB a GPU run takes along", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
