"""Beam search decoding (``--beam-size``) over the exact decoder runtime.

The semantics are openai/whisper ``decoding.py``'s ``BeamSearchDecoder`` with its
``MaximumLikelihoodRanker``: per audio row ``beam_size`` live beams; each step
every beam offers its top ``beam_size + 1`` tokens after the logit rules; the candidates are ranked by
cumulative log-probability, those ending in end-of-text are collected (up to ``beam_size * patience``
per row) and the best others become the next beams; a row is done when its collection is full, and its
result is the collected sequence openai's ranker puts first (``quality.length_normalized``: its
``sum_logprob / length``, or over Google NMT's penalty with ``length_penalty``). The numbers are those of
``GreedyDecoder`` (same runtime, same rules on each beam's own prefix), so ``beam_size=1`` gives the
greedy tokens.
"""

from __future__ import annotations

import time

import torch

from specwhisper.asr.decoding.greedy import Decoder, DecodeOutput, Looping, SequenceResult, read_choices
from specwhisper.asr.decoding.quality import length_normalized
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.decoding.rules import WhisperLogitRules
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime
from specwhisper.results.stats import DecodeStats
from specwhisper.hardware.device import on_device

Beam = tuple[list[int], float]  # sampled tokens (prompt excluded), cumulative log-probability
Finished = dict[tuple[int, ...], float]  # sampled tokens + end-of-text -> cumulative log-probability


class BeamSearchDecoder(Decoder):
    """Batched beam search: cache rows ``a*k .. a*k+k-1`` hold the ``k`` beams of the ``a``-th live audio row."""

    def __init__(
        self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules,
        beam_size: int = 5, patience: float = 1.0, length_penalty: float | None = None, length_exponent: float = 1.0,
    ):
        super().__init__(runtime, special, rules)
        self.beam_size = beam_size
        self.length_penalty, self.length_exponent = length_penalty, length_exponent
        self.max_candidates = round(beam_size * patience)  # openai's rule
        if beam_size < 1 or self.max_candidates < 1:
            raise ValueError(f"invalid beam size ({beam_size}) or patience ({patience})")

    @torch.inference_mode()
    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               looping: Looping | None = None) -> DecodeOutput:
        """Every hypothesis runs to its end, as openai's beam search runs them: ``looping`` is not asked."""
        t0 = time.perf_counter()
        b, k = encoder_out.shape[0], self.beam_size
        stats = DecodeStats()
        # The prompt runs once per audio row, then each row's self-attention cache is copied to its k beams,
        # which read the row's one cross-attention K/V where attention goes query by query
        # (``KVCache.repeated``); a batched attention call (the fixed-shape mode, a GPU) takes a copy per beam.
        cache = self.rt.new_cache(encoder_out)
        last, no_speech = self.prefill(cache, prompt)
        stats.target_passes += b
        stats.decoder_steps += 1
        no_speech_probs = no_speech.tolist()
        if k > 1:
            cache = cache.repeated(k) if self.rt.row_exact else cache.select([r for r in range(b) for _ in range(k)])
            last = last.repeat_interleave(k, 0)
        beams: list[list[Beam]] = [[([], 0.0)] * k for _ in range(b)]  # identical at first: merged below
        finished: list[Finished] = [{} for _ in range(b)]
        cut: list[set[tuple[int, ...]]] = [set() for _ in range(b)]  # sequences ended by the length limit
        capped: list[set[tuple[int, ...]]] = [set() for _ in range(b)]  # ended by ``max_new_tokens``
        limit = self.limit(prompt)
        active = list(range(b))  # audio row of each group of k cache rows
        length = len(prompt)
        device = self.rt.device
        rules = self.rules.for_prompt(prompt)
        while True:
            logits = last.float()
            rules.select(logits, [tokens for a in active for tokens, _ in beams[a]], pick=False)
            top_lp, top_tok = logits.log_softmax(-1).topk(k + 1, dim=-1)
            tokens, logprobs = read_choices(top_tok.flatten(), top_lp.flatten())  # the step's one host read
            keep, sources = [], []
            for i, a in enumerate(active):
                beams[a], parents = self._advance(beams[a], tokens, logprobs, i * k, finished[a])
                if len(finished[a]) >= self.max_candidates:
                    continue
                written = length + 1 - len(prompt)  # tokens each live beam holds
                if written >= limit or (self.max_new_tokens is not None and written >= self.max_new_tokens):
                    # no position left, or the caller's cap: the live beams end here (openai's finalize)
                    for seq, score in sorted(beams[a], key=lambda beam: beam[1], reverse=True):
                        if len(finished[a]) >= k:
                            break
                        key = (*seq, self.sp.eot)
                        finished[a][key] = score
                        (cut if written >= limit else capped)[a].add(key)
                    continue
                sources += [len(keep) * k + j for j in parents]  # the group's cache rows once finished ones are gone
                keep.append(i)
            if not keep:
                break
            if len(keep) < len(active):  # drop finished rows' groups first: ascending, moved down in place
                cache = cache.select([i * k + j for i in keep for j in range(k)])
                active = [active[i] for i in keep]
            cache.reorder(sources, length)  # positions 0 .. length - 1 are written
            nxt = on_device([[seq[-1]] for a in active for seq, _ in beams[a]], device)
            positions = torch.full((len(active) * k, 1), length, device=device)
            last = self.rt.step(nxt, positions, cache)[:, -1]
            stats.target_passes += len(active) * k
            stats.decoder_steps += 1
            length += 1
        results = [self._best(finished[a], cut[a], capped[a], no_speech_probs[a]) for a in range(b)]
        stats.generated_tokens = sum(len(r.tokens) for r in results)
        stats.decoder_seconds = time.perf_counter() - t0
        return DecodeOutput(results, stats)

    def _advance(
        self, beams: list[Beam], tokens: list[int], logprobs: list[float], first_row: int, finished: Finished,
    ) -> tuple[list[Beam], list[int]]:
        """One step of one audio row (openai's ``update``): its next beams and the beam (0 .. k-1) each
        continues. ``tokens``/``logprobs``: the flattened top ``k + 1`` of every cache row."""
        k = self.beam_size
        scores: dict[tuple[int, ...], float] = {}
        sources: dict[tuple[int, ...], int] = {}
        for j, (prefix, total) in enumerate(beams):
            row = first_row + j
            for c in range(row * (k + 1), (row + 1) * (k + 1)):
                seq = (*prefix, tokens[c])
                scores[seq] = total + logprobs[c]  # identical beams give identical keys: one candidate
                sources[seq] = j
        nxt: list[Beam] = []
        parents: list[int] = []
        ended: Finished = {}
        for seq in sorted(scores, key=scores.__getitem__, reverse=True):  # stable, as openai's
            if seq[-1] == self.sp.eot:
                ended[seq] = scores[seq]
                continue
            nxt.append((list(seq), scores[seq]))
            parents.append(sources[seq])
            if len(nxt) == k:
                break
        for seq in sorted(ended, key=ended.__getitem__, reverse=True):
            if len(finished) >= self.max_candidates:
                break
            finished[seq] = ended[seq]
        return nxt, parents

    def _best(self, finished: Finished, cut: set[tuple[int, ...]], capped: set[tuple[int, ...]],
              no_speech_prob: float) -> SequenceResult:
        """openai's ``MaximumLikelihoodRanker``: the best ``length_normalized`` score, the length without
        end-of-text (the first of equals, as openai's ``argmax``)."""
        seq = max(finished, key=lambda s: length_normalized(finished[s], len(s) - 1, self.length_penalty, self.length_exponent))
        return SequenceResult(list(seq[:-1]), finished[seq], no_speech_prob, hit_max_length=seq in cut, capped=seq in capped)
