"""The early-exit drafter's trained exit adapters: the adapter network, its file format (safetensors
with its config as metadata), and finding the adapters trained for a target (by the fingerprint of its
weights) in the package's ``adapters/`` folder and the user's cache."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime
from specwhisper.asr.weights.loader import default_cache_dir

ADAPTER_DIR = Path(__file__).resolve().parent / "adapters"


@dataclass(frozen=True)
class AdapterConfig:
    model: str  # the name of the target it was trained for (for people; lookup is by ``fingerprint``)
    exit_layer: int  # k: the drafter runs layers 0..k-1
    cross_layer: int | None  # j: whose cached encoder keys/values the adapter attends to (None: no cross-attention)
    rank: int  # low-rank MLP width (0: none)
    d_model: int
    n_head: int
    fingerprint: str = ""  # model_fingerprint of the target

    def to_metadata(self) -> dict[str, str]:
        return {k: json.dumps(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> AdapterConfig:
        return cls(**{k: json.loads(meta[k]) for k in cls.__dataclass_fields__ if k in meta})


def model_fingerprint(model: torch.nn.Module) -> str:
    """The identity adapters are found by: a hash of the target's shape and of a few of its weights,
    whatever its name or path (an embedded name, a hub id, a folder, a copy of either). Only the
    signs of the weights are hashed, so the same checkpoint loaded in float32, float16 or bfloat16
    is the same target (rounding a weight moves it, never across zero but below fp16's 3e-8; hashing
    fp16-rounded values, as before, told a bfloat16 load of base from a float32 one)."""
    cfg = model.config
    dec, enc = model.model.decoder, model.model.encoder
    h = hashlib.sha256(json.dumps([cfg.d_model, cfg.decoder_layers, cfg.encoder_layers, cfg.vocab_size,
                                   cfg.num_mel_bins]).encode())
    for t in (dec.embed_positions.weight[:2], dec.layer_norm.weight, dec.layer_norm.bias,
              dec.layers[-1].final_layer_norm.bias, enc.layer_norm.bias, dec.embed_tokens.weight[:2]):
        h.update((t.detach().float().cpu() > 0).numpy().tobytes())
    return h.hexdigest()[:16]


def user_adapter_dir() -> Path:
    """Where ``python -m train.exit_adapter`` puts adapters of targets other than the embedded ones."""
    return default_cache_dir() / "adapters"


class ExitAdapter(torch.nn.Module):
    """Maps the layer-k residual state to the input of the tied output head (see the module doc).

    Its cross-attention is the target's own layer-j cross-attention (query and output projections
    bound from the target with ``bind``, not copied; keys/values read from the target's cache) behind
    a trained input norm; the trained weights are the norms and the low-rank MLP."""

    def __init__(self, config: AdapterConfig):
        super().__init__()
        self.config = config
        d = config.d_model
        if config.cross_layer is not None:
            self.cross_norm = torch.nn.LayerNorm(d)
        if config.rank:
            self.mlp_norm = torch.nn.LayerNorm(d)
            self.down = torch.nn.Linear(d, config.rank)
            self.up = torch.nn.Linear(config.rank, d)
        self.out_norm = torch.nn.LayerNorm(d)
        self._cross: tuple | None = None  # the target's (q_proj, out_proj, scaling) of layer j
        self.min_confidence = 0.0  # drafting stops below this probability (chosen at training, stored with the weights)

    def bind(self, runtime: WhisperDecoderRuntime) -> ExitAdapter:
        """Use ``runtime``'s layer-j cross-attention projections (shared, frozen), on its device and dtype."""
        self.to(device=runtime.device, dtype=runtime.embed.dtype)
        j = self.config.cross_layer
        if j is not None:
            lin = runtime.products[j]
            self._cross = (lin.cross_q, lin.cross_out, runtime.layers[j].encoder_attn.scaling)
        return self

    @classmethod
    def from_target(cls, config: AdapterConfig, runtime: WhisperDecoderRuntime) -> ExitAdapter:
        """Before any training it equals "layers 0..k-1, then layer j's cross-attention, then the final
        norm and head" (MLP output zero)."""
        a = cls(config).bind(runtime)
        with torch.no_grad():
            if config.cross_layer is not None:
                a.cross_norm.load_state_dict(runtime.layers[config.cross_layer].encoder_attn_layer_norm.state_dict())
            if config.rank:
                torch.nn.init.zeros_(a.up.weight)
                torch.nn.init.zeros_(a.up.bias)
            a.out_norm.load_state_dict(runtime.final_norm.state_dict())
        return a

    def forward(self, h: torch.Tensor, cross_k: torch.Tensor | None = None, cross_v: torch.Tensor | None = None) -> torch.Tensor:
        """``h`` [B, n, d]; ``cross_k``/``cross_v`` [B, heads, frames, head_dim] (the target's layer-j cache)."""
        x = h
        if self.config.cross_layer is not None:
            if self._cross is None:
                raise RuntimeError("exit adapter not bound to its target (ExitAdapter.bind)")
            q_proj, out_proj, scaling = self._cross
            b, n, d = x.shape
            heads = self.config.n_head
            q = (q_proj(self.cross_norm(x)) * scaling).view(b, n, heads, d // heads).transpose(1, 2)
            a = F.scaled_dot_product_attention(q, cross_k, cross_v, scale=1.0)
            x = x + out_proj(a.transpose(1, 2).reshape(b, n, d))
        if self.config.rank:
            x = x + self.up(F.gelu(self.down(self.mlp_norm(x))))
        return self.out_norm(x)

    def num_bytes(self) -> int:
        """Memory of the adapter's own weights (the bound projections belong to the target)."""
        return sum(p.numel() * p.element_size() for p in self.parameters())


def adapter_label(model: str) -> str:
    """A file-name-safe label for ``model`` (a name, hub id or folder: its last part)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", Path(model.rstrip("/\\")).name or "model")


def adapter_path(model: str, exit_layer: int, folder: Path = ADAPTER_DIR) -> Path:
    """The file an adapter of ``model`` at ``exit_layer`` is saved to (found later by its metadata)."""
    return folder / f"{adapter_label(model)}-k{exit_layer}.safetensors"


def save_adapter(adapter: ExitAdapter, path: Path, min_confidence: float = 0.0) -> None:
    """fp16 weights (the adapter computes in fp32) and its config; ``min_confidence``: the draft
    probability below which a row stops drafting, chosen with the adapter."""
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in adapter.state_dict().items()}
    save_file(tensors, str(path), metadata={**adapter.config.to_metadata(), "min_confidence": json.dumps(min_confidence)})


def load_adapter(path: Path) -> ExitAdapter:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        config = AdapterConfig.from_metadata(meta)
        state = {k: f.get_tensor(k).float() for k in f.keys()}
    a = ExitAdapter(config)
    a.load_state_dict(state)
    a.min_confidence = float(json.loads(meta.get("min_confidence", "0")))
    return a.eval().requires_grad_(False)


def find_adapters(fingerprint: str, folders: list[Path] | None = None) -> dict[int, Path]:
    """exit layer -> adapter file, for the target whose ``model_fingerprint`` is ``fingerprint``, from
    the adapters shipped with the package and the user's own (``user_adapter_dir``); read from the
    files' metadata, not their names. The first folder wins for a layer found in both."""
    from safetensors import safe_open

    found: dict[int, Path] = {}
    for folder in folders if folders is not None else [ADAPTER_DIR, user_adapter_dir()]:
        for path in sorted(folder.glob("*.safetensors")) if folder.is_dir() else []:
            try:
                with safe_open(str(path), framework="pt") as f:
                    meta = f.metadata() or {}
            except Exception:  # not an adapter file (or damaged): not ours to judge here
                continue
            if meta.get("fingerprint") and json.loads(meta["fingerprint"]) == fingerprint:
                found.setdefault(int(json.loads(meta["exit_layer"])), path)
    return found


def available_exit_layers(fingerprint: str, folders: list[Path] | None = None) -> list[int]:
    return sorted(find_adapters(fingerprint, folders))
