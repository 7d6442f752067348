"""The plain (non-speculative) decoders: greedy and sampling, batched, one target pass per token.

They choose tokens with the logit rules of ``specwhisper.asr.decoding.rules``, which the
speculative decoder applies to every drafted position: sharing that one implementation is what
makes speculative output identical.
"""

from __future__ import annotations

import copy

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

import torch

from specwhisper.asr.runtime.decoder import KVCache, WhisperDecoderRuntime
from specwhisper.asr.runtime.graphs import graph_pool
from specwhisper.asr.decoding.rules import CapturedSelect, WhisperLogitRules, tempered_draw
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.results.stats import DecodeStats
from specwhisper.hardware.device import on_device


def read_choices(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """Chosen token ids and their log-probabilities on the host in one read (one wait for a GPU per
    step or round; token ids are exact in float32, below 2^24)."""
    ids, lps = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()
    return [int(t) for t in ids], lps


# a predicate of a decode's tokens so far: its text loops (``cut_if_looping`` asks it)
Looping = Callable[[list[int]], bool]


@dataclass
class SequenceResult:
    """One decoded sequence: sampled tokens (prompt and end-of-text excluded)."""

    tokens: list[int]
    sum_logprob: float = 0.0
    no_speech_prob: float = 0.0
    hit_max_length: bool = False  # stopped at Whisper's length limit or its row's own (unfinished), or looping
    capped: bool = False  # stopped at the caller's ``Decoder.max_new_tokens`` (a whole decode by the caller's measure)

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
        self.max_new_tokens: int | None = None  # the most tokens a decode writes (``with_cap``); None: to max_len

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

    @torch.inference_mode()
    def closing_timestamp(self, encoder_out: torch.Tensor, prompt: list[int], tokens: list[int], most: int) -> int:
        """Where Whisper would close a text it did not (``tokens`` after ``prompt``, over the one row of
        ``encoder_out``): the likeliest timestamp token after them, at or after their last one and at
        most ``most``, as its index (0: <|0.00|>). One pass over the prompt and the tokens."""
        tb = self.sp.timestamp_begin
        logits, _ = self.prefill(self.rt.new_cache(encoder_out), prompt + tokens)
        low = max([t - tb for t in tokens if t >= tb], default=0)
        high = max(low, min(most, self.rt.vocab_size - 1 - tb))
        return low + int(logits[0, tb + low : tb + high + 1].argmax())

    def with_rules(self, rules: WhisperLogitRules) -> Decoder:
        """This decoder choosing with ``rules`` (a call's penalties on repetition: ``WhisperLogitRules.with_penalties``),
        sharing its captured calls (they are kept per rules) and its drafter."""
        if rules is self.rules:
            return self
        clone = copy.copy(self)
        clone.rules = rules
        return clone

    def with_cap(self, max_new_tokens: int | None) -> Decoder:
        """This decoder writing at most ``max_new_tokens`` tokens per decode, timestamps included
        (faster-whisper's ``max_new_tokens``, openai-whisper's ``sample_len``; None: up to Whisper's
        length limit), sharing what ``with_rules`` shares. A row stopped there is ``capped``."""
        if max_new_tokens == self.max_new_tokens:
            return self
        clone = copy.copy(self)
        clone.max_new_tokens = max_new_tokens
        return clone

    def limit(self, prompt: list[int], row_limit: int | None = None) -> int:
        """The most tokens a row may write after ``prompt`` before it is cut (``hit_max_length``):
        Whisper's length limit, or ``row_limit`` (a sample's own cap) when that is lower."""
        room = self.max_len - len(prompt)
        return room if row_limit is None else min(row_limit, room)

    def at_end(self, res: SequenceResult, limit: int) -> bool:
        """Whether ``res`` stops at the token it just wrote: at ``limit`` tokens (``hit_max_length``) or at
        the caller's ``max_new_tokens`` (``capped``)."""
        n = len(res.tokens)
        if n >= limit:
            res.hit_max_length = True
        elif self.max_new_tokens is not None and n >= self.max_new_tokens:
            res.capped = True
        else:
            return False
        return True

    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               looping: Looping | None = None) -> DecodeOutput:
        """Decode every row of ``encoder_out`` after ``prompt``; ``features`` (the log-mel input)
        serve drafters with an encoder of their own. ``looping``: a row whose tokens it finds looping
        (asked where ``loop_check_due``) stops there as one at its length limit does
        (``hit_max_length``), in greedy and speculative decoding at the same token."""
        raise NotImplementedError


class CapturedChoices:
    """A decoder's captured choices (``CapturedSelect``), one per row count, rules and kind (a greedy pick
    or a draw), each captured once. Their inputs are views of one float32 [rows, V] buffer, made for
    the first and largest step (the calls never run at the same time): a buffer per row count would
    hold 110 MB at batch 32 of large-v3's vocabulary."""

    def __init__(self, device: torch.device):
        self.calls: dict[tuple[int, int, bool], CapturedSelect] = {}
        self.pool = graph_pool(device)
        self.buf: torch.Tensor | None = None

    def read(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules,
             draws: tuple[list[list[float]], list[float]] | None = None) -> tuple[torch.Tensor, list[int], list[float]]:
        """The next token of each row of ``logits`` [rows, V] after the ``rules`` (device [rows]): the
        greedy pick, or with ``draws`` (each row's temperature and random number) a draw; and the tokens
        and log-probabilities read to the host, the step's one wait."""
        call = self._call(logits, rules, draws is not None)
        call.set_facts(prefixes)
        if draws is not None:
            call.temperatures.copy_(on_device(draws[0], logits.device, dtype=torch.float32))
            call.uniforms.copy_(on_device(draws[1], logits.device, dtype=torch.float32))
        out = call(logits)[0]  # float32 from the logits' dtype, as ``.float()`` makes it
        ids, lps = out.tolist()
        return out[0].long(), [int(t) for t in ids], lps

    def _call(self, logits: torch.Tensor, rules: WhisperLogitRules, sampled: bool) -> CapturedSelect:
        rows, vocab = logits.shape
        key = (rows, id(rules), sampled)
        if key not in self.calls:
            buf = self.buf
            if buf is None or buf.shape[0] < rows or buf.shape[1] != vocab or buf.device != logits.device:
                buf = self.buf = torch.zeros((rows, vocab), dtype=torch.float32, device=logits.device)
            self.calls[key] = CapturedSelect(rules, buf[:rows], read_out, pool=self.pool, sampled=sampled)
        return self.calls[key]


def read_out(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[torch.Tensor]:
    """What a step reads: its tokens and their log-probabilities in one tensor (``read_choices``)."""
    return (torch.stack([tokens.to(logprobs.dtype), logprobs]),)


class GreedyDecoder(Decoder):
    """Plain batched greedy decoding: one target pass per token. ``captured``: each step's rules and
    pick run as one captured call (``CapturedChoices``; None: where the runtime replays CUDA graphs)."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules,
                 captured: bool | None = None):
        super().__init__(runtime, special, rules)
        self.captured = runtime.graphs is not None if captured is None else captured
        self.choices = CapturedChoices(runtime.device)

    def choose_and_read(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules
                        ) -> tuple[torch.Tensor, list[int], list[float]]:
        """The next token of each row (device [rows]), and the tokens and log-probabilities read to the
        host: the step's one wait."""
        if not self.captured or rules.penalized:  # penalties read the prefixes: eager (WhisperLogitRules.penalized)
            nxt, logprobs = self.choose(logits.float(), prefixes, rules)
            return nxt, *read_choices(nxt, logprobs)
        return self.choices.read(logits, prefixes, rules)

    def choose(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token of each row after the logit ``rules``, and its log-probability."""
        return rules.select(logits, prefixes)

    @torch.inference_mode()
    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               looping: Looping | None = None, limits: list[int] | None = None) -> DecodeOutput:
        """``limits``: the most tokens sequence i may write (it then stops with ``hit_max_length``),
        below Whisper's own limit."""
        t0 = time.perf_counter()
        stats = DecodeStats()
        cache = self.rt.new_cache(encoder_out)
        last, no_speech = self.prefill(cache, prompt)
        stats.target_passes += encoder_out.shape[0]
        stats.decoder_steps += 1
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
                if self.at_end(res, self.limit(prompt, None if limits is None else limits[r])):
                    continue
                if cut_if_looping(res, looping, stats):
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


_MASK64 = (1 << 64) - 1


def _mix(x: int) -> int:
    """splitmix64's finaliser: a 64-bit integer's bits spread over all 64."""
    x = (x + 0x9E3779B97F4A7C15) & _MASK64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _MASK64
    return x ^ (x >> 31)


def uniform(*parts: int) -> float:
    """A number in [0, 1), a multiple of 2^-24 (exact in float32), that is a function of the integers
    ``parts`` alone: a counter-based random number."""
    h = 0
    for p in parts:
        h = _mix(h ^ (p & _MASK64))
    return (h >> 40) / (1 << 24)


@dataclass
class Draws:
    """A unit of sampling: ``count`` draws of the chunk in row ``row`` of the encoder output at
    ``temperature``, each writing at most ``limit`` tokens (None: Whisper's own limit). ``key`` names
    the chunk (its place in its file): a draw's random numbers are a function of the sampler's seed,
    the key, the temperature, the draw's number and the token's index alone."""

    row: int
    temperature: float
    count: int
    limit: int | None = None
    key: int = 0


# A sample that loops writes until its cap (``Draws.limit``: up to 376 tokens for 30 s of audio), and
# ranks below every draw that ended (``fallback._likelihood``), so its tokens past the loop's start are
# work for nothing, and its decode holds the rows' decode as long: on a 10-minute conversation
# (bench/fallback_schedule.py, tiny.en) one draw at 0.2 looped on one phrase (compression ratio 53,
# every 32-token prefix of it above 2.4) for 376 of the file's 433 sampling steps, while no draw that
# ended had a 32-token prefix above 2.4 (245 draws on four files). A greedy decode that loops fails
# the same check and is sampled again, and it held its batch as long: on that conversation one chunk's
# greedy text looped to Whisper's 448-token limit, and its batch of 28 took 447 steps where its other
# rows had ended by step 104.
LOOP_CHECK_FROM = 32
LOOP_CHECK_EVERY = 8


def loop_check_due(tokens: int) -> bool:
    """Whether a decode's text is checked for a loop when it has ``tokens`` tokens."""
    return tokens >= LOOP_CHECK_FROM and tokens % LOOP_CHECK_EVERY == 0


def cut_if_looping(res: SequenceResult, looping: Looping | None, stats: DecodeStats) -> bool:
    """Whether ``res`` stops at its tokens so far: a loop check is due and ``looping`` finds them
    looping. It then stops as one at its length limit does (``hit_max_length``), counted in ``stats``."""
    if looping is None or not loop_check_due(len(res.tokens)) or not looping(res.tokens):
        return False
    res.hit_max_length = True
    stats.loops_cut += 1
    return True


@dataclass
class _Draw:
    """A live row of ``SamplingDecoder.stream``: its unit, its number among the unit's draws, its sequence
    so far, the position it feeds next."""

    unit: Draws
    index: int
    result: SequenceResult
    position: int

    def uniform(self, seed: int) -> float:
        """The random number its next token is drawn with."""
        unit = self.unit
        return uniform(seed, unit.key, round(unit.temperature * 1_000_000), self.index, len(self.result.tokens))


class SamplingDecoder(Decoder):
    """openai/whisper's decoding at a temperature > 0 (its fallback passes): each token is drawn from
    softmax(logits / T) after the logit rules; the log-probability summed is that of the untempered
    distribution, as openai/whisper does. A draw's token is the inverse of the distribution's
    cumulative sum at a counter-based random number (``uniform``: of the seed, the chunk's key, the
    temperature, the draw's number and the token's index). A generator shared by the rows (as
    ``torch.multinomial`` draws) would tie a row's numbers to how many rows draw before it, and so a
    chunk's samples, and the temperature its text is kept at, to the rows beside it (JFK's clip, every
    temperature failing, drawn so: kept at 0.0 alone, 0.4 before another clip, 0.2 after it). Where
    the logits are the same (the CPU's row-exact mode) so are the samples, at any batch size and in
    any order of units (``sample_again``'s ``ahead``, and over batches: ``FallbackPool``). Plain decoding: no
    drafter runs in these passes, so a chunk's samples are the same whichever drafter decoded its
    greedy pass."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules, seed: int = 0,
                 captured: bool | None = None, choices: CapturedChoices | None = None):
        """``captured``: each step's rules and draw run as one captured call (``CapturedChoices``; None:
        where the runtime replays CUDA graphs): the 60-odd kernels a draw launches, each queued by the
        host, as the greedy pick's are. ``choices``: calls captured before (an engine's, which makes a
        sampler per sampling decode), else its own."""
        super().__init__(runtime, special, rules)
        self.seed = seed
        self.captured = runtime.graphs is not None if captured is None else captured
        self.choices = choices if choices is not None else CapturedChoices(runtime.device)

    @staticmethod
    def draw(logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules, temperatures: torch.Tensor,
             uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """A token of each row drawn at its temperature (``temperatures`` [rows, 1]) after the logit
        ``rules`` with its random number (``uniforms`` [rows] in [0, 1)), and its untempered
        log-probability (``tempered_draw``)."""
        rules.select(logits, prefixes, pick=False)
        return tempered_draw(logits, temperatures, uniforms)

    def draw_and_read(self, logits: torch.Tensor, prefixes: list[list[int]], rules: WhisperLogitRules,
                      temperatures: list[list[float]], uniforms: list[float]) -> tuple[torch.Tensor, list[int], list[float]]:
        """The drawn token of each row (device [rows]), and the tokens and log-probabilities read to the
        host: the step's one wait."""
        if self.captured and not rules.penalized:
            return self.choices.read(logits, prefixes, rules, (temperatures, uniforms))
        device = logits.device
        nxt, logprobs = self.draw(logits.float(), prefixes, rules, on_device(temperatures, device, dtype=torch.float32),
                                  on_device(uniforms, device, dtype=torch.float32))
        return nxt, *read_choices(nxt, logprobs)

    @torch.inference_mode()
    def stream(self, encoder_out: torch.Tensor, prompt: list[int], units: list[Draws],
               then: Callable[[Draws, list[SequenceResult]], Draws | None], rows: int,
               dropped: Callable[[Draws], bool] | None = None,
               looping: Looping | None = None) -> DecodeStats:
        """Decode ``units`` (each row of ``encoder_out`` a chunk, all after ``prompt``), and the unit
        ``then`` returns when one ends (given its draws' sequences), at most ``rows`` draws at a time
        (and one unit's at least). A unit ``dropped`` says is no longer wanted is not started, or its
        draws stop where they are (``then`` is not called for it). A draw whose tokens ``looping``
        finds looping (asked every ``LOOP_CHECK_EVERY`` tokens from ``LOOP_CHECK_FROM`` on) stops
        there, as one at its cap does (``hit_max_length``).

        Continuous: a unit starts as soon as its draws have rows, and rows are freed draw by draw. The
        temperature fallback samples each failing chunk's temperatures in turn, and a decode of a few
        chunks' draws steps until its longest draw ends; decoded temperature by temperature, tiny.en
        at batch 32 took 356 sampling steps a file on the two 10-minute files (mean of three seeds),
        continuously 283: on a GPU a step costs about the same at any row count. The rows' work is
        the same in expectation (it varies by +-30% with the seed). The draws starting together share
        a prompt pass; a lone unit's draws share its row of cross-attention K/V (``KVCache.select``),
        several units' are copied into rows of their own."""
        t0 = time.perf_counter()
        stats = DecodeStats()
        device = self.rt.device
        rules = self.rules.for_prompt(prompt)
        queue = deque(units)
        capacity = max(max(u.count for u in units), rows)
        done: dict[int, list[SequenceResult]] = {}  # id(unit) -> its draws' sequences, in draw order
        left: dict[int, int] = {}  # id(unit) -> its draws still live
        live: list[_Draw] = []
        cache: KVCache | None = None
        last = nxt = None
        while True:
            starting, room = [], capacity - len(live)
            while queue:
                if dropped is not None and dropped(queue[0]):
                    queue.popleft()
                    continue
                if queue[0].count > room:
                    break
                starting.append(queue.popleft())
                room -= starting[-1].count
            if starting:
                cache, logits, no_speech = self._start(starting, encoder_out, prompt, cache, capacity, stats)
                for u, p in zip(starting, no_speech):
                    done[id(u)], left[id(u)] = [SequenceResult([], 0.0, p) for _ in range(u.count)], u.count
                    live += [_Draw(u, i, res, len(prompt)) for i, res in enumerate(done[id(u)])]
                last = logits if last is None else torch.cat([last, logits])
            if not live:
                break
            nxt, picked, picked_logprobs = self.draw_and_read(last, [d.result.tokens for d in live], rules,
                                                              [[d.unit.temperature] for d in live],
                                                              [d.uniform(self.seed) for d in live])
            keep = []
            for j, d in enumerate(live):
                if dropped is not None and id(d.unit) in left and dropped(d.unit):
                    left.pop(id(d.unit))
                    done.pop(id(d.unit))
                if id(d.unit) not in left:  # its unit was dropped: the draw stops here
                    continue
                res = d.result
                res.sum_logprob += picked_logprobs[j]
                ended = picked[j] == self.sp.eot
                if not ended:
                    res.tokens.append(picked[j])
                    stats.generated_tokens += 1
                    ended = self.at_end(res, self.limit(prompt, d.unit.limit)) or cut_if_looping(res, looping, stats)
                if not ended:
                    keep.append(j)
                    continue
                left[id(d.unit)] -= 1
                if not left[id(d.unit)]:
                    follow = then(d.unit, done.pop(id(d.unit)))
                    if follow is not None:
                        queue.append(follow)
            if not keep:
                live, last = [], None
                cache = cache.select([])
                continue
            if len(keep) < len(live):
                cache = cache.select(keep)
                nxt = nxt[on_device(keep, device)]
                live = [live[j] for j in keep]
            positions = on_device([[d.position] for d in live], device)
            last = self.rt.step(nxt[:, None], positions, cache)[:, -1]
            for d in live:
                d.position += 1
            stats.target_passes += len(live)
            stats.decoder_steps += 1
        stats.decoder_seconds = time.perf_counter() - t0
        return stats

    def _start(self, units: list[Draws], encoder_out: torch.Tensor, prompt: list[int], cache: KVCache | None,
               capacity: int, stats: DecodeStats) -> tuple[KVCache, torch.Tensor, list[float]]:
        """The prompt pass of ``units`` (one row each) and their draws' rows after the live ones of
        ``cache``: the cache, each draw's logits [draws, V] and each unit's no-speech probability."""
        rows = [u.row for u in units]
        enc = encoder_out[rows[0] : rows[0] + 1] if len(units) == 1 else encoder_out[rows]
        fresh = self.rt.new_cache(enc)
        logits, no_speech = self.prefill(fresh, prompt)
        stats.target_passes += len(units)
        stats.decoder_steps += 1
        src = [j for j, u in enumerate(units) for _ in range(u.count)]
        logits = logits[on_device(src, logits.device)]
        if (cache is None or not cache.batch_size) and len(units) == 1:
            return fresh.select(src), logits, no_speech.tolist()  # copies of one row: they share its cross K/V
        if cache is None or not cache.batch_size:
            cache = fresh.select([])  # no live rows: room for them is made below
        cache, slots = cache.grow(len(src), capacity, self.rt.width_for(capacity))
        cache.reserve(len(prompt))
        to, of, n = on_device(slots, logits.device), on_device(src, logits.device), len(prompt)
        for mine, theirs in ((cache.k, fresh.k), (cache.v, fresh.v)):
            mine[:, to, :, :n] = theirs[:, of, :, :n]
        for mine, theirs in ((cache.cross_k, fresh.cross_k), (cache.cross_v, fresh.cross_v)):
            mine[:, to] = theirs[:, of]
        return cache, logits, no_speech.tolist()
