"""Drafters for the speculative decoder: n-gram lookup and small Whisper models.

A drafter only proposes; the target verifies every token, so a drafter can be as crude as it
likes without changing the output: only speed depends on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from specwhisper.asr.decoding import SpecialTokens, WhisperLogitRules, read_choices
from specwhisper.asr.model import KVCache, OutputHead, WhisperDecoderRuntime
from specwhisper.asr.speculative import Drafter


class NgramDrafter(Drafter):
    """Prompt lookup: find the latest earlier occurrence of the row's last n tokens (n = max..min)
    in its own tokens or in the other rows of the batch (neighbouring chunks of the same audio),
    and propose what followed it. Costs no model pass."""

    name = "ngram"

    def __init__(self, max_ngram: int = 3, min_ngram: int = 1):
        self.max_ngram = max_ngram
        self.min_ngram = min_ngram

    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return [self._lookup(i, contexts, k) if k > 0 else [] for i, k in enumerate(ks)]

    def _lookup(self, row: int, contexts: list[list[int]], k: int) -> list[int]:
        ctx = contexts[row]
        pools = [ctx] + [c for j, c in enumerate(contexts) if j != row]
        for n in range(min(self.max_ngram, len(ctx)), self.min_ngram - 1, -1):
            key = ctx[-n:]
            for pool in pools:
                own = pool is ctx
                last_start = len(pool) - n - (1 if own else 0)
                for s in range(last_start, -1, -1):
                    if pool[s : s + n] == key:
                        cont = pool[s + n : s + n + k]
                        if cont:
                            return cont
        return []


# ------------------------------------------------------------------------------ token maps


class SameVocab:
    """The drafter shares the target's tokenizer: ids pass through unchanged."""

    def __init__(self, target: SpecialTokens):
        self.target = target

    def to_draft(self, context: list[int]) -> list[int]:
        return context

    def to_target(self, context: list[int], draft: list[int]) -> list[int]:
        return draft


class Retokenize:
    """Different vocabularies (e.g. tiny.en drafting for multilingual base).

    Text runs between timestamps are decoded with one tokenizer and re-encoded with the other;
    timestamps map by their offset from each vocabulary's first timestamp; end-of-text maps to
    end-of-text and is never put into the drafter's context (a stray end-of-text there is what
    made transformers' universal assisted generation accept 9% here). A drafted continuation of
    an open text run is re-encoded together with that run, so word pieces split as the target
    would split them.
    """

    def __init__(self, target_tok, target: SpecialTokens, drafter_tok, drafter: SpecialTokens):
        self.tt, self.ts = target_tok, target
        self.dt, self.ds = drafter_tok, drafter
        self.target = target

    def _runs(self, tokens: list[int], sp: SpecialTokens):
        """Split into ('text', [ids]) and ('ts', offset) items."""
        out, text = [], []
        for t in tokens:
            if t >= sp.timestamp_begin:
                if text:
                    out.append(("text", text))
                    text = []
                out.append(("ts", t - sp.timestamp_begin))
            elif t < sp.eot:
                text.append(t)
        if text:
            out.append(("text", text))
        return out

    def _encode(self, tokenizer, text: str) -> list[int]:
        return tokenizer.encode(text, add_special_tokens=False)

    def to_draft(self, context: list[int]) -> list[int]:
        out: list[int] = []
        for kind, v in self._runs(context, self.ts):
            if kind == "ts":
                out.append(self.ds.timestamp_begin + v)
            else:
                out += self._encode(self.dt, self.tt.decode(v))
        return out

    def to_target(self, context: list[int], draft: list[int]) -> list[int]:
        out: list[int] = []
        # the context's open text run (after its last timestamp), continued by the draft's first text
        tail: list[int] = []
        for t in reversed(context):
            if t >= self.ts.timestamp_begin:
                break
            tail.insert(0, t)
        first = True
        for kind, v in self._runs(draft, self.ds):
            if kind == "ts":
                out.append(self.ts.timestamp_begin + v)
                first = False
                continue
            text = self.dt.decode(v)
            if first and tail:
                joined = self._encode(self.tt, self.tt.decode(tail) + text)
                if joined[: len(tail)] == tail:
                    out += joined[len(tail) :]
                    first = False
                    continue
            out += self._encode(self.tt, text)
            first = False
        if draft and draft[-1] == self.ds.eot:
            out.append(self.ts.eot)
        return out


# ------------------------------------------------------------------------------ model drafter


@dataclass
class DraftModel:
    """What a model drafter needs: its runtime, special tokens, rules, and how to encode."""

    runtime: WhisperDecoderRuntime
    special: SpecialTokens
    rules: WhisperLogitRules
    tokenizer: object
    shares_encoder: bool  # True: the target's encoder output is reused as is


class ModelDrafter(Drafter):
    """A small Whisper decoder drafting greedily with its own KV cache.

    Every round it syncs its cache with the row's accepted tokens (longest common prefix, then it
    feeds the rest in one batched pass) and drafts up to k tokens, stopping a row early when its
    own confidence falls below ``min_confidence``. ``head_text_tokens`` restricts its output head to
    that many text tokens and the special ones (the head over 51,865 tokens is the largest matrix of
    a small decoder; the verify pass keeps the output exact whatever the drafter scores).
    """

    def __init__(self, model: DraftModel, token_map, name: str = "model", min_confidence: float = 0.0,
                 head_text_tokens: int | None = None):
        self.m = model
        self.map = token_map
        self.name = name
        self.min_confidence = min_confidence
        self.head: OutputHead | None = None
        if head_text_tokens is not None:
            rt, eot = model.runtime, model.special.eot
            self.head_ids = torch.cat([torch.arange(head_text_tokens), torch.arange(eot, rt.vocab_size)]).to(rt.device)
            self.head = rt.compact_head(head_text_tokens, eot)
        self.cache: KVCache | None = None
        self.cached: list[list[int]] = []
        self.prompt: list[int] = []
        self.enabled = True

    def begin(self, encoder_out, prompt, features) -> None:
        tsp, ds = self.map.target, self.m.special
        by_id = {v: k for k, v in tsp.languages.items()}
        language = next((by_id[t] for t in prompt if t in by_id), None)
        task = "translate" if tsp.multilingual and tsp.translate in prompt else "transcribe"
        # an English-only drafter cannot help with other languages or translation: no drafts
        self.enabled = ds.multilingual or (language in (None, "en") and task == "transcribe")
        if not self.enabled:
            return
        if ds.multilingual and (language or "en") not in ds.languages:
            self.enabled = False
            return
        self.prompt = ds.prompt(language or "en" if ds.multilingual else None, task, timestamps=True)
        if self.m.shares_encoder:
            enc = encoder_out
        else:
            if features is None:
                raise ValueError(f"drafter {self.name} needs the input features (it has its own encoder)")
            enc = self.m.runtime.encode_audio_part(features.to(self.m.runtime.model.dtype))
        self.cache = self.m.runtime.new_cache(enc, slack=1)
        self.cached = [[] for _ in range(enc.shape[0])]
        self.lengths = [0] * enc.shape[0]

    def end(self) -> None:
        self.cache = None  # the drafter's own cache of the finished batch
        self.cached, self.lengths = [], []

    def select(self, keep: list[int]) -> None:
        if not self.enabled or self.cache is None:
            return
        self.cache = self.cache.select(keep)
        self.cached = [self.cached[i] for i in keep]
        self.lengths = [self.lengths[i] for i in keep]

    def _logits(self, hidden: torch.Tensor) -> torch.Tensor:
        if self.head is None:
            return self.m.runtime.logits(hidden).float()
        full = hidden.new_full((hidden.shape[0], self.m.runtime.vocab_size), float("-inf"), dtype=torch.float32)
        full[:, self.head_ids] = self.head.compact(hidden).float()
        return full

    @torch.inference_mode()
    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        if not self.enabled:
            return [[] for _ in contexts]
        rt = self.m.runtime
        seqs = [self.prompt + self.map.to_draft(c) for c in contexts]
        # feed what the cache lacks (it may have to roll back: rejected drafts, retokenized text)
        feeds, starts = [], []
        for i, s in enumerate(seqs):
            c = _common_prefix(self.cached[i][: self.lengths[i]], s)
            c = min(c, len(s) - 1)  # always feed at least the last token: its logits start the draft
            feeds.append(s[c:])
            starts.append(c)
        width = max(len(f) for f in feeds)
        limit = rt.max_len - 1
        device = rt.device
        tokens = torch.tensor([(f + [f[-1]] * width)[:width] for f in feeds], device=device)
        positions = torch.tensor([[min(c + j, limit) for j in range(width)] for c in starts], device=device)
        hidden = rt.hidden(tokens, positions, self.cache)
        last = hidden[torch.arange(len(seqs), device=device), torch.tensor([len(f) - 1 for f in feeds], device=device)]
        for i, s in enumerate(seqs):
            self.cached[i] = list(s)
            self.lengths[i] = len(s)

        drafts: list[list[int]] = [[] for _ in seqs]
        live = [i for i, k in enumerate(ks) if k > 0 and len(seqs[i]) < limit]
        while live:
            prefixes = [seqs[i][len(self.prompt) :] + drafts[i] for i in live]
            # the draft step's one host read
            toks, lps = read_choices(*self.m.rules.select(self._logits(last[torch.tensor(live, device=device)]), prefixes))
            nxt = []
            for j, i in enumerate(live):
                t = toks[j]
                drafts[i].append(t)
                confident = lps[j] >= _log(self.min_confidence)
                if t != self.m.special.eot and len(drafts[i]) < ks[i] and confident \
                        and len(seqs[i]) + len(drafts[i]) < limit:
                    nxt.append(i)
            if not nxt:
                break
            # every row steps (no cache copies); rows done drafting write a dummy into the slack slot
            going = set(nxt)
            tok = torch.tensor([[drafts[i][-1] if i in going else 0] for i in range(len(seqs))], device=device)
            pos = torch.tensor([[len(seqs[i]) + len(drafts[i]) - 1 if i in going else rt.max_len] for i in range(len(seqs))],
                               device=device)
            last = rt.hidden(tok, pos, self.cache)[:, -1]
            for i in nxt:
                self.cached[i].append(drafts[i][-1])
                self.lengths[i] += 1
            live = nxt
        return [self.map.to_target(c, d) if d else [] for c, d in zip(contexts, drafts)]


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for i in range(n):
        if a[i] != b[i]:
            return i
    return n


def _log(p: float) -> float:
    import math

    return math.log(p) if p > 0 else float("-inf")
