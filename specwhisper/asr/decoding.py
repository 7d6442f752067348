"""Whisper's greedy decoding rules and the plain (non-speculative) decoder.

The logit rules follow openai/whisper ``decoding.py`` (SuppressBlank,
SuppressTokens, ApplyTimestampRules) and are written so that one call can
process many (row, prefix) pairs at once: the plain decoder calls them on the
last position of each row, the speculative decoder on every drafted position.
Sharing this one implementation is what makes speculative output identical.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch
from transformers.models.whisper.tokenization_whisper import LANGUAGES

from specwhisper.asr.model import KVCache, WhisperDecoderRuntime
from specwhisper.asr.types import DecodeStats
from specwhisper.runtime.device import on_device

NEG_INF = float("-inf")


def read_choices(tokens: torch.Tensor, logprobs: torch.Tensor) -> tuple[list[int], list[float]]:
    """Chosen token ids and their log-probabilities on the host in one read (one wait for a GPU per
    step or round; token ids are exact in float32, below 2^24)."""
    ids, lps = torch.stack([tokens.to(logprobs.dtype), logprobs]).tolist()
    return [int(t) for t in ids], lps


def _language_tokens(tokenizer) -> dict[str, int]:
    """``<|xx|>`` -> id for every Whisper language code the tokenizer has as a token."""
    ids = {f"<|{code}|>": tokenizer.convert_tokens_to_ids(f"<|{code}|>") for code in LANGUAGES}
    return {token: i for token, i in ids.items() if i is not None and i != tokenizer.unk_token_id}


@dataclass(frozen=True)
class SpecialTokens:
    eot: int
    sot: int
    sot_prev: int
    sot_lm: int
    no_speech: int | None
    no_timestamps: int
    transcribe: int
    translate: int
    timestamp_begin: int
    languages: dict[str, int]  # "en" -> token id
    multilingual: bool

    @classmethod
    def from_tokenizer(cls, tokenizer, generation_config, vocab_size: int | None = None) -> SpecialTokens:
        """``generation_config``'s ``lang_to_id`` and ``is_multilingual`` where it has them. A checkpoint
        without them (a bare ``save_pretrained`` of a fine-tune, say) gets its languages from the
        tokenizer's ``<|xx|>`` tokens and is multilingual when its vocabulary is (openai's rule: at
        least 51865 tokens, ``vocab_size`` of the model; English-only models have 51864)."""
        ids = tokenizer.convert_tokens_to_ids
        no_speech = next((ids(t) for t in ("<|nospeech|>", "<|nocaptions|>") if ids(t) != tokenizer.unk_token_id), None)
        lang_to_id = getattr(generation_config, "lang_to_id", None) or _language_tokens(tokenizer)
        multilingual = getattr(generation_config, "is_multilingual", None)
        if multilingual is None:
            multilingual = vocab_size >= 51865 if vocab_size is not None else len(lang_to_id) > 1
        languages = {k.strip("<|>"): int(v) for k, v in lang_to_id.items()} if multilingual else {}
        no_ts = ids("<|notimestamps|>")
        return cls(
            eot=ids("<|endoftext|>"),
            sot=ids("<|startoftranscript|>"),
            sot_prev=ids("<|startofprev|>"),
            sot_lm=ids("<|startoflm|>"),
            no_speech=no_speech,
            no_timestamps=no_ts,
            transcribe=ids("<|transcribe|>"),
            translate=ids("<|translate|>"),
            timestamp_begin=no_ts + 1,
            languages=languages,
            multilingual=multilingual,
        )

    # openai/whisper keeps this many tokens of previous text: half the text context (448), less one
    MAX_CONTEXT = 223

    def prompt(self, language: str | None, task: str, timestamps: bool, context: list[int] | None = None) -> list[int]:
        """The decoder prompt; ``context`` (previous text, an initial prompt) goes after <|startofprev|>,
        its last ``MAX_CONTEXT`` tokens."""
        seq = [self.sot_prev, *context[-self.MAX_CONTEXT :], self.sot] if context else [self.sot]
        if self.multilingual:
            if language is not None:
                seq.append(self.languages[language])
            seq.append(self.translate if task == "translate" else self.transcribe)
        if not timestamps:
            seq.append(self.no_timestamps)
        return seq


class WhisperLogitRules:
    """Suppress tokens, suppress blank at the start, and Whisper's timestamp rules."""

    def __init__(
        self,
        special: SpecialTokens,
        vocab_size: int,
        suppress_tokens: list[int],
        begin_suppress_tokens: list[int],
        timestamps: bool,
        max_initial_timestamp_index: int | None = 50,
    ):
        self.sp = special
        self.timestamps = timestamps
        self.max_initial = max_initial_timestamp_index
        always = set(t for t in suppress_tokens if 0 <= t < vocab_size)
        always |= {special.transcribe, special.translate, special.sot, special.sot_prev, special.sot_lm}
        if special.no_speech is not None:
            always.add(special.no_speech)
        if timestamps:
            always.add(special.no_timestamps)
        self.suppress = torch.zeros(vocab_size, dtype=torch.bool)
        self.suppress[sorted(always)] = True
        self.begin = torch.zeros(vocab_size, dtype=torch.bool)
        self.begin[[t for t in begin_suppress_tokens if 0 <= t < vocab_size]] = True
        self._masks: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def masks(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The suppress and begin-suppress masks on ``device`` (moved once per device)."""
        if device not in self._masks:
            self._masks[device] = (self.suppress.to(device), self.begin.to(device))
        return self._masks[device]

    def __call__(self, logits: torch.Tensor, prefixes: list[list[int]]) -> torch.Tensor:
        """Apply the rules in place to ``logits`` [N, V]; row i was preceded by ``prefixes[i]``
        (the tokens sampled so far in that sequence, prompt excluded).

        Vectorised over rows: the per-row facts (is the last token a timestamp, where is the
        last timestamp) are read from the short prefixes in Python, the masking is a handful of
        tensor ops for all rows, whatever their number (the speculative decoder verifies many
        positions at once)."""
        self.select(logits, prefixes, pick=False)
        return logits

    @torch.inference_mode()
    def select(self, logits: torch.Tensor, prefixes: list[list[int]], pick: bool = True):
        """Apply the rules in place and return (greedy tokens [N], their log-probabilities [N])."""
        n = logits.shape[0]
        tb = self.sp.timestamp_begin
        dev = logits.device
        suppress, begin = self.masks(dev)
        logits.masked_fill_(suppress, NEG_INF)
        # rows picked by host lists go to the device as queued copies (``on_device``): a list index is
        # copied synchronously, a wait for the GPU per rule and step
        empty = [i for i, seq in enumerate(prefixes) if not seq]
        if empty:
            empty = on_device(empty, dev)
            logits[empty] = logits[empty].masked_fill(begin, NEG_INF)
        if self.timestamps:
            no_ts, no_text, ts_floor = [], [], [0] * n
            for i, seq in enumerate(prefixes):
                if not seq:
                    continue
                last_ts = seq[-1] >= tb
                penult_ts = len(seq) < 2 or seq[-2] >= tb
                if last_ts:
                    (no_ts if penult_ts else no_text).append(i)
                    last_stamp = seq[-1]
                    ts_floor[i] = last_stamp - tb if not penult_ts else last_stamp - tb + 1
                else:
                    last_stamp = next((t for t in reversed(seq) if t >= tb), None)
                    if last_stamp is not None:
                        ts_floor[i] = last_stamp - tb + 1
            ts = logits[:, tb:]
            if no_ts:
                ts[on_device(no_ts, dev)] = NEG_INF
            if no_text:
                logits[on_device(no_text, dev), : self.sp.eot] = NEG_INF
            if any(ts_floor):
                floor = on_device(ts_floor, dev)[:, None]
                ts.masked_fill_(torch.arange(ts.shape[1], device=dev)[None, :] < floor, NEG_INF)
            if len(empty):
                logits[empty, :tb] = NEG_INF
                if self.max_initial is not None:
                    logits[empty, tb + self.max_initial + 1 :] = NEG_INF
            # timestamps win when their total probability beats every single text token; log_softmax
            # subtracts one constant from both sides, so the comparison is made on raw logits
            ts_lse = ts.logsumexp(dim=-1)
            text_max = logits[:, :tb].max(dim=-1).values
            ts_wins = ts_lse > text_max  # masked without asking first: no host read per step
            logits[:, :tb].masked_fill_(ts_wins[:, None], NEG_INF)
        if not pick:
            return None
        tokens = logits.argmax(dim=-1)
        lse = logits.logsumexp(dim=-1)
        chosen = logits.gather(1, tokens[:, None])[:, 0]
        return tokens, chosen - lse


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
    """Plain batched greedy decoding: one target pass per token."""

    def choose(self, logits: torch.Tensor, prefixes: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        """The next token of each row after the logit rules, and its log-probability."""
        return self.rules.select(logits, prefixes)

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
        if copies > 1:  # the cache rows are gathered: each copy's numbers are its row's (row-exact runtime)
            cache = cache.select([r for r in range(encoder_out.shape[0]) for _ in range(copies)])
            last, no_speech = last.repeat_interleave(copies, 0), no_speech.repeat_interleave(copies, 0)
        b = cache.batch_size
        results = [SequenceResult([], 0.0, p) for p in no_speech.tolist()]
        active = list(range(b))  # original row index of each cache row
        length = len(prompt)
        device = self.rt.device
        while True:
            nxt, logprobs = self.choose(last.float(), [results[r].tokens for r in active])
            picked, picked_logprobs = read_choices(nxt, logprobs)  # the step's one host read
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
        super().__init__(runtime, special, rules)
        if not 0.0 < temperature <= 1.0:
            raise ValueError(f"sampling temperature must be in (0, 1], got {temperature}")
        self.temperature = temperature
        self.seed = seed
        self._generator: torch.Generator | None = None

    def decode(self, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None = None,
               limits: list[int] | None = None, copies: int = 1) -> DecodeOutput:
        self._generator = torch.Generator(device=encoder_out.device).manual_seed(self.seed)
        return super().decode(encoder_out, prompt, features, limits, copies)

    def choose(self, logits: torch.Tensor, prefixes: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        self.rules.select(logits, prefixes, pick=False)
        probs = (logits / self.temperature).softmax(-1)
        tokens = torch.multinomial(probs, 1, generator=self._generator)[:, 0]
        return tokens, logits.log_softmax(-1).gather(1, tokens[:, None])[:, 0]


def detect_language(runtime: WhisperDecoderRuntime, special: SpecialTokens, encoder_out: torch.Tensor) -> tuple[str, float]:
    """Most likely language of the first row of ``encoder_out`` (openai/whisper's method)."""
    if not special.multilingual:
        return "en", 1.0
    cache = runtime.new_cache(encoder_out[:1])
    device = runtime.device
    logits = runtime.step(on_device([[special.sot]], device), on_device([[0]], device), cache)[0, -1]
    codes = list(special.languages)
    ids = on_device([special.languages[c] for c in codes], device)
    probs = logits[ids].float().softmax(-1).tolist()
    best = max(range(len(codes)), key=probs.__getitem__)
    return codes[best], probs[best]
