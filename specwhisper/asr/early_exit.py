"""Early-exit self-speculative drafting (LayerSkip-style): the target's own first k decoder layers
draft, a small trained exit adapter turns their output into next-token guesses, and no second
model is loaded.

Sharing the target's KV cache. The drafter runs layers 0..k-1 of the target on each token it feeds
(the row's pending token, then its own drafts), writing their keys/values into the TARGET's cache at
the tokens' positions, and keeps each token's layer-k residual state. The verify pass then enters the
stack at layer k with those states and computes only layers k..L-1 for them (plus all layers for the
draft tokens the drafter never fed: the last one of a row), so accepted tokens never run their
lower layers twice. The adapter only shapes the drafter's guesses; the residual states handed to
the verify pass are the target's own, so the output is exactly the target's greedy output.

The exit adapter (trained by self-distillation, ``train/exit_adapter.py``; weights in
``specwhisper/asr/adapters/``) reads the layer-k state h and returns the input of the frozen, tied output head:

    x = h + CrossAttn_j(norm(h))    # the target's layer-j cross-attention: its projections, its cached keys/values
    x = x + Up(gelu(Down(norm(x))))                     # low-rank MLP, rank r
    logits = head(norm_out(x))

The cross-attention is the target's own layer-j cross-attention (j >= k, a layer holding alignment
heads; weights and cached encoder keys/values shared, only its input norm trained), so the drafter
reads the audio where the first k layers alone cannot tell where in it the text is: they hold no
alignment head, and without it the first 3 of base's 6 layers agree with the target 3% of the time,
with it about 60%. Drafts are scored over a pruned vocabulary (the first text
tokens plus every special token), read straight from the target's pre-transposed head (no copy),
with Whisper's rules applied in that compact vocabulary.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from specwhisper.asr.decoding import SpecialTokens, WhisperLogitRules, read_choices
from specwhisper.asr.model import KVCache, WhisperDecoderRuntime
from specwhisper.asr.models import default_cache_dir
from specwhisper.asr.speculative import Drafter
from specwhisper.speculative.drafter import common_prefix, early_exit_name
from specwhisper.runtime.device import on_device

ADAPTER_DIR = Path(__file__).resolve().parent / "adapters"
DEFAULT_EXIT_LAYER = 3
HEAD_TEXT_TOKENS = 16000


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


# ------------------------------------------------------------------------------ compact vocabulary


class CompactVocab:
    """The drafter's vocabulary: text tokens [0, n_text) and every special token [eot, V), scored by the
    compact part of the target's own head (``OutputHead``, no second copy of its rows), with Whisper's
    rules in compact ids."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules, n_text: int):
        v = runtime.vocab_size
        self.n_text = n_text = min(n_text, special.eot)
        self.eot = special.eot
        self.ids = torch.cat([torch.arange(n_text), torch.arange(special.eot, v)]).to(runtime.device)
        self._runtime = runtime  # the head is split when the drafter first scores (``logits``)
        self.size = n_text + v - special.eot

        def c(t: int | None) -> int | None:
            return None if t is None else self.compact(t)

        self.special = SpecialTokens(
            eot=c(special.eot), sot=c(special.sot), sot_prev=c(special.sot_prev), sot_lm=c(special.sot_lm),
            no_speech=c(special.no_speech), no_timestamps=c(special.no_timestamps), transcribe=c(special.transcribe),
            translate=c(special.translate), timestamp_begin=c(special.timestamp_begin),
            languages={k: c(t) for k, t in special.languages.items()}, multilingual=special.multilingual)
        sup = [self.compact(t) for t in rules.suppress.nonzero()[:, 0].tolist() if t < n_text or t >= special.eot]
        beg = [self.compact(t) for t in rules.begin.nonzero()[:, 0].tolist() if t < n_text or t >= special.eot]
        self.rules = WhisperLogitRules(self.special, self.size, sup, beg, timestamps=rules.timestamps,
                                       max_initial_timestamp_index=rules.max_initial)

    def compact(self, token: int) -> int:
        """Compact id of a target token; text tokens outside the head map to the last kept text id (the
        rules only ask whether a prefix token is a timestamp and which one)."""
        return token - self.eot + self.n_text if token >= self.eot else min(token, self.n_text - 1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """[N, d] -> [N, compact vocab] float32 logits."""
        return self._runtime.compact_head(self.n_text, self.eot).compact(x).float()

    def select(self, logits: torch.Tensor, prefixes: list[list[int]]) -> tuple[list[int], list[float]]:
        """Greedy target token ids and their (compact) log-probabilities under the rules, read to the host
        at once (ids exact in float32, below 2^24)."""
        toks, lps = self.rules.select(logits, [self._short(p) for p in prefixes])
        return read_choices(self.ids[toks], lps)

    def _short(self, prefix: list[int]) -> list[int]:
        """The part of a prefix the rules read, in compact ids: its last two tokens, after the latest
        timestamp before them (whether the prefix is empty, ends in timestamps, and the last one)."""
        tb = self.eot + (self.special.timestamp_begin - self.n_text)
        stamp = next((t for t in reversed(prefix[:-2]) if t >= tb), None)
        return [self.compact(t) for t in ([] if stamp is None else [stamp]) + prefix[-2:]]


# ------------------------------------------------------------------------------ drafter


class EarlyExitDrafter(Drafter):
    """Drafts with the target's first ``exit_layer`` layers over the target's own KV cache."""

    bonus = False  # the last draft token is checked, not fed: its lower layers run only if it is accepted

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules, exit_layer: int,
                 adapter: ExitAdapter | None = None, head_text_tokens: int = HEAD_TEXT_TOKENS, min_confidence: float = 0.0,
                 name: str | None = None):
        if not 1 <= exit_layer < len(runtime.layers):
            raise ValueError(f"exit layer must be between 1 and {len(runtime.layers) - 1}, got {exit_layer}")
        if adapter is not None and adapter.config.exit_layer != exit_layer:
            raise ValueError(f"adapter was trained for exit layer {adapter.config.exit_layer}, not {exit_layer}")
        self.rt = runtime
        self.k = exit_layer
        self.adapter = adapter.bind(runtime) if adapter is not None else None
        self.vocab = CompactVocab(runtime, special, rules, head_text_tokens)
        self.log_min_conf = float(np.log(min_confidence)) if min_confidence > 0 else float("-inf")
        self.name = name or early_exit_name(exit_layer)
        self.cache: KVCache | None = None
        self.prompt_len = 0
        self._round: dict | None = None

    # the speculative decoder's hooks
    def begin(self, encoder_out, prompt, features) -> None:
        self.prompt_len = len(prompt)
        self._round = None

    def attach(self, cache: KVCache) -> None:
        self.cache = cache
        self._round = None

    def end(self) -> None:
        # the target's cache of the finished batch (48 MB per 30 s row of base) must not outlive it
        self.cache = None
        self._round = None

    def _draft_logits(self, h: torch.Tensor, rows: list[int]) -> torch.Tensor:
        """Compact logits for the layer-k states ``h`` [n, d] of cache rows ``rows``."""
        if self.adapter is None:
            x = self.rt.final_norm(h)
        else:
            j = self.adapter.config.cross_layer
            ck = cv = None
            if j is not None:
                full = self.cache.rows is None and len(rows) == self.cache.batch_size
                idx = slice(None) if full else on_device(self.cache.physical(rows), h.device)
                ck, cv = self.cache.cross_k[j][idx], self.cache.cross_v[j][idx]
            x = self.adapter(h[:, None], ck, cv)[:, 0]
        return self.vocab.logits(x)

    @torch.inference_mode()
    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        b, device = len(contexts), self.rt.device
        starts = [self.prompt_len + len(c) - 1 for c in contexts]  # position of each row's pending token
        drafts: list[list[int]] = [[] for _ in range(b)]
        fed: list[list[int]] = [[] for _ in range(b)]
        states: list[torch.Tensor] = []
        going = [i for i in range(b) if ks[i] > 0]
        while going:
            on = set(going)
            # rows done drafting write a dummy at their next free position: the verify pass overwrites it
            feed = [(drafts[i][-1] if drafts[i] else contexts[i][-1]) if i in on else 0 for i in range(b)]
            tok = on_device([[t] for t in feed], device)
            pos = on_device([[starts[i] + len(fed[i])] for i in range(b)], device)
            h = self.rt.layer_range(self.rt.embed_at(tok, pos), pos, self.cache, 0, self.k)[:, 0]
            states.append(h)
            for i in going:
                fed[i].append(feed[i])
            logits = self._draft_logits(h[on_device(going, device)], going)
            picks, lps = self.vocab.select(logits, [contexts[i] + drafts[i] for i in going])
            nxt = []
            for n, i in enumerate(going):
                drafts[i].append(picks[n])
                if picks[n] != self.vocab.eot and len(drafts[i]) < ks[i] and lps[n] >= self.log_min_conf:
                    nxt.append(i)
            going = nxt
        self._round = dict(starts=starts, fed=fed, states=torch.stack(states, 1) if states else None)
        return drafts

    @torch.inference_mode()
    def verify(self, runtime: WhisperDecoderRuntime, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
               token_rows: list[list[int]] | None = None, starts: list[int] | None = None) -> torch.Tensor:
        """The target's final hidden states for ``tokens`` at ``positions``: layers 0..k-1 only for the
        tokens the drafter did not feed, layers k.. for all."""
        rnd, self._round = self._round, None
        b, w = tokens.shape
        fed = [0] * b
        if rnd is not None and cache is self.cache and len(rnd["fed"]) == b:
            rows = token_rows if token_rows is not None else tokens.tolist()  # host lists: no wait for a GPU
            first = starts if starts is not None else positions[:, 0].tolist()
            for i in range(b):
                # the drafter's states serve the leading tokens it fed, at these very positions
                if first[i] == rnd["starts"][i]:
                    fed[i] = common_prefix(rnd["fed"][i][:w], rows[i])
        m = max(w - f for f in fed)
        if m == w or rnd is None or rnd["states"] is None:
            return runtime.hidden(tokens, positions, cache)
        states = rnd["states"]
        x = states.new_zeros((b, w, states.shape[-1]))
        n = min(states.shape[1], w)
        x[:, :n] = states[:, :n]
        if m > 0:
            cols = on_device([[min(f, w - m) + j for j in range(m)] for f in fed], tokens.device)
            tt, pp = tokens.gather(1, cols), positions.gather(1, cols)
            low = runtime.layer_range(runtime.embed_at(tt, pp), pp, cache, 0, self.k)
            x.scatter_(1, cols[:, :, None].expand(-1, -1, x.shape[-1]), low)
        return runtime.final_norm(runtime.layer_range(x, positions, cache, self.k))


def early_exit_drafter(engine, exit_layer: int | None = None, adapter: str | Path | None = "auto",
                       min_confidence: float | None = None, head_text_tokens: int = HEAD_TEXT_TOKENS) -> EarlyExitDrafter:
    """The early-exit drafter for ``engine``'s target. ``adapter``: "auto" (the committed adapter for this
    model and exit layer, an error when there is none), a path, or None (no adapter: the plain
    first-k layers with the final norm and head, a weak drafter). ``min_confidence``: the draft
    probability below which a row stops drafting (default: the one chosen with the adapter)."""
    model = engine.model_name
    adapters = find_adapters(model_fingerprint(engine.bundle.model)) if adapter == "auto" else {}
    if exit_layer is None:
        have = sorted(adapters)
        exit_layer = DEFAULT_EXIT_LAYER if not have or DEFAULT_EXIT_LAYER in have else have[0]
    n_layers = len(engine.runtime.layers)
    if not 1 <= exit_layer < n_layers:
        raise ValueError(f"early-exit: the exit layer must be between 1 and {n_layers - 1} for model '{model}', got {exit_layer}")
    a = None
    if adapter == "auto":
        if exit_layer not in adapters:
            raise ValueError(f"no early-exit adapter for model '{model}' at layer {exit_layer} "
                             f"(trained: {', '.join(map(str, sorted(adapters))) or 'none'}; "
                             f"python -m train.exit_adapter --model {model})")
        a = load_adapter(adapters[exit_layer])
    elif adapter is not None:
        a = load_adapter(Path(adapter))
    if a is not None:
        cfg = a.config
        if cfg.d_model != engine.runtime.d_model or cfg.n_head != engine.runtime.n_head or \
                (cfg.cross_layer is not None and cfg.cross_layer >= len(engine.runtime.layers)):
            raise ValueError(f"early-exit adapter for '{cfg.model}' does not fit model '{model}'")
    if min_confidence is None:
        min_confidence = a.min_confidence if a is not None else 0.0
    label = f"early-exit:{exit_layer}" + ("" if a is not None else ":raw")
    return EarlyExitDrafter(engine.runtime, engine.special, engine.rules, exit_layer, a, head_text_tokens,
                            min_confidence, name=label)
