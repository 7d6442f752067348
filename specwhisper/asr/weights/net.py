"""Whisper's network as plain torch modules, loaded from a Hugging Face folder without transformers'
model code.

Why not ``WhisperForConditionalGeneration``: importing transformers' model code (modeling_utils,
torch._dynamo, torch.distributed.tensor, triton, which it imports whether or not they are used)
cost 211 MB of resident memory and 2.3 s of start-up on this CPU (3.5 s on a loaded one), while
the decoder already runs on ``specwhisper.asr.runtime.decoder.WhisperDecoderRuntime`` and the encoder is nine
lines of its forward. The modules carry transformers' names (``model.encoder.layers.0.self_attn.q_proj``),
so a checkpoint's state dict loads as it is and anything built on a transformers model (a random-weight
test model, a bench's) runs the same. The encoder's forward repeats transformers' operation for
operation (the query scaled before the product, ``scaled_dot_product_attention`` with scale 1), so
its output is bitwise the same (``tests/test_net.py``).

The weights are views of the checkpoint file mapped into memory, as transformers' loader leaves
them: a page becomes resident when first read, and ``specwhisper.hardware.memory`` can hand back the
pages of weights that were only read to be packed."""

from __future__ import annotations

import json
import mmap
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn


class Attention(nn.Module):
    """Multi-head attention with transformers' ``WhisperAttention`` parameters (no bias on the key)."""

    def __init__(self, d_model: int, heads: int):
        super().__init__()
        self.num_heads, self.head_dim = heads, d_model // heads
        self.scaling = self.head_dim**-0.5
        self.k_proj = nn.Linear(d_model, d_model, bias=False)
        self.v_proj = nn.Linear(d_model, d_model)
        self.q_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Unmasked self-attention (the encoder's)."""
        b, n, _ = x.shape
        shape = (b, n, self.num_heads, self.head_dim)
        q = (self.q_proj(x) * self.scaling).view(shape).transpose(1, 2).contiguous()
        k = self.k_proj(x).view(shape).transpose(1, 2).contiguous()
        v = self.v_proj(x).view(shape).transpose(1, 2).contiguous()
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0, scale=1.0, is_causal=False)
        return self.out_proj(out.transpose(1, 2).contiguous().reshape(b, n, -1).contiguous())


def _embedding(n: int, d: int) -> nn.Embedding:
    """An embedding whose weight the checkpoint supplies: no random init (on the meta device, its
    ``normal_`` imports torch._dynamo: 1.7 s)."""
    return nn.Embedding(n, d, _weight=torch.empty(n, d))


class EncoderLayer(nn.Module):
    def __init__(self, d_model: int, heads: int, ffn: int):
        super().__init__()
        self.activation_fn = F.gelu  # Whisper's (transformers' "gelu": the exact, erf form)
        self.self_attn = Attention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor, attention_mask: None = None) -> torch.Tensor:
        x = x + self.self_attn(self.self_attn_layer_norm(x))
        return x + self.fc2(self.activation_fn(self.fc1(self.final_layer_norm(x))))


class DecoderLayer(nn.Module):
    """Weights only: the decoder's forward is ``WhisperDecoderRuntime``'s."""

    def __init__(self, d_model: int, heads: int, ffn: int):
        super().__init__()
        self.activation_fn = F.gelu
        self.self_attn = Attention(d_model, heads)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = Attention(d_model, heads)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.fc1 = nn.Linear(d_model, ffn)
        self.fc2 = nn.Linear(ffn, d_model)
        self.final_layer_norm = nn.LayerNorm(d_model)


@dataclass
class EncoderOutput:
    last_hidden_state: torch.Tensor


class AudioEncoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.conv1 = nn.Conv1d(cfg.num_mel_bins, d, kernel_size=3, padding=1)
        self.conv2 = nn.Conv1d(d, d, kernel_size=3, stride=2, padding=1)
        self.embed_positions = _embedding(cfg.max_source_positions, d)
        self.layers = nn.ModuleList(EncoderLayer(d, cfg.encoder_attention_heads, cfg.encoder_ffn_dim) for _ in range(cfg.encoder_layers))
        self.layer_norm = nn.LayerNorm(d)

    def forward(self, features: torch.Tensor) -> EncoderOutput:
        """``features`` [B, mels, 3000] -> ``last_hidden_state`` [B, 1500, d]."""
        x = F.gelu(self.conv2(F.gelu(self.conv1(features)))).permute(0, 2, 1)
        x = x + self.embed_positions.weight[: x.shape[1]]
        for layer in self.layers:
            x = layer(x)
        return EncoderOutput(self.layer_norm(x))


class TextDecoder(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        d = cfg.d_model
        self.embed_tokens = _embedding(cfg.vocab_size, d)
        self.embed_positions = _embedding(cfg.max_target_positions, d)
        self.layers = nn.ModuleList(DecoderLayer(d, cfg.decoder_attention_heads, cfg.decoder_ffn_dim) for _ in range(cfg.decoder_layers))
        self.layer_norm = nn.LayerNorm(d)


class Body(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.encoder, self.decoder = AudioEncoder(cfg), TextDecoder(cfg)


class WhisperNet(nn.Module):
    """``model.encoder``, ``model.decoder`` and ``proj_out`` (tied to the token embedding), with the
    transformers ``WhisperConfig`` as ``config`` and the ``GenerationConfig`` as ``generation_config``."""

    def __init__(self, config, generation_config=None):
        super().__init__()
        self.config, self.generation_config = config, generation_config
        self.model = Body(config)
        self.proj_out = nn.Linear(config.d_model, config.vocab_size, bias=False)

    @property
    def dtype(self) -> torch.dtype:
        return self.proj_out.weight.dtype

    @property
    def device(self) -> torch.device:
        return self.proj_out.weight.device


class WeightsError(OSError):
    """A folder without readable Whisper weights."""


_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16, "F64": torch.float64,
           "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8, "BOOL": torch.bool}


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors as views of its memory mapping (private: nothing is copied unless
    written). ``safetensors.torch.load_file`` copies every tensor into anonymous memory instead,
    which the kernel cannot take back."""
    with open(path, "rb") as f:
        mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    n = int.from_bytes(mm[:8], "little")
    header = json.loads(mm[8 : 8 + n])
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = _DTYPES.get(info["dtype"])
        if dtype is None:
            raise WeightsError(f"{path.name}: tensor '{name}' has dtype {info['dtype']}, which is not supported")
        start, end = info["data_offsets"]
        count = (end - start) // torch.empty((), dtype=dtype).element_size()
        flat = torch.frombuffer(mm, dtype=dtype, count=count, offset=8 + n + start) if count else torch.empty(0, dtype=dtype)
        out[name] = flat.view(info["shape"])
    return out


# a transformers checkpoint's weights: one file, or an index of shards
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")


def read_weights(folder: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a transformers checkpoint folder: ``model.safetensors`` (or its shards), else
    ``pytorch_model.bin`` (or its shards, loaded memory-mapped)."""
    for index, reader in (("model.safetensors.index.json", read_safetensors),
                          ("pytorch_model.bin.index.json", lambda p: torch.load(p, map_location="cpu", mmap=True, weights_only=True))):
        single = folder / index.removesuffix(".index.json")
        if single.exists():
            return reader(single)
        if (folder / index).exists():
            files = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            return {k: v for f in files for k, v in reader(folder / f).items()}
    raise WeightsError(f"no model.safetensors or pytorch_model.bin in {folder}")


def load_net(folder: Path, config, generation_config, dtype: torch.dtype = torch.float32) -> WhisperNet:
    """The network of a transformers Whisper checkpoint folder, its weights mapped from the file (cast
    to ``dtype`` where they are stored in another)."""
    if config.activation_function != "gelu":
        raise WeightsError(f"{folder}: activation '{config.activation_function}' is not Whisper's (gelu)")
    state = read_weights(folder)
    if not any(k.startswith("model.") for k in state):  # a WhisperModel checkpoint: no prefix, no head
        state = {f"model.{k}": v for k, v in state.items()}
    state.setdefault("proj_out.weight", state.get("model.decoder.embed_tokens.weight"))
    with torch.device("meta"):
        net = WhisperNet(config, generation_config)
    want = net.state_dict()
    missing = [k for k in want if state.get(k) is None]
    if missing:
        raise WeightsError(f"{folder}: not a Whisper checkpoint ({len(missing)} weights missing, e.g. {missing[0]})")
    wrong = next((k for k, v in want.items() if tuple(state[k].shape) != tuple(v.shape)), None)
    if wrong is not None:
        raise WeightsError(f"{folder}: weight {wrong} has shape {tuple(state[wrong].shape)}, its config says {tuple(want[wrong].shape)}")
    tied = state["proj_out.weight"] is state["model.decoder.embed_tokens.weight"]
    cast: dict[int, torch.Tensor] = {}  # each stored tensor cast once: a tied head is one tensor
    for k in want:
        if id(state[k]) not in cast:
            cast[id(state[k])] = state[k].to(dtype)
    net.load_state_dict({k: cast[id(state[k])] for k in want}, assign=True)
    if tied:  # one parameter, as transformers ties it: moved to a device once, not twice
        net.proj_out.weight = net.model.decoder.embed_tokens.weight
    return net.requires_grad_(False).eval()
