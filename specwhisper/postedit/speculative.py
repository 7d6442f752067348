"""Exact greedy speculative decoding for causal LMs (batch 1, CPU-friendly).

One loop serves every drafter: the drafter proposes ``k`` tokens, the target scores the last committed
token plus the draft in ONE forward pass, the longest prefix of the draft that equals the target's own
argmax is kept together with the target's next token, and the KV cache is cropped back to the
committed length. The output is the target's greedy output by construction (up to float ties between a
one-token and a multi-token forward pass, which the tests check for on real text).

Drafters:
- :class:`CopyDrafter`: copies from the text being edited (prompt lookup, but aligned on normalised
  token text and anchored to a moving pointer, so casing/punctuation edits do not lose the place);
- :class:`ModelDrafter`: a smaller causal LM with the target's tokenizer (own KV cache, rolled back);
- :class:`UniversalDrafter`: a causal LM with a DIFFERENT tokenizer: text is decoded with one tokenizer
  and re-encoded with the other in both directions, both caches keep their longest valid prefix.
The lookahead ``k`` adapts per round (:class:`Lookahead`).
"""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from typing import Callable, Protocol, Sequence

import torch

__all__ = [
    "SpecStats",
    "Lookahead",
    "Drafter",
    "CopyDrafter",
    "ModelDrafter",
    "UniversalDrafter",
    "speculative_generate",
    "truncated_drafter",
    "same_tokenizer",
]


@dataclass
class SpecStats:
    """Counters of one or more speculative decodes."""

    generated_tokens: int = 0
    target_passes: int = 0  # passes of the target (the first one also prefills the uncached prompt)
    drafted_tokens: int = 0
    accepted_tokens: int = 0
    prompt_tokens: int = 0
    prefill_seconds: float = 0.0
    decode_seconds: float = 0.0
    draft_seconds: float = 0.0  # part of decode_seconds spent in the drafter
    stopped: int = 0  # decodes ended early by a stop rule (their output is a prefix of the greedy one)

    @property
    def acceptance_rate(self) -> float:
        return self.accepted_tokens / self.drafted_tokens if self.drafted_tokens else 0.0

    @property
    def tokens_per_target_pass(self) -> float:
        return self.generated_tokens / self.target_passes if self.target_passes else 0.0

    @property
    def seconds(self) -> float:
        return self.prefill_seconds + self.decode_seconds

    @property
    def decode_tokens_per_second(self) -> float:
        return self.generated_tokens / self.decode_seconds if self.decode_seconds else 0.0

    def merge(self, other: SpecStats) -> None:
        for name in SpecStats.__dataclass_fields__:
            setattr(self, name, getattr(self, name) + getattr(other, name))

    def to_dict(self) -> dict:
        d = {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["acceptance_rate"] = round(self.acceptance_rate, 4)
        d["tokens_per_target_pass"] = round(self.tokens_per_target_pass, 4)
        d["seconds"] = round(self.seconds, 4)
        d["decode_tokens_per_second"] = round(self.decode_tokens_per_second, 3)
        return d


@dataclass
class Lookahead:
    """Dynamic draft length: grow after a fully accepted draft, shrink towards what was accepted."""

    k: int = 8
    k_min: int = 1
    k_max: int = 24
    grow: int = 4
    shrink: int = 1

    def update(self, drafted: int, accepted: int) -> None:
        if drafted == 0:
            return
        if accepted == drafted:
            self.k = min(self.k_max, self.k + self.grow)
        else:
            self.k = max(self.k_min, self.k - self.shrink)


class Drafter(Protocol):
    name: str

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        """Up to ``k`` guesses of the tokens that follow ``prompt + generated``."""
        ...


# --------------------------------------------------------------------------------------------- cache


def _crop(cache, length: int) -> None:
    """Drop KV entries past ``length`` (DynamicCache.crop takes a negative count in transformers 5)."""
    extra = cache.get_seq_length() - length
    if extra > 0:
        cache.crop(-extra)


def _new_cache(model):
    from transformers import DynamicCache

    try:
        return DynamicCache(config=model.config)
    except TypeError:  # older signature
        return DynamicCache()


@torch.inference_mode()
def _forward(model, ids: Sequence[int], cache, keep: int = 0) -> torch.Tensor:
    """Logits [len(ids) or keep, vocab] of ``ids`` appended to ``cache`` (which grows by len(ids)).

    ``keep`` > 0 scores only the last ``keep`` positions: the output head is the largest matrix of a
    small LM, and prompt positions need no logits.
    """
    x = torch.tensor([list(ids)], dtype=torch.long, device=model.device)
    kw = {"logits_to_keep": keep} if keep else {}
    out = model(input_ids=x, past_key_values=cache, use_cache=True, **kw)
    return out.logits[0]


def speculative_generate(
    model,
    prompt_ids: Sequence[int],
    drafter: Drafter | None = None,
    max_new_tokens: int = 128,
    eos_token_ids: Sequence[int] = (),
    lookahead: Lookahead | None = None,
    cache=None,
    cache_prefix_len: int = 0,
    stop: Callable[[list[int]], bool] | None = None,
) -> tuple[list[int], SpecStats]:
    """Greedy decode of ``model`` after ``prompt_ids``; identical to plain greedy, faster with a drafter.

    ``cache`` (optional) holds the KV of ``prompt_ids[:cache_prefix_len]`` (a shared instruction prefix);
    it is modified in place. ``stop(ids)`` is asked after each round; True ends the decode there (the
    ids are then a prefix of the greedy output). Returns the generated ids (ending with the EOS id when
    one was produced).
    """
    if len(prompt_ids) == 0:
        raise ValueError("empty prompt")
    stats = SpecStats(prompt_tokens=len(prompt_ids))
    eos = set(int(e) for e in eos_token_ids)
    look = lookahead or Lookahead()
    if not 0 <= cache_prefix_len < len(prompt_ids):
        raise ValueError(f"cache prefix ({cache_prefix_len}) must be shorter than the prompt ({len(prompt_ids)})")
    t0 = time.perf_counter()
    cache = cache if cache is not None else _new_cache(model)
    _crop(cache, cache_prefix_len)
    # The uncached prompt goes in with the first round: one pass both prefills and verifies the first
    # draft (transformers' generate spends a separate prefill pass on it).
    pending = [int(t) for t in prompt_ids[cache_prefix_len:-1]]
    committed = cache_prefix_len  # tokens whose KV is in the cache
    last = int(prompt_ids[-1])  # committed token not yet fed
    t1 = t0
    out: list[int] = []
    while len(out) < max_new_tokens:
        room = max_new_tokens - len(out) - 1  # the target always adds one token of its own
        draft: list[int] = []
        if drafter is not None and room > 0 and look.k > 0:
            td = time.perf_counter()
            draft = [int(t) for t in drafter.propose(out, min(look.k, room))][: min(look.k, room)]
            stats.draft_seconds += time.perf_counter() - td
        logits = _forward(model, pending + [last] + draft, cache, keep=1 + len(draft))
        preds = logits.argmax(-1).tolist()
        n = 0
        while n < len(draft) and draft[n] == preds[n]:
            n += 1
        new = draft[:n] + [preds[n]]
        committed += len(pending) + 1 + n
        if pending:
            pending = []
            t1 = time.perf_counter()
            stats.prefill_seconds = t1 - t0  # the first pass: prompt and first round
        _crop(cache, committed)  # KV of `last` and the accepted draft stay; the rejected tail goes
        stats.target_passes += 1
        stats.drafted_tokens += len(draft)
        stats.accepted_tokens += n
        look.update(len(draft), n)
        stop_at = next((i for i, t in enumerate(new) if t in eos), None)
        if stop_at is not None:
            new = new[: stop_at + 1]
        out.extend(new)
        last = new[-1]
        if stop_at is not None:
            break
        if stop is not None and stop(out):
            stats.stopped += 1
            break
    stats.generated_tokens = len(out)
    stats.decode_seconds = time.perf_counter() - t1
    return out, stats


# ------------------------------------------------------------------------------------------- drafters

_PUNCT_ONLY = re.compile(r"^[\W_]*$")


def _token_key(text: str) -> str:
    """Case- and space-insensitive form of one token's text ('' for punctuation/space only)."""
    t = text.strip().lower()
    return "" if _PUNCT_ONLY.match(t) else re.sub(r"[\W_]+", "", t)


class CopyDrafter:
    """Drafts by copying the source text (post-editing repeats most of its input).

    The source is tokenised once with the target tokenizer. A pointer follows where the output is in
    the source: after each round the last 1-3 generated tokens are matched (on lower-cased text without
    punctuation, so "If"/" if" or an inserted comma keep the place) against the source, choosing the
    occurrence nearest to the pointer; the draft is the next ``k`` source tokens. After the source,
    the drafter proposes the end-of-turn token(s).
    """

    name = "copy"

    def __init__(self, tokenizer, source_text: str, end_ids: Sequence[int] = (), max_ngram: int = 3):
        self.src: list[int] = list(tokenizer.encode(source_text, add_special_tokens=False)) + [int(e) for e in end_ids]
        self.keys = [_token_key(tokenizer.decode([t])) for t in self.src]
        self._key_cache: dict[int, str] = dict(zip(self.src, self.keys))
        self.tokenizer = tokenizer
        self.max_ngram = max_ngram
        self.pointer = 0
        self.synced = True  # the output's last words were found in the source
        self._seen = 0
        self._index: dict[tuple[str, ...], list[int]] = {}
        for n in range(1, max_ngram + 1):
            for j in range(n, len(self.keys) + 1):
                gram = tuple(self.keys[j - n : j])
                if all(gram):
                    self._index.setdefault(gram, []).append(j)

    def _key(self, tok: int) -> str:
        k = self._key_cache.get(tok)
        if k is None:
            k = self._key_cache[tok] = _token_key(self.tokenizer.decode([tok]))
        return k

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        if len(generated) > self._seen:
            self._seen = len(generated)
            keys = [self._key(t) for t in generated[-self.max_ngram * 3 :]]
            keys = [x for x in keys if x]  # punctuation does not move the pointer
            if keys:
                self.synced = False
            for n in range(min(self.max_ngram, len(keys)), 0, -1):
                hits = self._index.get(tuple(keys[-n:]))
                if hits:
                    # nearest occurrence to the pointer; ties go forward
                    self.pointer = min(hits, key=lambda j: (abs(j - self.pointer), -j))
                    self.synced = True
                    break
        if not self.synced:
            # the model is writing words that are not in the source: a draft would be rejected, and on
            # CPU a 2-token verify pass costs ~1.7 single steps, so decode plainly until it copies again
            return []
        return self.src[self.pointer : self.pointer + k]


class _PrunedHead:
    """Greedy next tokens of a causal LM scored over a few vocabulary rows only.

    Why not the model's own head: on this CPU the full output projection is the single largest matrix
    (SmolLM2: 49k x 576, ~11 ms of a ~60 ms step; Gemma 3 270M: 262k x 640, more than its whole body).
    A drafter may guess from a restricted vocabulary (the verify pass keeps the output exact), and a
    post-edit draws nearly all its tokens from the source text. Final-logit soft-capping is monotonic,
    so the argmax needs no other post-processing.
    """

    def __init__(self, model, rows: Sequence[int]):
        self.body = getattr(model, model.base_model_prefix)
        self.rows = torch.tensor(sorted({int(r) for r in rows}), dtype=torch.long)
        self.weight = model.get_output_embeddings().weight.detach()[self.rows].contiguous()

    @torch.inference_mode()
    def next_tokens(self, ids: Sequence[int], cache) -> list[int]:
        """The greedy token after the last of ``ids`` (a one-element list)."""
        x = torch.tensor([list(ids)], dtype=torch.long, device=self.weight.device)
        h = self.body(input_ids=x, past_key_values=cache, use_cache=True).last_hidden_state[0, -1:]
        return self.rows[(h @ self.weight.T).argmax(-1)].tolist()


class ModelDrafter:
    """A smaller causal LM with the target's tokenizer; its KV cache keeps the longest valid prefix.

    ``vocab``: token ids the drafter may propose (None: all); see :class:`_PrunedHead`.
    """

    name = "model"

    def __init__(self, model, prompt_ids: Sequence[int], vocab: Sequence[int] | None = None):
        self.model = model
        self.prompt = [int(t) for t in prompt_ids]
        self.cache = _new_cache(model)
        self.fed: list[int] = []  # ids whose KV is in self.cache
        self.head = _PrunedHead(model, vocab) if vocab is not None else None

    def _next(self, feed: list[int]) -> int:
        if self.head is not None:
            return self.head.next_tokens(feed, self.cache)[-1]
        return int(_forward(self.model, feed, self.cache, keep=1)[-1].argmax())

    def _greedy(self, context: list[int], k: int) -> list[int]:
        c = 0
        lim = min(len(self.fed), len(context) - 1)  # feed at least one token to get logits
        while c < lim and self.fed[c] == context[c]:
            c += 1
        _crop(self.cache, c)
        self.fed = context[:c]
        feed = context[c:]
        out: list[int] = []
        for i in range(k):
            nxt = self._next(feed)
            self.fed += feed
            out.append(nxt)
            feed = [nxt]
        return out

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        return self._greedy(self.prompt + [int(t) for t in generated], k)


class UniversalDrafter:
    """A causal LM with a different tokenizer (universal assisted generation).

    Each round the target's text (prompt + generated) is re-encoded with the drafter's tokenizer, the
    drafter's cache is cropped to the longest common prefix with what it had seen, the drafter decodes
    ``k`` of its own tokens greedily, and their text is re-encoded with the target tokenizer. A draft
    whose re-encoding disagrees with the target's committed tokens is cut at the disagreement.
    """

    name = "universal"

    def __init__(
        self,
        model,
        tokenizer,
        target_tokenizer,
        prompt_ids: Sequence[int],
        add_bos: bool | None = None,
        vocab: Sequence[int] | None = None,
    ):
        self.inner = ModelDrafter(model, [], vocab)  # vocab: ids of the DRAFTER's tokenizer
        self.tok = tokenizer
        self.ttok = target_tokenizer
        self.prompt_text = target_tokenizer.decode(list(prompt_ids), skip_special_tokens=False)
        bos = getattr(tokenizer, "bos_token_id", None)
        if add_bos is None:
            add_bos = bos is not None and bool(getattr(tokenizer, "add_bos_token", True))
        self.prefix = [bos] if (add_bos and bos is not None) else []
        self.drafter_eos = {t for t in [getattr(tokenizer, "eos_token_id", None)] if t is not None}

    def propose(self, generated: Sequence[int], k: int) -> list[int]:
        gen = [int(t) for t in generated]
        gen_text = self.ttok.decode(gen, skip_special_tokens=False)
        ctx = self.prefix + list(self.tok.encode(self.prompt_text + gen_text, add_special_tokens=False))
        # draft a few more drafter tokens than k: tokenizers split text differently
        d_ids = self.inner._greedy(ctx, k)
        cut = next((i for i, t in enumerate(d_ids) if t in self.drafter_eos), None)
        if cut is not None:
            d_ids = d_ids[:cut]
        if not d_ids:
            return []
        d_text = self.tok.decode(d_ids, skip_special_tokens=False)
        full = list(self.ttok.encode(gen_text + d_text, add_special_tokens=False))
        if full[: len(gen)] == gen:
            draft = full[len(gen) :]
        else:  # the boundary re-tokenised differently: encode the new text alone
            draft = list(self.ttok.encode(d_text, add_special_tokens=False))
        return draft[:k]


# ------------------------------------------------------------------------------------------- helpers


def same_tokenizer(a, b) -> bool:
    """True when two tokenizers map text to the same ids (same vocabulary and specials)."""
    if a is b:
        return True
    try:
        return a.get_vocab() == b.get_vocab() and a.all_special_ids == b.all_special_ids
    except Exception:
        return False


def truncated_drafter(target, num_layers: int):
    """A same-tokenizer drafter built from the target's first ``num_layers`` decoder layers.

    Weights are shared with the target (no copy); the final norm and LM head are the target's.
    """
    import copy

    inner = target.model
    n_all = len(inner.layers)
    if not 0 < num_layers < n_all:
        raise ValueError(f"num_layers must be in 1..{n_all - 1}, got {num_layers}")
    def shallow(module):
        # shares parameters and submodules, but not the registries (_modules, hooks, ...): a hook on
        # the target must not fire for the drafter
        new = copy.copy(module)
        for key, value in module.__dict__.items():
            if isinstance(value, dict):
                setattr(new, key, type(value)(value))
        return new

    drafter = shallow(target)
    body = shallow(inner)
    body.layers = torch.nn.ModuleList(list(inner.layers)[:num_layers])
    drafter._modules["model"] = body
    cfg = copy.deepcopy(target.config)
    cfg.num_hidden_layers = num_layers
    if getattr(cfg, "layer_types", None):
        cfg.layer_types = cfg.layer_types[:num_layers]
    drafter.config = cfg
    body.config = cfg
    if getattr(target, "generation_config", None) is not None:  # generate() mutates an assistant's
        drafter.generation_config = copy.deepcopy(target.generation_config)
    return drafter


@dataclass
class DraftSpec:
    """What a drafter string means (see :func:`parse_drafter`)."""

    kind: str  # none | copy | layers | model
    layers: int = 0
    model: str | None = None
    extra: dict = field(default_factory=dict)


def parse_drafter(spec: str | None) -> DraftSpec:
    """'none'/None, 'copy', 'layers:N' (target's first N layers), or a model id/path/alias."""
    if spec is None or spec.strip().lower() in ("", "none", "off", "no"):
        return DraftSpec("none")
    s = spec.strip()
    if s.lower() in ("copy", "prompt-lookup", "ngram"):
        return DraftSpec("copy")
    m = re.fullmatch(r"(?i)layers:(\d+)", s)
    if m:
        return DraftSpec("layers", layers=int(m.group(1)))
    return DraftSpec("model", model=s)
