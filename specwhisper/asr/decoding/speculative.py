"""Exact speculative greedy decoding for Whisper, batched, with per-row acceptance.

Each round, for every active row: a drafter proposes up to k tokens (``WhisperDrafter.draft``); the target runs
ONE forward pass over ``[pending, d1..dk]`` at the row's own positions (``_score``); Whisper's logit rules
are applied to every verify position with the prefix it would have had in plain decoding
(``WhisperLogitRules.select_state``, the same masking the plain decoder uses, over the rule facts of each
prefix advanced along the drafts on the device), so the target's greedy token ``g_j`` is known at each
position; a drafter model's drafts are read with that verdict, one host read a round; the row keeps ``d1..da`` while they equal
``g_0..g_{a-1}`` plus ``g_a`` (``_accept``: the shared rule, ``specwhisper.speculative.acceptance``; the draft
length per row follows ``specwhisper.speculative.lookahead``). The KV cache is static with per-row positions (see
``specwhisper.asr.runtime.decoder``): rejected entries are simply left behind the row's length and overwritten.

Why our own loop instead of transformers' assisted generation: it refuses batches, its
timestamp processor is reset by the assistant (output differs from the target), it crashes
at 448 tokens in long-form and its per-step Python overhead makes it slower than plain
decoding on CPU (../shared/notes/offline-models.md).
"""

from __future__ import annotations

import time
from dataclasses import replace

import torch

from specwhisper.asr.decoding.greedy import Decoder, DecodeOutput, Looping, SequenceResult, cut_if_looping, read_choices
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import RuleState, WhisperLogitRules
from specwhisper.asr.runtime.decoder import KVCache, WhisperDecoderRuntime
from specwhisper.asr.runtime.graphs import CapturedCall, graph_pool
from specwhisper.results.stats import DecodeStats
from specwhisper.speculative.acceptance import accept
from specwhisper.speculative.draft_steps import Drafts, StepDrafts
from specwhisper.speculative.drafter import Drafter as CoreDrafter
from specwhisper.speculative.lookahead import Lookahead
from specwhisper.speculative.stats import count_round
from specwhisper.hardware.device import on_device

__all__ = ["WhisperDrafter", "Lookahead", "SpeculativeDecoder"]


class WhisperDrafter(CoreDrafter):
    """A drafter of the Whisper loop: the shared proposer interface (``specwhisper.speculative.drafter``)
    plus the hooks of a batched decode over an encoder output and a static KV cache."""

    def begin(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None) -> None:
        """A new batch; row i of ``encoder_out`` is the target's encoding of chunk i."""

    def attach(self, cache: KVCache) -> None:
        """The target's KV cache for the current rows (after ``begin`` and after every ``select``), for
        drafters that run the target's own first layers (``specwhisper.asr.drafters.early_exit``)."""

    def verify(self, runtime: WhisperDecoderRuntime, tokens: torch.Tensor, positions: torch.Tensor, cache: KVCache,
               token_rows: list[list[int]] | None = None, starts: list[int] | None = None,
               drafted: bool = False) -> torch.Tensor:
        """The verify pass: the target's final hidden states of ``tokens`` (``[pending, drafts..]`` per
        row) at ``positions``. A drafter that already ran some of the target's layers for them may
        reuse that work; it must return what ``runtime.hidden`` would. ``token_rows``, ``starts``: the
        tokens and each row's first position as host lists (reading them back from a GPU would wait for
        it); ``drafted``: the tokens after each row's pending one are this round's drafts as
        :meth:`draft` left them on the device (``token_rows`` is then None)."""
        return runtime.hidden(tokens, positions, cache)


class CapturedVerdict:
    """A fixed-shape verify pass's choice at every column of every row in one ``CapturedCall`` (a CUDA
    graph on a GPU): from the head's output over the cache's block of slots, each row's W columns in
    order, the rule facts advanced along the pass's tokens, Whisper's rules and the greedy pick: some
    sixty kernels a round, each launched by the host, where the pass's logits are computed eagerly
    by the same head as a plain step's. The kernels are those the eager verdict launches for its real
    positions, over all W columns (the ones past a row's tokens are read and ignored). Inputs, set in
    place: :attr:`block` [physical rows, W, V], :attr:`slots` [2, rows, W] (the physical row and
    column of each row's j-th token), :attr:`tokens` [rows, W], :attr:`facts` [rows, 4] (each row's
    prefix: ``WhisperLogitRules.facts``)."""

    def __init__(self, rules: WhisperLogitRules, block: torch.Tensor, rows: int, pool=None):
        """``block``: the buffer the head's output is copied into (calls that never run at once may share
        one: 27 MB for large-v3's 16 rows x 16 columns)."""
        self.rules = rules
        width, device = block.shape[1], block.device
        self.block = block
        self.slots = torch.zeros((2, rows, width), dtype=torch.long, device=device)
        self.tokens = torch.zeros((rows, width), dtype=torch.long, device=device)
        self.facts = torch.zeros((rows, 4), dtype=torch.long, device=device)
        self.call = CapturedCall(self._run, device, pool=pool)

    def __call__(self) -> torch.Tensor:
        """The greedy token and its log-probability at each (row, column): float32 [2, rows * W], the
        capture's own (overwritten by the next call)."""
        return self.call()[0]

    def _run(self) -> tuple[torch.Tensor]:
        logits = self.block[self.slots[0], self.slots[1]].float()
        rows, width = self.tokens.shape
        state = self.rules.along(RuleState.of(self.facts), self.tokens[:, 1:])
        flat = RuleState(*(f.reshape(-1) for f in (state.empty, state.last_ts, state.penult_ts, state.stamp)))
        greedy, logprobs = self.rules.select_state(logits.reshape(rows * width, -1), flat)
        return (torch.stack([greedy.to(logprobs.dtype), logprobs]),)


class SpeculativeDecoder(Decoder):
    """``captured``: in the fixed-shape mode each round's verdict is one captured call
    (``CapturedVerdict``; None: where the runtime replays CUDA graphs)."""

    def __init__(
        self,
        runtime: WhisperDecoderRuntime,
        special: SpecialTokens,
        rules: WhisperLogitRules,
        drafter: WhisperDrafter,
        lookahead: Lookahead | None = None,
        captured: bool | None = None,
    ):
        super().__init__(runtime, special, rules)
        self.drafter = drafter
        self.lookahead = lookahead or Lookahead()
        self.captured = runtime.graphs is not None if captured is None else captured
        self._verdicts: dict[tuple, CapturedVerdict] = {}  # by (rows, the block's shape, the rules' id)
        self._blocks: dict[tuple, torch.Tensor] = {}  # their input buffers, one per block shape
        self._pool = graph_pool(runtime.device)

    @torch.inference_mode()
    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               looping: Looping | None = None, limits: list[int] | None = None) -> DecodeOutput:
        """``limits``: the most tokens row i may write (it then stops with ``hit_max_length``), as in
        ``GreedyDecoder.decode``; ``looping`` is asked of each row's tokens one token at a time, as
        plain decoding asks it."""
        try:
            return self._decode(encoder_out, prompt, features, limits, looping)
        finally:
            self.drafter.end()

    def lookahead_for(self, cache: KVCache) -> Lookahead:
        """The draft lengths a verify pass over ``cache`` can hold: in the fixed-shape mode a pass has
        ``cache.width`` columns (``specwhisper.asr.runtime.kv_cache.fixed_width_for``), the pending token's included
        when the drafter takes the bonus token; there the rows of a batch drafting by passes keep the initial
        length."""
        look = self.lookahead
        if cache.width is None:
            return look
        most = min(look.maximum, cache.width - (1 if self.drafter.bonus else 0))
        if cache.batch_size > 1 and self.drafter.drafts_by_passes:
            # A round drafts as many passes as its longest draft, and here a pass costs what one of all
            # rows does (an H100, large-v3 shapes: a distil-shaped draft step 1.8 ms at batch 1, 2.1 ms at
            # 16). Rows growing their own k up to 12 made a round of 16 rows draft 7 passes for its 3.3
            # tokens a row (distil at acceptance 0.8: 0.90x); kept at the initial k, such rounds are
            # projected 1.4x at the H100's costs (bench/round_length.py). A lone row keeps adapting.
            most = min(most, look.initial)
        return replace(look, maximum=most, initial=min(look.initial, most), minimum=min(look.minimum, most))

    def _decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None,
                limits: list[int] | None, looping: Looping | None) -> DecodeOutput:
        t0 = time.perf_counter()
        b = encoder_out.shape[0]
        stats = DecodeStats()
        cache = self.rt.new_cache(encoder_out, slack=self.lookahead.maximum + 1)
        look = self.lookahead_for(cache)
        cut = [self.limit(prompt, None if limits is None else limits[r]) for r in range(b)]
        # the most tokens each row writes: where it is cut, or the caller's cap (``Decoder.at_end``)
        cap = cut if self.max_new_tokens is None else [min(n, self.max_new_tokens) for n in cut]
        self.drafter.begin(encoder_out, prompt, features)
        self.drafter.attach(cache)
        last, no_speech = self.prefill(cache, prompt)
        stats.target_passes += b
        stats.decoder_steps += 1
        results = [SequenceResult([], 0.0, p) for p in no_speech.tolist()]
        rules = self.rules.for_prompt(prompt)
        first, first_lp = read_choices(*rules.select(last.float(), [[] for _ in range(b)]))
        active: list[int] = []
        for r in range(b):
            if self._emit(results[r], first[r], first_lp[r], cut[r], stats, looping):
                active.append(r)
        if len(active) < b:
            cache = cache.select(active)
            self.drafter.select(active)
            self.drafter.attach(cache)
        lengths = [len(prompt)] * len(active)  # positions filled in the cache per active row
        ks = [look.initial] * len(active)

        while active:
            contexts = [results[r].tokens for r in active]
            drafts = self.drafter.draft(contexts, [max(0, min(k, cap[r] - len(c) - 1)) for k, r, c in zip(ks, active, contexts)])
            drafts, greedy, logprobs = self._score(cache, rules, contexts, drafts, lengths)
            stats.target_passes += len(active)
            stats.decoder_steps += 1
            keep = self._accept(active, drafts, greedy, logprobs, results, cut, lengths, ks, look, stats, looping)
            if len(keep) < len(active):
                if not keep:
                    break
                cache = cache.select(keep)
                self.drafter.select(keep)
                self.drafter.attach(cache)
                active = [active[i] for i in keep]
                lengths = [lengths[i] for i in keep]
                ks = [ks[i] for i in keep]
        stats.decoder_seconds = time.perf_counter() - t0
        return DecodeOutput(results, stats)

    def _score(self, cache: KVCache, rules: WhisperLogitRules, contexts: list[list[int]], drafts: Drafts,
               lengths: list[int]) -> tuple[list[list[int]], list[list[int]], list[list[float]]]:
        """The verify pass over each row's pending token and drafts (each at most ``k``, and one fewer
        than the tokens the row may still write): the drafts, and the target's greedy token and its
        log-probability at every fed position of each row, each after the prefix plain decoding would
        have had there. A drafter taking no bonus token is fed its drafts without the last one.

        Drafts still on the device are verified as they are there, with the rule facts of every
        position advanced along them on the device (``WhisperLogitRules.along``), and read with the
        verdict: one host read a round. A row whose draft is shorter than the tokens it picked (its end
        was learned late) has its extra positions scored for nothing."""
        device = self.rt.device
        counts = drafts.counts()
        fed = [n + 1 if self.drafter.bonus or not n else n for n in counts]
        width = max(fed)
        pending = on_device([c[-1] for c in contexts], device, dtype=torch.long)[:, None]
        tokens = torch.cat([pending, drafts.matrix(device)], 1)[:, :width]
        # padding past a row's tokens repeats its pending token: its cache slots lie past the row's length
        real = on_device([[j < n for j in range(width)] for n in fed], device).reshape(len(fed), width)
        tokens = torch.where(real, tokens, pending)
        positions = on_device([[n + j for j in range(width)] for n in lengths], device)
        known = None if isinstance(drafts, StepDrafts) else \
            [([c[-1], *d][:n] + [c[-1]] * width)[:width] for c, d, n in zip(contexts, drafts.known, fed)]
        hidden = self.drafter.verify(self.rt, tokens, positions, cache, token_rows=known, starts=lengths,
                                     drafted=known is None)
        if self.captured and cache.width is not None and not rules.penalized:
            return self._captured_verdict(cache, rules, contexts, drafts, lengths, fed, tokens, positions, hidden)
        # only real positions go through the (large) output head
        rows = [i for i, n in enumerate(fed) for _ in range(n)]
        cols = [j for n in fed for j in range(n)]
        at = on_device(rows, device), on_device(cols, device)
        logits = self.rt.logits_at(hidden[at], at[0], positions[at], cache).float()
        state = rules.along(rules.state(contexts, device), tokens[:, 1:]).at(at)
        greedy, logprobs = rules.select_state(logits, state)
        parts = [greedy.to(logprobs.dtype), logprobs]
        draft_values = drafts.values()
        if draft_values is not None:
            parts.append(draft_values.to(logprobs.device, logprobs.dtype))
        values = torch.cat(parts).tolist()  # the round's one host read
        n = len(rows)
        drafts = drafts.resolve(values[2 * n :])
        greedy_rows, logprob_rows, start = [], [], 0
        for k in fed:
            greedy_rows.append([int(t) for t in values[start : start + k]])
            logprob_rows.append(values[n + start : n + start + k])
            start += k
        return drafts, greedy_rows, logprob_rows

    def _captured_verdict(self, cache: KVCache, rules: WhisperLogitRules, contexts: list[list[int]], drafts: Drafts,
                          lengths: list[int], fed: list[int], tokens: torch.Tensor, positions: torch.Tensor,
                          hidden: torch.Tensor) -> tuple[list[list[int]], list[list[int]], list[list[float]]]:
        """``_score``'s verdict through a ``CapturedVerdict``: the head over the block of slots, then the
        rules and the pick at all W columns of every row in one call, read with the drafts."""
        b, width, device = len(fed), cache.width, self.rt.device
        block, _, _ = self.rt.logits_block(hidden, torch.arange(b, device=device)[:, None], positions, cache)
        key = (b, tuple(block.shape), block.dtype, id(rules))
        if key not in self._verdicts:
            shape = (tuple(block.shape), block.dtype)
            if shape not in self._blocks:
                self._blocks[shape] = torch.zeros_like(block)
            self._verdicts[key] = CapturedVerdict(rules, self._blocks[shape], b, self._pool)
        verdict = self._verdicts[key]
        phys = cache.physical()
        verdict.slots.copy_(on_device([[[phys[i]] * width for i in range(b)],
                                       [[(n + j) % width for j in range(width)] for n in lengths]], device).reshape(2, b, width))
        pad = width - tokens.shape[1]  # columns past the pass's: its pending token, read and ignored
        verdict.tokens.copy_(tokens if not pad else torch.cat([tokens, tokens[:, :1].expand(b, pad)], 1))
        verdict.facts.copy_(on_device(rules.facts(contexts), device).reshape(b, 4))
        verdict.block.copy_(block)
        parts = [verdict().flatten()]
        draft_values = drafts.values()
        if draft_values is not None:
            parts.append(draft_values.to(device, torch.float32))
        values = torch.cat(parts).tolist()  # the round's one host read
        n = b * width
        drafts = drafts.resolve(values[2 * n :])
        greedy_rows = [[int(t) for t in values[i * width : i * width + k]] for i, k in enumerate(fed)]
        logprob_rows = [values[n + i * width : n + i * width + k] for i, k in enumerate(fed)]
        return drafts, greedy_rows, logprob_rows

    def _accept(self, active: list[int], drafts: list[list[int]], greedy: list[list[int]], logprobs: list[list[float]],
                results: list[SequenceResult], cut: list[int], lengths: list[int], ks: list[int], look: Lookahead,
                stats: DecodeStats, looping: Looping | None = None) -> list[int]:
        """Each row keeps its drafts while they equal the target's tokens, plus the target's next one
        (``specwhisper.speculative.acceptance``); its ``lengths`` and next draft length ``ks`` move on.
        Returns the indices (into ``active``) of the rows that go on."""
        keep = []
        for i, r in enumerate(active):
            d = drafts[i]
            accepted, tokens = accept(d, greedy[i])
            emitted, alive = 0, True
            for g, lp in zip(tokens, logprobs[i]):
                alive = self._emit(results[r], g, lp, cut[r], stats, looping)
                emitted += 1
                if not alive:  # the row ended at this token: the drafts after it do not count
                    accepted = min(accepted, emitted - 1)
                    break
            count_round(stats, len(d), accepted)
            if alive:
                keep.append(i)
                lengths[i] += emitted
                ks[i] = look.update(ks[i], len(d), accepted)
        return keep

    def _emit(self, res: SequenceResult, token: int, logprob: float, limit: int, stats: DecodeStats,
              looping: Looping | None = None) -> bool:
        """Append the target's greedy token as plain decoding would; False when the row ends (at
        end-of-text, at ``limit`` tokens: Whisper's length limit or the row's own, at the caller's
        ``max_new_tokens``, or where ``looping`` finds its tokens looping)."""
        res.sum_logprob += logprob
        if token == self.sp.eot:
            return False
        res.tokens.append(token)
        stats.generated_tokens += 1
        return not (self.at_end(res, limit) or cut_if_looping(res, looping, stats))
