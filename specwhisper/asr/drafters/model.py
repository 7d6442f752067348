"""Whisper's drafters for the speculative decoder: n-gram lookup and small Whisper models.

What is model-independent lives in ``specwhisper.speculative`` (the lookup, the token-map idea, the
model-drafter loop); this module adds the Whisper parts: the decoder hooks (``WhisperDrafter``), the
timestamp-aware token map, and the ``DraftRuntime`` adapter over a ``WhisperDecoderRuntime``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.runtime.encoder import EncoderRuntime
from specwhisper.asr.runtime.decoder import KVCache, WhisperDecoderRuntime
from specwhisper.asr.runtime.graphs import graph_pool
from specwhisper.asr.drafters.vocab import CompactVocab, WholeBatchPicks
from specwhisper.asr.decoding.speculative import WhisperDrafter
from specwhisper.speculative import model_drafter
from specwhisper.speculative.draft_steps import Drafts, batch_column
from specwhisper.speculative.token_map import TextRetokenizer
from specwhisper.hardware.device import on_device

__all__ = ["Retokenize", "DraftModel", "WhisperModelDrafter"]


# ------------------------------------------------------------------------------ token maps


class Retokenize:
    """Different vocabularies (e.g. tiny.en drafting for multilingual base).

    Text runs between timestamps are decoded with one tokenizer and re-encoded with the other
    (``specwhisper.speculative.token_map.TextRetokenizer``); timestamps map by their offset from each
    vocabulary's first timestamp; end-of-text maps to end-of-text and is never put into the
    drafter's context (a stray end-of-text there is what made transformers' universal assisted
    generation accept 9% here). A drafted continuation of an open text run is re-encoded together
    with that run, so word pieces split as the target would split them.
    """

    def __init__(self, target_tok, target: SpecialTokens, drafter_tok, drafter: SpecialTokens):
        self.tt, self.ts = target_tok, target
        self.dt, self.ds = drafter_tok, drafter

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

    def to_draft(self, context: list[int]) -> list[int]:
        out: list[int] = []
        for kind, v in self._runs(context, self.ts):
            if kind == "ts":
                out.append(self.ds.timestamp_begin + v)
            else:
                out += TextRetokenizer.encode(self.dt, self.tt.decode(v))
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
            else:
                out += TextRetokenizer.continuation(self.tt, tail if first else [], self.dt.decode(v))
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
    encoder: EncoderRuntime | None = None  # its own encoder, when it does not share the target's


class WhisperDraftRuntime:
    """The ``DraftRuntime`` of a small Whisper decoder: a batched static KV cache (``KVCache``), and the
    Whisper logit rules on every draft step over its compact vocabulary (``CompactVocab``;
    ``head_text_tokens`` None: the whole one). ``whole_batch``: each step picks for every row of the
    batch in one captured call (``WholeBatchPicks``; None: where the runtime replays CUDA graphs)."""

    def __init__(self, model: DraftModel, min_confidence: float = 0.0, head_text_tokens: int | None = None,
                 whole_batch: bool | None = None):
        self.m = model
        self.log_min_conf = math.log(min_confidence) if min_confidence > 0 else float("-inf")
        rt = model.runtime
        self.vocab = CompactVocab(rt, model.special, model.rules, model.special.eot if head_text_tokens is None else head_text_tokens)
        self.whole_batch = rt.graphs is not None if whole_batch is None else whole_batch
        self.picks: dict[int, WholeBatchPicks] = {}  # by the batch's rows: captured once each
        self.pool = graph_pool(rt.device)
        self.cache: KVCache | None = None
        self.last: torch.Tensor | None = None  # per row: the hidden state the next draft token comes from
        self.limit = rt.max_len - 1

    def feed(self, feeds: list[list[int]], starts: list[int]) -> None:
        rt, device = self.m.runtime, self.m.runtime.device
        width = max(len(f) for f in feeds)
        tokens = on_device([(f + [f[-1]] * width)[:width] for f in feeds], device)
        positions = on_device([[min(c + j, self.limit) for j in range(width)] for c in starts], device)
        hidden = rt.hidden(tokens, positions, self.cache)
        self.last = hidden[torch.arange(len(feeds), device=device), on_device([len(f) - 1 for f in feeds], device)]

    def start(self, rows: list[int], prefixes: list[list[int]]) -> None:
        if self.whole_batch:
            b = self.last.shape[0]
            if b not in self.picks:
                self.picks[b] = WholeBatchPicks(self.vocab, self.vocab.logits, torch.zeros_like(self.last),
                                                self.log_min_conf, self.pool)
            self.picks[b].start(rows, prefixes)
        else:
            self.vocab.start(rows, prefixes)

    def pick(self, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        if self.whole_batch:
            return self.picks[self.last.shape[0]].pick(self.last)
        last = self.last if len(rows) == self.last.shape[0] else self.last[on_device(rows, self.last.device)]
        return self.vocab.choose(self.vocab.logits(last), rows, self.log_min_conf)

    def step(self, rows: list[int], tokens: torch.Tensor, positions: list[int]) -> None:
        # every row steps (no cache copies); rows done drafting write a dummy into the slack slot
        rt, b = self.m.runtime, self.last.shape[0]
        pos = [[rt.max_len]] * b
        for r, p in zip(rows, positions):
            pos[r] = [p]
        self.last = rt.hidden(batch_column(tokens, rows, b), on_device(pos, rt.device), self.cache)[:, -1]

    def space(self, length: int) -> int:
        return max(0, self.limit - length)


class WhisperModelDrafter(model_drafter.ModelDrafter, WhisperDrafter):
    """A small Whisper decoder drafting greedily with its own KV cache
    (``specwhisper.speculative.model_drafter``: cache sync by longest common prefix, k greedy steps,
    map back), stopping a row early when its own confidence falls below ``min_confidence``.
    ``head_text_tokens`` restricts its output head to that many text tokens and the special ones
    (the head over 51,865 tokens is the largest matrix of a small decoder; the verify pass keeps
    the output exact whatever the drafter scores). ``target``: the target's special tokens.
    """

    def __init__(self, model: DraftModel, token_map, target: SpecialTokens, name: str = "model",
                 min_confidence: float = 0.0, head_text_tokens: int | None = None):
        super().__init__(WhisperDraftRuntime(model, min_confidence, head_text_tokens), token_map)
        self.m = model
        self.target = target
        self.name = name
        self.enabled = True

    def begin(self, encoder_out, prompt, features) -> None:
        tsp, ds = self.target, self.m.special
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
        self.prefix = ds.prompt(language or "en" if ds.multilingual else None, task, timestamps=True)
        if self.m.shares_encoder:
            enc = encoder_out
        else:
            if features is None:  # openai-whisper's decode of encoder output alone: no drafts, plain decoding
                self.enabled = False
                return
            enc = self.m.encoder.encode_audio_part(features.to(self.m.runtime.model.dtype))
        self.runtime.cache = self.m.runtime.new_cache(enc, slack=1)
        self.reset(enc.shape[0])

    def end(self) -> None:
        # the drafter's own cache of the finished batch
        self.runtime.cache = self.runtime.last = None
        super().end()

    def select(self, keep: list[int]) -> None:
        if not self.enabled or self.runtime.cache is None:
            return
        self.runtime.cache = self.runtime.cache.select(keep)
        super().select(keep)

    @torch.inference_mode()
    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return self.draft(contexts, ks).read()

    @torch.inference_mode()
    def draft(self, contexts: list[list[int]], ks: list[int]) -> Drafts:
        if not self.enabled:
            return Drafts([[] for _ in contexts])
        return super().draft(contexts, ks)
