"""Multi-token draft heads (Medusa-style, with the pending token and the audio): drafting that costs
no decoder pass at all.

Every verify pass already computes the target's last-layer residual state r_t of the token before the
row's pending token g (the target's own next token, known exactly). K small trained heads read r_t,
the embedding of g and the audio, and each guesses one of the K tokens after g, all in ONE batched
call (a few small matrices, one cross-attention over the cached encoder keys/values of one layer,
and the target's head over a compact vocabulary for K rows). Why: on this CPU a decode step of
base is memory-bound and every drafter that runs decoder layers per draft token (tiny.en, the
early-exit layers) costs 0.3-0.6 of a target step per token, which its acceptance cannot repay;
these heads cost about a tenth of one step per round, whatever K.

Head j (1..K), on the target's layer-L residual state r (pre final norm) and the pending token g:

    x = r + o_j + T(emb(g))                  # per-head offset, shared token projection (trained)
    x = x + CrossAttn_c(norm_c(x))           # the target's layer-c cross-attention: projections and
                                             # cached encoder keys/values shared, not copied
    x = x + Up_j(gelu(Down_j(norm_j(x))))    # per-head low-rank MLP
    logits_j = head(norm_out(x))             # the target's tied head, compact vocabulary

Trained by self-distillation (``train/draft_heads.py``) on the target's own greedy decodes; the
verify pass keeps the output exactly the target's greedy output whatever the heads guess.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from asr.decoding import SpecialTokens, WhisperLogitRules
from asr.early_exit import ADAPTER_DIR, HEAD_TEXT_TOKENS, CompactVocab
from asr.model import KVCache, WhisperDecoderRuntime
from asr.speculative import Drafter


@dataclass(frozen=True)
class HeadsConfig:
    model: str  # the target they were trained for (embedded name)
    heads: int  # K: tokens guessed per round after the pending one
    cross_layer: int  # c: whose cross-attention (and cached keys/values) the heads read
    rank: int  # low-rank MLP width per head
    d_model: int
    n_head: int

    def to_metadata(self) -> dict[str, str]:
        return {k: json.dumps(v) for k, v in self.__dict__.items()}

    @classmethod
    def from_metadata(cls, meta: dict[str, str]) -> HeadsConfig:
        return cls(**{k: json.loads(meta[k]) for k in cls.__dataclass_fields__})


class DraftHeads(torch.nn.Module):
    """K heads over [r_t, g]: see the module doc. ``forward`` returns the head-input states [B, K, d]."""

    def __init__(self, config: HeadsConfig):
        super().__init__()
        self.config = config
        d, k, r = config.d_model, config.heads, config.rank
        self.offsets = torch.nn.Parameter(torch.zeros(k, d))
        self.token = torch.nn.Linear(d, d, bias=False)
        self.cross_norm = torch.nn.LayerNorm(d)
        self.mlp_norm_w = torch.nn.Parameter(torch.ones(k, d))
        self.mlp_norm_b = torch.nn.Parameter(torch.zeros(k, d))
        self.down = torch.nn.Parameter(torch.zeros(k, d, r))
        self.down_b = torch.nn.Parameter(torch.zeros(k, r))
        self.up = torch.nn.Parameter(torch.zeros(k, r, d))
        self.up_b = torch.nn.Parameter(torch.zeros(k, d))
        self.out_norm = torch.nn.LayerNorm(d)
        self._cross: tuple | None = None
        self._embed: torch.Tensor | None = None
        self.min_confidence = 0.0

    def bind(self, runtime: WhisperDecoderRuntime) -> DraftHeads:
        """Use ``runtime``'s token embeddings and layer-c cross-attention projections (shared, frozen)."""
        c = self.config.cross_layer
        lin = runtime.products[c]
        self._cross = (lin.cross_q, lin.cross_out, runtime.layers[c].encoder_attn.scaling)
        self._embed = runtime.embed.detach()  # a plain tensor: not registered as a parameter of the heads
        return self

    @classmethod
    def from_target(cls, config: HeadsConfig, runtime: WhisperDecoderRuntime, seed: int = 0) -> DraftHeads:
        """Before training every head guesses what "the target's layer-c cross-attention once more, then
        its final norm and head" would (all trained updates start at zero, the MLPs' down projections
        small and random)."""
        h = cls(config).bind(runtime)
        g = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            torch.nn.init.zeros_(h.token.weight)
            h.cross_norm.load_state_dict(runtime.layers[config.cross_layer].encoder_attn_layer_norm.state_dict())
            h.down.copy_(torch.randn(h.down.shape, generator=g) * config.d_model ** -0.5)
            h.out_norm.load_state_dict(runtime.final_norm.state_dict())
        return h

    def forward(self, r: torch.Tensor, pending: torch.Tensor, cross_k: torch.Tensor, cross_v: torch.Tensor) -> torch.Tensor:
        """``r`` [B, n, d] residual states, ``pending`` [B, n] token ids, ``cross_k``/``cross_v`` [B, heads,
        frames, head_dim] (the target's layer-c cache of each row) -> [B, n, K, d] inputs of the output
        head (n: positions of one row, 1 when drafting, many when training)."""
        if self._cross is None:
            raise RuntimeError("draft heads not bound to their target (DraftHeads.bind)")
        q_proj, out_proj, scaling = self._cross
        b, n, d = r.shape
        k, heads = self.config.heads, self.config.n_head
        x = (r + self.token(F.embedding(pending, self._embed)))[:, :, None, :] + self.offsets  # [B, n, K, d]
        q = (q_proj(self.cross_norm(x)) * scaling).view(b, n * k, heads, d // heads).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, cross_k, cross_v, scale=1.0)
        x = x + out_proj(a.transpose(1, 2).reshape(b, n, k, d))
        y = F.layer_norm(x, (d,)) * self.mlp_norm_w + self.mlp_norm_b  # per-head norm
        y = torch.einsum("bnkd,kdr->bnkr", y, self.down) + self.down_b
        x = x + torch.einsum("bnkr,krd->bnkd", F.gelu(y), self.up) + self.up_b
        return self.out_norm(x)

    def num_bytes(self) -> int:
        """Memory of the heads' own weights (the bound projections and embeddings are the target's)."""
        return sum(p.numel() * p.element_size() for p in self.parameters())


def heads_path(model: str, folder: Path = ADAPTER_DIR) -> Path:
    return folder / f"{model}-heads.safetensors"


def save_heads(heads: DraftHeads, path: Path, min_confidence: float = 0.0) -> None:
    from safetensors.torch import save_file

    path.parent.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in heads.state_dict().items()}
    save_file(tensors, str(path), metadata={**heads.config.to_metadata(), "min_confidence": json.dumps(min_confidence)})


def load_heads(path: Path) -> DraftHeads:
    from safetensors import safe_open

    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata()
        config = HeadsConfig.from_metadata(meta)
        state = {k: f.get_tensor(k).float() for k in f.keys()}
    h = DraftHeads(config)
    h.load_state_dict(state)
    h.min_confidence = float(json.loads(meta.get("min_confidence", "0")))
    return h.eval().requires_grad_(False)


class HeadsDrafter(Drafter):
    """Drafts K tokens per row per round from the states of the previous verify pass (no decoder pass)."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules,
                 heads: DraftHeads, head_text_tokens: int = HEAD_TEXT_TOKENS, min_confidence: float | None = None):
        self.rt = runtime
        self.heads = heads.bind(runtime)
        self.vocab = CompactVocab(runtime, special, rules, head_text_tokens)
        conf = heads.min_confidence if min_confidence is None else min_confidence
        self.log_min_conf = float(np.log(conf)) if conf > 0 else float("-inf")
        self.name = "heads"
        self.cache: KVCache | None = None
        self._last: torch.Tensor | None = None  # [B, w, d] residual states of the last verify pass
        self._seen: list[int] | None = None  # per row: context length when it was last drafted for

    def begin(self, encoder_out, prompt, features) -> None:
        self._last, self._seen = None, None

    def attach(self, cache: KVCache) -> None:
        self.cache = cache

    def select(self, keep: list[int]) -> None:
        if self._last is not None:
            self._last = self._last[keep]
            self._seen = [self._seen[i] for i in keep]

    def end(self) -> None:
        self.cache, self._last, self._seen = None, None, None

    @torch.inference_mode()
    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        b = len(contexts)
        drafts: list[list[int]] = [[] for _ in range(b)]
        last, seen = self._last, self._seen
        self._seen = [len(c) for c in contexts]
        if last is None or seen is None or len(seen) != b:
            return drafts  # the first round: no verify states yet
        # the state that predicted each row's pending token: the verify column of its last emitted token
        cols = torch.tensor([min(len(c) - s - 1, last.shape[1] - 1) for c, s in zip(contexts, seen)])
        r = last[torch.arange(b), cols]
        rows = [i for i in range(b) if ks[i] > 0]
        if not rows:
            return drafts
        c = self.heads.config.cross_layer
        idx = rows if len(rows) < b else slice(None)
        pending = torch.tensor([contexts[i][-1] for i in rows])
        x = self.heads(r[idx][:, None], pending[:, None], self.cache.cross_k[c][idx], self.cache.cross_v[c][idx])[:, 0]
        n, k = x.shape[0], x.shape[1]  # x: [rows, K, d]
        logits = self.vocab.logits(x.reshape(n * k, -1)).view(n, k, -1)
        for j in range(k):
            going = [m for m, i in enumerate(rows) if len(drafts[i]) == j and j < ks[i]]
            if not going:
                break
            picks, lps = self.vocab.select(logits[going, j], [contexts[rows[m]] + drafts[rows[m]] for m in going])
            for m, t, lp in zip(going, picks, lps.tolist()):
                if lp >= self.log_min_conf:
                    drafts[rows[m]].append(t)
                if t == self.vocab.eot:
                    drafts[rows[m]].append(-1)  # nothing may follow end-of-text: stop this row
        return [[t for t in d if t >= 0] for d in drafts]

    @torch.inference_mode()
    def verify(self, runtime: WhisperDecoderRuntime, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache) -> torch.Tensor:
        x = runtime.layer_range(runtime.embed_at(tokens, positions), positions, cache)
        if self._seen is None:  # the prompt: its last state predicts each row's first token
            self._seen = [1 - tokens.shape[1]] * tokens.shape[0]
        self._last = x
        return runtime.final_norm(x)


def heads_drafter(engine, path: str | Path | None = None, min_confidence: float | None = None) -> HeadsDrafter:
    """The committed draft heads of ``engine``'s target (or those at ``path``)."""
    model = engine.model_name
    p = Path(path) if path is not None else heads_path(model)
    if not p.exists():
        raise ValueError(f"no draft heads for model '{model}' (python -m train.draft_heads --model {model})")
    heads = load_heads(p)
    cfg = heads.config
    if cfg.d_model != engine.runtime.d_model or cfg.n_head != engine.runtime.n_head or cfg.cross_layer >= len(engine.runtime.layers):
        raise ValueError(f"draft heads for '{cfg.model}' do not fit model '{model}'")
    return HeadsDrafter(engine.runtime, engine.special, engine.rules, heads, min_confidence=min_confidence)
