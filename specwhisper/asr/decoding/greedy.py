"""The plain (non-speculative) decoders: greedy and sampling, batched, one target pass per token.

They choose tokens with the logit rules of ``specwhisper.asr.decoding.rules``, which the
speculative decoder applies to every drafted position: sharing that one implementation is what
makes speculative output identical.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from specwhisper.asr.runtime.decoder import KVCache, WhisperDecoderRuntime
from specwhisper.asr.runtime.graphs import graph_pool
from specwhisper.asr.decoding.rules import CapturedSelect, WhisperLogitRules
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.results.stats import DecodeStats
from specwhisper.hardware.device import on_device


def read_choices(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """Chosen token ids and their log-probabilities on the host in one read (one wait for a GPU per
    step or round; token ids are exact in float32, below 2^24)."""
    ids, lps = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()
    return [int(t) for t in ids], lps


@dataclass
class SequenceResult:
    """One decoded sequence: sampled tokens (prompt and end-of-text excluded)."""

    tokens: list[int]
    sum_logprob: float = 0.0
    no_speech_prob: float = 0.0
    hit_max_length: bool = False

    @property
    def avg_logprob(self) -> float:
        return self.sum_logprob / (len(self.tokens) + 1)


@dataclass
class DecodeOutput:
    sequences: list[SequenceResult]
    stats: DecodeStats = field(default_factory=DecodeStats)


class Decoder:
    """Base class: prompt handling shared by the plain and speculative decoders."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules):
        self.rt = runtime
        self.sp = special
        self.rules = rules
        self.max_len = runtime.max_len

    def prefill(self, cache: KVCache, prompt: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """Run the prompt; return last-position logits [B, V] and no-speech probabilities [B]."""
        b, device = cache.batch_size, self.rt.device
        tokens = on_device(prompt, device).expand(b, -1)
        positions = torch.arange(len(prompt), device=device).expand(b, -1)
        # logits where <|startoftranscript|> is (after any context: the no-speech probability) and last
        only = [prompt.index(self.sp.sot), len(prompt) - 1] if self.sp.no_speech is not None else [len(prompt) - 1]
        logits = self.rt.step(tokens, positions, cache, only=only, whole_rows=True)
        if self.sp.no_speech is not None:
            no_speech = logits[:, 0].float().softmax(-1)[:, self.sp.no_speech]
        else:
            no_speech = torch.zeros(b, device=device)
        return logits[:, -1], no_speech

    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None) -> DecodeOutput:
        """Decode every row of ``encoder_out`` after ``prompt``; ``features`` (the log-mel input)
        serve drafters with an encoder of their own."""
        raise NotImplementedError


class GreedyDecoder(Decoder):
    """Plain batched greedy decoding: one target pass per token. ``captured``: each step's rules and
    pick run as one captured call (``CapturedSelect``; None: where the runtime replays CUDA graphs)."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules,
                 captured: bool | None = None):
        super().__init__(runtime, special, rules)
        self.captured = runtime.graphs is not None if captured is None else captured
        self._selects: dict[tuple[int, int], CapturedSelect] = {}  # by (rows, the rules' id): captured once each
        self._pool = graph_pool(runtime.device)
        # their inputs: views of one float32 [rows, V] buffer, made for a batch's first and largest step
        # (the calls never run at the same time); a buffer per row count would hold 110 MB at batch 32
        # of large-v3's vocabulary
        self._logits: torch.Tensor | None = None

    def _select(self, logits: torch.Tensor, rules: WhisperLogitRules) -> CapturedSelect:
        """The captured choice for a step's ``logits`` [rows, V] under ``rules``."""
        rows, vocab = logits.shape
        key = (rows, id(rules))
        if key not in self._selects:
            buf = self._logits
            if buf is None or buf.shape[0] < rows or buf.shape[1] != vocab or buf.device != logits.device:
                buf = self._logits = torch.zeros((rows, vocab), dtype=torch.float32, device=logits.device)
            self._selects[key] = CapturedSelect(rules, buf[:rows], self._read_out, pool=self._pool)
        return self._selects[key]

    @staticmethod
    def _read_out(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[torch.Tensor]:
        """What a step reads: its tokens and their log-probabilities in one tensor (``read_choices``)."""
        return (torch.stack([tokens.to(logprobs.dtype), logprobs]),)

    def choose_and_read(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules
                        ) -> tuple[torch.Tensor, list[int], list[float]]:
        """The next token of each row (device [rows]), and the tokens and log-probabilities read to the
        host: the step's one wait."""
        if not self.captured:
            nxt, logprobs = self.choose(logits.float(), prefixes, rules)
            return nxt, *read_choices(nxt, logprobs)
        select = self._select(logits, rules)
        select.set_facts(prefixes)
        out = select(logits)[0]  # float32 from the logits' dtype, as ``.float()`` makes it
        ids, lps = out.tolist()
        return out[0].long(), [int(t) for t in ids], lps

    def choose(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token of each row after the logit ``rules``, and its log-probability."""
        return rules.select(logits, prefixes)

    @torch.inference_mode()
    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               limits: list[int] | None = None, copies: int = 1) -> DecodeOutput:
        """``copies`` sequences per row of ``encoder_out`` (sampling's best-of draws: rows
        ``i * copies ...``), which share its cross-attention projection and prompt pass; ``limits``:
        the most tokens sequence i may write (it then stops with ``hit_max_length``), below Whisper's
        own limit (the temperature fallback caps its samples by their audio's length)."""
        t0 = time.perf_counter()
        stats = DecodeStats()
        cache = self.rt.new_cache(encoder_out)
        last, no_speech = self.prefill(cache, prompt)
        stats.target_passes += encoder_out.shape[0]
        stats.decoder_steps += 1
        if copies > 1:  # the cache rows are gathered: each copy's numbers are its row's (row-exact runtime)
            cache = cache.select([r for r in range(encoder_out.shape[0]) for _ in range(copies)])
            last, no_speech = last.repeat_interleave(copies, 0), no_speech.repeat_interleave(copies, 0)
        b = cache.batch_size
        results = [SequenceResult([], 0.0, p) for p in no_speech.tolist()]
        active = list(range(b))  # original row index of each cache row
        length = len(prompt)
        device = self.rt.device
        rules = self.rules.for_prompt(prompt)
        while True:
            nxt, picked, picked_logprobs = self.choose_and_read(last, [results[r].tokens for r in active], rules)
            keep = []
            for j, r in enumerate(active):
                tok = picked[j]
                res = results[r]
                res.sum_logprob += picked_logprobs[j]
                if tok == self.sp.eot:
                    continue
                res.tokens.append(tok)
                stats.generated_tokens += 1
                if length + 1 >= self.max_len or (limits is not None and len(res.tokens) >= limits[r]):
                    res.hit_max_length = True
                    continue
                keep.append(j)
            if not keep:
                break
            if len(keep) < len(active):
                cache = cache.select(keep)
                nxt = nxt[on_device(keep, device)]
                active = [active[j] for j in keep]
            positions = torch.full((len(active), 1), length, device=device)
            last = self.rt.step(nxt[:, None], positions, cache)[:, -1]
            stats.target_passes += len(active)
            stats.decoder_steps += 1
            length += 1
        stats.decoder_seconds = time.perf_counter() - t0
        return DecodeOutput(results, stats)


class SamplingDecoder(GreedyDecoder):
    """openai/whisper's decoding at a temperature > 0 (its fallback passes): each token is drawn from
    softmax(logits / T) after the logit rules; the log-probability summed is that of the untempered
    distribution, as openai/whisper does. Draws come from a generator seeded per decode, so a run is
    reproducible. Plain decoding: no drafter runs in these passes."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules,
                 temperature: float, seed: int = 0):
        super().__init__(runtime, special, rules, captured=False)  # its own choice: a draw
        if not 0.0 < temperature <= 1.0:
            raise ValueError(f"sampling temperature must be in (0, 1], got {temperature}")
        self.temperature = temperature
        self.seed = seed
        self._generator: torch.Generator | None = None

    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               limits: list[int] | None = None, copies: int = 1) -> DecodeOutput:
        self._generator = torch.Generator(device=encoder_out.device).manual_seed(self.seed)
        return super().decode(encoder_out, prompt, features, limits, copies)

    def choose(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules) -> tuple[torch.Tensor, torch.Tensor]:
        rules.select(logits, prefixes, pick=False)
        probs = (logits / self.temperature).softmax(-1)
        tokens = torch.multinomial(probs, 1, generator=self._generator)[:, 0]
        return tokens, logits.log_softmax(-1).gather(1, tokens[:, None])[:, 0]


