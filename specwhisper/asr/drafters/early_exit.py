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
``specwhisper/asr/drafters/adapters/``) reads the layer-k state h and returns the input of the frozen, tied output head:

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

from collections import OrderedDict
from pathlib import Path

import numpy as np
import torch

from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.runtime.decoder import KVCache, WhisperDecoderRuntime
from specwhisper.asr.runtime.graphs import graph_pool
from specwhisper.asr.drafters.exit_adapters import ExitAdapter, find_adapters, load_adapter, model_fingerprint
from specwhisper.asr.decoding.speculative import WhisperDrafter
from specwhisper.asr.drafters.vocab import HEAD_TEXT_TOKENS, CompactVocab, WholeBatchPicks
from specwhisper.speculative.draft_steps import DraftSteps, StepDrafts, batch_column
from specwhisper.speculative.drafter import common_prefix, early_exit_name
from specwhisper.hardware.device import on_device

DEFAULT_EXIT_LAYER = 3

# ------------------------------------------------------------------------------ drafter


class EarlyExitDrafter(WhisperDrafter):
    """Drafts with the target's first ``exit_layer`` layers over the target's own KV cache."""

    bonus = False  # the last draft token is checked, not fed: its lower layers run only if it is accepted
    drafts_by_passes = True
    watch_stops = True  # learn of ended rows while drafting (``DraftSteps``)

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
        # each step picks for every row of the batch in one captured call (``WholeBatchPicks``), where
        # the runtime replays CUDA graphs; one per cache (its cross-attention K/V), the latest few kept
        self.whole_batch = runtime.graphs is not None
        self.picks: OrderedDict[tuple, WholeBatchPicks] = OrderedDict()
        self.pool = graph_pool(runtime.device)

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
        j = None if self.adapter is None else self.adapter.config.cross_layer
        if j is None:
            return self._scores(h, None, None)
        full = self.cache.rows is None and len(rows) == self.cache.batch_size
        idx = slice(None) if full else on_device(self.cache.physical(rows), h.device)
        return self._scores(h, self.cache.cross_k[j][idx], self.cache.cross_v[j][idx])

    def _scores(self, h: torch.Tensor, ck: torch.Tensor | None, cv: torch.Tensor | None) -> torch.Tensor:
        """Compact logits for layer-k states ``h`` [n, d] whose rows' cross-attention K/V of the adapter's
        layer are ``ck``, ``cv``."""
        x = self.rt.final_norm(h) if self.adapter is None else self.adapter(h[:, None], ck, cv)[:, 0]
        return self.vocab.logits(x)

    def _cross_kv(self) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """The adapter's layer's cross-attention K/V of every physical row of the current cache."""
        j = None if self.adapter is None else self.adapter.config.cross_layer
        return (None, None) if j is None else (self.cache.cross_k[j], self.cache.cross_v[j])

    def _whole_batch_picks(self, h: torch.Tensor) -> WholeBatchPicks:
        """The captured picks for every physical row of the current cache (its rows that ended too). A
        capture reads the cross-attention K/V at the addresses it was made with: they key it (as
        ``PassGraphs``), and it holds no reference to them (a cache of large-v3's 16 rows holds 2 GB)."""
        ck, cv = self._cross_kv()
        rows = self.cache.k.shape[1]
        key = (rows, h.dtype) + (() if ck is None else (ck.data_ptr(), tuple(ck.shape), cv.data_ptr()))
        picks = self.picks.pop(key, None)
        if picks is None:
            states = h.new_zeros((rows, h.shape[-1]))
            picks = WholeBatchPicks(self.vocab, lambda x: self._scores(x, *self._cross_kv()), states, self.log_min_conf,
                                    self.pool)
        self.picks[key] = picks
        while len(self.picks) > 4:
            self.picks.popitem(last=False)
        return picks

    def start(self, rows: list[int], contexts: list[list[int]], h: torch.Tensor) -> None:
        """A round's drafting ``rows`` and their contexts (``CompactVocab.start``); ``h``: a layer-k state
        (its dtype and device)."""
        if self.whole_batch:
            phys = self.cache.physical()
            self._whole_batch_picks(h).start([phys[r] for r in rows], contexts)
        else:
            self.vocab.start(rows, contexts)

    def pick(self, h: torch.Tensor, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """From the layer-k states ``h`` [rows of the batch, d], the greedy draft token (a target id,
        device [n]) of each of ``rows`` (the drafting rows, shrinking within a round) and whether that
        row's draft ends with it; with ``whole_batch``, both for every row of the batch."""
        if not self.whole_batch:
            if len(rows) < h.shape[0]:
                h = h[on_device(rows, h.device)]
            return self.vocab.choose(self._draft_logits(h, rows), rows, self.log_min_conf)
        picks, phys = self._whole_batch_picks(h), self.cache.physical()
        if phys == list(range(picks.rows)):
            return picks.pick(h)
        idx = on_device(phys, h.device)
        picks.h[idx] = h
        ids, ends = picks.pick()
        return ids[idx], ends[idx]

    @torch.inference_mode()
    def propose(self, contexts: list[list[int]], ks: list[int]) -> list[list[int]]:
        return self.draft(contexts, ks).read()

    @torch.inference_mode()
    def draft(self, contexts: list[list[int]], ks: list[int]) -> StepDrafts:
        b, device = len(contexts), self.rt.device
        starts = [self.prompt_len + len(c) - 1 for c in contexts]  # position of each row's pending token
        steps = DraftSteps([max(0, k) for k in ks], self.watch_stops)
        going = steps.first()
        n_fed = [0] * b
        states: list[torch.Tensor] = []
        if going:
            tok = on_device([[c[-1]] for c in contexts], device)  # each row's pending token
        while going:
            # rows done drafting write a dummy at their next free position: the verify pass overwrites it
            pos = on_device([[starts[i] + n_fed[i]] for i in range(b)], device)
            h = self.rt.layer_range(self.rt.embed_at(tok, pos), pos, self.cache, 0, self.k)[:, 0]
            if not states:
                self.start(going, [contexts[i] for i in going], h)
            states.append(h)
            for i in going:
                n_fed[i] += 1
            ids, ends = self.pick(h, going)
            go = steps.add(going, ids, ends)
            if go:
                kept = ids if len(go) == len(going) or ids.shape[0] == b else ids[on_device(go, device)]
                going = [going[j] for j in go]
                tok = batch_column(kept, going, b)
            else:
                going = []
        # each row was fed its pending token, then its picks but the last (past its draft when its end
        # was learned late: those states go unused)
        rnd = self._round = dict(starts=starts, fed=n_fed, states=torch.stack(states, 1) if states else None, tokens=None)

        def finish(picks: list[list[int]], drafts: list[list[int]]) -> list[list[int]]:
            rnd["tokens"] = [[c[-1], *p][:n] for c, p, n in zip(contexts, picks, n_fed)]
            return drafts

        return StepDrafts(steps, finish)

    @torch.inference_mode()
    def verify(self, runtime: WhisperDecoderRuntime, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
               token_rows: list[list[int]] | None = None, starts: list[int] | None = None,
               drafted: bool = False) -> torch.Tensor:
        """The target's final hidden states for ``tokens`` at ``positions``: layers 0..k-1 only for the
        tokens the drafter fed, layers k.. for all."""
        rnd, self._round = self._round, None
        b, w = tokens.shape
        fed = [0] * b
        if rnd is not None and cache is self.cache and len(rnd["fed"]) == b:
            first = starts if starts is not None else positions[:, 0].tolist()
            if not drafted:  # which leading tokens are those it fed: compared on the host
                own = rnd["tokens"] or [[] for _ in range(b)]
                rows = token_rows if token_rows is not None else tokens.tolist()
            for i in range(b):
                # the drafter's states serve the leading tokens it fed, at these very positions
                if first[i] == rnd["starts"][i]:
                    fed[i] = min(rnd["fed"][i], w) if drafted else common_prefix(own[i][:w], rows[i])
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
