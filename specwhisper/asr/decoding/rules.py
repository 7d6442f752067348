"""Whisper's greedy decoding rules, after openai/whisper ``decoding.py`` (SuppressBlank, SuppressTokens,
ApplyTimestampRules), and faster-whisper's two penalties on repetition (CTranslate2's RepetitionPenalty and
NoRepeatNgram), written so that one call processes many (row, prefix) pairs at once: the plain
decoder calls them on the last position of each row, the speculative decoder on every drafted
position. Sharing this one implementation is what makes speculative output identical."""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import torch

from specwhisper.asr.decoding.segments import TIME_PRECISION
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.runtime.graphs import CapturedCall
from specwhisper.hardware.device import on_device

NEG_INF = float("-inf")


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
        repetition_penalty: float = 1.0,
        no_repeat_ngram_size: int = 0,
        suppress_blank: bool = True,
        lead_is_text: bool = True,
    ):
        """``repetition_penalty``, ``no_repeat_ngram_size``: faster-whisper's (CTranslate2's) penalties on
        the tokens sampled so far in the decode (its prompt excluded, timestamps included): each such
        token's logit is divided by the penalty when positive, multiplied when negative; a token that
        would complete an n-gram already sampled is not written. 1.0 and 0: off. ``suppress_blank``: the
        ``begin_suppress_tokens`` (a blank and end-of-text) are not a decode's first token (openai-whisper's
        SuppressBlank); ``max_initial_timestamp_index``: nor a timestamp past this one (None: any).
        ``lead_is_text``: tokens after a prompt's SOT sequence are read as text Whisper wrote (faster-whisper's
        prefix, :meth:`for_prompt`); False: as prompt, sampling starts after them (openai-whisper's ``decode``)."""
        self.sp = special
        self.timestamps = timestamps
        self.max_initial = max_initial_timestamp_index
        self.repetition_penalty = float(repetition_penalty)
        self.no_repeat_ngram_size = int(no_repeat_ngram_size)
        # what :meth:`_variant` builds a variant from
        self._settings = dict(vocab_size=vocab_size, suppress_tokens=tuple(sorted(set(suppress_tokens))),
                              begin_suppress_tokens=tuple(begin_suppress_tokens), timestamps=timestamps,
                              max_initial_timestamp_index=max_initial_timestamp_index,
                              repetition_penalty=self.repetition_penalty, no_repeat_ngram_size=self.no_repeat_ngram_size,
                              suppress_blank=suppress_blank, lead_is_text=lead_is_text)
        self._variants: dict[tuple, WhisperLogitRules] = {}
        self.lead: tuple[int, ...] = ()  # tokens before every prefix (``for_prompt``: a forced prefix)
        self._leads: dict[tuple[int, ...], WhisperLogitRules] = {}
        always = set(t for t in suppress_tokens if 0 <= t < vocab_size)
        always |= {special.transcribe, special.translate, special.sot, special.sot_prev, special.sot_lm}
        if special.no_speech is not None:
            always.add(special.no_speech)
        if timestamps:
            always.add(special.no_timestamps)
        self.suppress = torch.zeros(vocab_size, dtype=torch.bool)
        self.suppress[sorted(always)] = True
        self.begin = torch.zeros(vocab_size, dtype=torch.bool)
        if suppress_blank:
            self.begin[[t for t in begin_suppress_tokens if 0 <= t < vocab_size]] = True
        self._masks: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}

    def for_prompt(self, prompt: list[int]) -> WhisperLogitRules:
        """The rules for a decode after ``prompt``: these, or, for a prompt whose SOT sequence ends in
        ``<|notimestamps|>``, the same rules without the timestamp ones (openai/whisper adds its
        ApplyTimestampRules only when timestamps are asked for). Tokens after the SOT sequence
        (``SpecialTokens.lead``: a forced prefix) are read as the start of every row's tokens: the first
        token after ``<|0.00|> And so`` is text or a timestamp, not the initial timestamp."""
        lead = self.sp.lead(prompt)
        sot_sequence = prompt[: len(prompt) - len(lead)]
        rules = self
        if self.timestamps and sot_sequence and sot_sequence[-1] == self.sp.no_timestamps:
            rules = self._variant(timestamps=False)
        return rules._led(tuple(lead)) if lead and self._settings["lead_is_text"] else rules

    def _led(self, lead: tuple[int, ...]) -> WhisperLogitRules:
        """These rules with ``lead`` before every prefix they read (made once per lead; no variant is made of
        them: :meth:`for_prompt` is the last step)."""
        if lead not in self._leads:
            clone = copy.copy(self)
            clone.lead, clone._leads, clone._variants = lead, {}, {}
            self._leads[lead] = clone
        return self._leads[lead]

    def _variant(self, **changes) -> WhisperLogitRules:
        """These rules with some settings changed (made once per change)."""
        if self.lead:
            raise ValueError("a variant of rules with a lead would drop it: make variants before for_prompt")
        settings = {**self._settings, **changes}
        if settings == self._settings:
            return self
        key = tuple(sorted(changes.items()))
        if key not in self._variants:
            self._variants[key] = WhisperLogitRules(self.sp, **settings)
        return self._variants[key]

    def _with_lead(self, prefixes: list[list[int]]) -> list[list[int]]:
        return [[*self.lead, *p] for p in prefixes] if self.lead else prefixes

    @property
    def penalized(self) -> bool:
        """Whether the rules read each prefix's tokens (a penalty on repetition is on): their state then
        holds the prefixes themselves (``RuleState.history``), and the captured calls are not used."""
        return self.repetition_penalty != 1.0 or self.no_repeat_ngram_size > 0

    def with_penalties(self, repetition_penalty: float = 1.0, no_repeat_ngram_size: int = 0) -> WhisperLogitRules:
        """These rules with the penalties on repetition set so."""
        return self._variant(repetition_penalty=float(repetition_penalty), no_repeat_ngram_size=int(no_repeat_ngram_size))

    def with_suppressed(self, suppress_tokens: list[int]) -> WhisperLogitRules:
        """These rules with ``suppress_tokens`` never written instead of theirs (a call's ``suppress_tokens``)."""
        return self._variant(suppress_tokens=tuple(sorted(set(suppress_tokens))))

    def with_prompt_lead(self) -> WhisperLogitRules:
        """These rules reading the tokens after a prompt's SOT sequence as prompt (openai-whisper's ``prefix``)."""
        return self._variant(lead_is_text=False)

    def with_start(self, suppress_blank: bool = True, max_initial_timestamp: float | None = 1.0) -> WhisperLogitRules:
        """These rules with their first token's limits set so (openai-whisper's ``suppress_blank`` and
        ``max_initial_timestamp``, seconds, None: any; its index rounded as openai-whisper rounds it)."""
        index = None if max_initial_timestamp is None else round(max_initial_timestamp / TIME_PRECISION)
        return self._variant(suppress_blank=bool(suppress_blank), max_initial_timestamp_index=index)

    def masks(self, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        """The suppress and begin-suppress masks on ``device`` (moved once per device)."""
        if device not in self._masks:
            self._masks[device] = (self.suppress.to(device), self.begin.to(device))
        return self._masks[device]

    def __call__(self, logits: torch.Tensor, prefixes: list[list[int]]) -> torch.Tensor:
        """Apply the rules in place to ``logits`` [N, V]; row i was preceded by ``prefixes[i]``
        (the tokens sampled so far in that sequence, prompt excluded)."""
        self.select(logits, prefixes, pick=False)
        return logits

    @torch.inference_mode()
    def select(self, logits: torch.Tensor, prefixes: list[list[int]], pick: bool = True):
        """Apply the rules in place and return (greedy tokens [N], their log-probabilities [N])."""
        return self.select_state(logits, self.state(prefixes, logits.device), pick)

    def state(self, prefixes: list[list[int]], device: torch.device | str) -> RuleState:
        """What the rules read of each prefix, on ``device``: the per-row facts (is it empty, does it end
        in one or two timestamps, its last timestamp) are read from the short prefixes in Python and
        queued to the device as one small copy (``on_device``: a copy from a host list would wait for
        the GPU)."""
        prefixes = self._with_lead(prefixes)
        rows = self._facts(prefixes)
        state = RuleState.of(on_device(rows, device, dtype=torch.long).reshape(len(rows), 4),
                             maybe_empty=any(r[0] for r in rows))
        if self.penalized:
            # each prefix right-aligned in one [N, C] block, -1 before it: its end is the block's
            width = max(1, *(len(p) for p in prefixes)) if prefixes else 1
            block = [[-1] * (width - len(p)) + list(p) for p in prefixes]
            state.history = on_device(block, device, dtype=torch.long).reshape(len(prefixes), width)
            state.end = torch.full((len(prefixes),), width, dtype=torch.long, device=state.history.device)
        return state

    def facts(self, prefixes: list[list[int]]) -> list[list[int]]:
        """Per prefix, the facts :class:`RuleState` holds, on the host: [empty, last_ts, penult_ts, stamp]."""
        return self._facts(self._with_lead(prefixes))

    def _facts(self, prefixes: list[list[int]]) -> list[list[int]]:
        tb = self.sp.timestamp_begin
        rows = []
        for seq in prefixes:
            stamp = next((t for t in reversed(seq) if t >= tb), None)
            last_ts = bool(seq) and seq[-1] >= tb
            penult_ts = len(seq) < 2 or seq[-2] >= tb
            rows.append([int(not seq), int(last_ts), int(penult_ts), -1 if stamp is None else stamp - tb])
        return rows

    def advance(self, state: RuleState, tokens: torch.Tensor) -> RuleState:
        """The state after each row's prefix grew by ``tokens`` [N] (device tensors: a draft loop keeps
        its rows' rule facts without reading its tokens on the host). :meth:`along` over one token (its
        column 1) in five operations where ``along`` takes about twenty: a draft step on a GPU is bound
        by launching them."""
        is_ts = tokens >= self.sp.timestamp_begin
        # a prefix of one token counts as preceded by a timestamp
        out = RuleState(torch.zeros_like(is_ts), is_ts, state.last_ts | state.empty,
                        torch.where(is_ts, tokens - self.sp.timestamp_begin, state.stamp), maybe_empty=False)
        if state.history is not None:
            history = torch.cat([state.history, torch.full_like(state.history[:, :1], -1)], 1)
            out.history = history.scatter(1, state.end[:, None], tokens[:, None])
            out.end = state.end + 1
        return out

    def along(self, state: RuleState, tokens: torch.Tensor) -> RuleState:
        """The states [N, m + 1] after each row's prefix and its first 0..m ``tokens`` [N, m] (device
        tensors: the verify pass scores every drafted position without reading the drafts on the host)."""
        is_ts = tokens >= self.sp.timestamp_begin
        m = tokens.shape[1]
        empty = torch.cat([state.empty[:, None], torch.zeros_like(is_ts)], 1)
        last_ts = torch.cat([state.last_ts[:, None], is_ts], 1)
        # a prefix of one token counts as preceded by a timestamp
        penult_ts = torch.cat([state.penult_ts[:, None], (state.last_ts | state.empty)[:, None], is_ts[:, :-1]], 1)
        # the last timestamp: that of the latest column holding one (column 0: the prefix's own)
        stamps = torch.cat([state.stamp[:, None], tokens - self.sp.timestamp_begin], 1)
        marks = torch.cat([torch.ones_like(state.empty)[:, None], is_ts], 1)
        latest = (marks * torch.arange(m + 1, device=tokens.device)).cummax(dim=1).values
        out = RuleState(empty, last_ts, penult_ts[:, : m + 1], stamps.gather(1, latest), state.maybe_empty)
        if state.history is not None:
            out.history, out.end = _histories_along(state.history, state.end, tokens)
        return out

    @torch.inference_mode()
    def select_state(self, logits: torch.Tensor, state: RuleState, pick: bool = True):
        """:meth:`select` after prefixes described by ``state``: the masking is a handful of tensor ops
        for all rows, whatever their number (the speculative decoder verifies many positions at once),
        none of which waits for the device."""
        tb = self.sp.timestamp_begin
        dev = logits.device
        if self.penalized:
            self._penalize(logits, state)
        suppress, begin = self.masks(dev)
        logits.masked_fill_(suppress, NEG_INF)
        if state.maybe_empty:
            logits.masked_fill_(state.empty[:, None] & begin, NEG_INF)
        if self.timestamps:
            ts = logits[:, tb:]
            cols = torch.arange(ts.shape[1], device=dev)[None, :]
            # after two timestamps: text only (no timestamp at all); after one: another timestamp (no text);
            # timestamps never go backwards, and a pair's second one may repeat the first
            pair = state.last_ts & state.penult_ts
            no_text = state.last_ts & ~state.penult_ts
            floor = torch.where(state.stamp >= 0, state.stamp + 1 - no_text.long(), 0)
            floor = torch.where(pair, ts.shape[1], floor)
            ts.masked_fill_(cols < floor[:, None], NEG_INF)
            wipe = torch.zeros_like(no_text)  # rows whose text and special tokens all go
            if state.maybe_empty:
                wipe = state.empty  # a first token is a timestamp
                if self.max_initial is not None:
                    ts.masked_fill_(state.empty[:, None] & (cols > self.max_initial), NEG_INF)
            # timestamps win when their total probability beats every single other token (text masked for
            # a ``no_text`` row); log_softmax subtracts one constant from both sides, so the comparison is
            # made on raw logits
            eot = self.sp.eot
            special_max = logits[:, eot:tb].max(dim=-1).values
            other_max = torch.where(no_text, special_max, torch.maximum(logits[:, :eot].max(dim=-1).values, special_max))
            wipe = wipe | (ts.logsumexp(dim=-1) > other_max)
            logits[:, :eot].masked_fill_((wipe | no_text)[:, None], NEG_INF)
            logits[:, eot:tb].masked_fill_(wipe[:, None], NEG_INF)
        if not pick:
            return None
        tokens = logits.argmax(dim=-1)
        lse = logits.logsumexp(dim=-1)
        chosen = logits.gather(1, tokens[:, None])[:, 0]
        return tokens, chosen - lse

    def _penalize(self, logits: torch.Tensor, state: RuleState) -> None:
        """The penalties on repetition, in place, before Whisper's rules (CTranslate2's order), from each
        row's prefix (``state.history``): elementwise, so a verify position gets the bits a plain step does."""
        if state.history is None:
            raise ValueError("penalized rules need the prefixes' tokens: a state made by WhisperLogitRules.state")
        rows, vocab = logits.shape
        history, end = state.history, state.end
        inside = (history >= 0) & (torch.arange(history.shape[1], device=history.device)[None, :] < end[:, None])
        if self.repetition_penalty != 1.0:
            seen = _token_mask(torch.where(inside, history, vocab), vocab)
            p = self.repetition_penalty
            logits.copy_(torch.where(seen, torch.where(logits < 0, logits * p, logits / p), logits))
        if self.no_repeat_ngram_size > 0:
            banned = _ngram_completions(history, end, self.no_repeat_ngram_size, vocab)
            if banned is not None:
                logits.masked_fill_(banned, NEG_INF)


def _token_mask(ids: torch.Tensor, vocab: int) -> torch.Tensor:
    """[N, vocab] bool: True at each row's ``ids`` [N, C] (``vocab`` marks no token)."""
    return torch.zeros((ids.shape[0], vocab + 1), dtype=torch.bool, device=ids.device).scatter_(1, ids, True)[:, :vocab]


def _ngram_completions(history: torch.Tensor, end: torch.Tensor, n: int, vocab: int) -> torch.Tensor | None:
    """[N, vocab] bool: the tokens that would complete, after each row's prefix (``history`` [N, C] up to
    column ``end``, -1 where there is no token), an n-gram the prefix already holds (CTranslate2's
    NoRepeatNgram: the prefix's last n - 1 tokens looked for earlier, each find's next token banned)."""
    rows, width = history.shape
    if width < n:
        return None
    grams = history.unfold(1, n, 1)  # [N, C - n + 1, n]: the n-gram starting at each column
    starts = torch.arange(grams.shape[1], device=history.device)
    found = (starts[None, :] + n - 1 < end[:, None]) & (grams >= 0).all(-1)
    if n > 1:
        at = end[:, None] - (n - 1) + torch.arange(n - 1, device=history.device)[None, :]
        last = history.gather(1, at.clamp(min=0))
        whole = (at >= 0).all(-1) & (last >= 0).all(-1)
        found &= whole[:, None] & (grams[..., : n - 1] == last[:, None, :]).all(-1)
    return _token_mask(torch.where(found, grams[..., n - 1], vocab), vocab)


def _histories_along(history: torch.Tensor, end: torch.Tensor, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The prefixes [N, m + 1, C + m] (and their ends [N, m + 1]) after each row's prefix (``history``
    [N, C] up to ``end``) and its first 0..m ``tokens`` [N, m]."""
    rows, m = tokens.shape
    width = history.shape[1] + m
    grown = torch.cat([history, torch.full_like(tokens, -1)], 1)[:, None, :].expand(rows, m + 1, width)
    if m == 0:
        return grown, end[:, None]
    offset = torch.arange(width, device=history.device)[None, :] - end[:, None]  # [N, C + m]: column - end
    written = tokens.gather(1, offset.clamp(0, m - 1))  # the draft each column would hold
    j = torch.arange(m + 1, device=history.device)[None, :, None]
    holds = (offset[:, None, :] >= 0) & (offset[:, None, :] < j)  # column within position j's first j drafts
    return torch.where(holds, written[:, None, :], grown), end[:, None] + torch.arange(m + 1, device=history.device)[None, :]


@dataclass
class RuleState:
    """The facts the rules read of each row's prefix, as device tensors [N]: ``empty`` (nothing sampled
    yet), ``last_ts`` / ``penult_ts`` (its last / second-to-last token is a timestamp; a prefix of one
    token counts as preceded by one), ``stamp`` (its last timestamp's index, -1 when it has none).
    ``maybe_empty``: False when no row can be empty (the masks for a first token are then skipped).
    With a penalty on repetition, the prefixes themselves: ``history`` [N, C] (-1 where no token) up to
    column ``end`` [N]."""

    empty: torch.Tensor
    last_ts: torch.Tensor
    penult_ts: torch.Tensor
    stamp: torch.Tensor
    maybe_empty: bool = True
    history: torch.Tensor | None = None
    end: torch.Tensor | None = None

    @staticmethod
    def of(facts: torch.Tensor, maybe_empty: bool = True) -> RuleState:
        """The state whose facts are the columns of ``facts`` [N, 4] (:meth:`WhisperLogitRules.facts`)."""
        return RuleState(facts[:, 0] > 0, facts[:, 1] > 0, facts[:, 2] > 0, facts[:, 3], maybe_empty)

    def facts(self) -> torch.Tensor:
        """The state as :meth:`of` reads it [N, 4]."""
        return torch.stack([self.empty.long(), self.last_ts.long(), self.penult_ts.long(), self.stamp], 1)

    def at(self, index: tuple[torch.Tensor, torch.Tensor]) -> RuleState:
        """The states [N] of the (row, column) positions ``index`` of a state over [rows, columns]."""
        return RuleState(self.empty[index], self.last_ts[index], self.penult_ts[index], self.stamp[index],
                         self.maybe_empty, None if self.history is None else self.history[index],
                         None if self.end is None else self.end[index])

    def narrow(self, rows: list[int], keep: list[int]) -> RuleState:
        """The state of the rows ``keep``, a subset of ``rows`` (the rows this state describes, in order):
        a draft loop's rows that ended drop out."""
        if keep == rows:
            return self
        at = {r: j for j, r in enumerate(rows)}
        idx = on_device([at[r] for r in keep], self.empty.device)
        return RuleState(self.empty[idx], self.last_ts[idx], self.penult_ts[idx], self.stamp[idx], self.maybe_empty,
                         None if self.history is None else self.history[idx], None if self.end is None else self.end[idx])


class CapturedSelect:
    """The rules and the greedy pick (or a draw: ``sampled``, from :attr:`temperatures` and :attr:`uniforms`,
    buffers set before a call) for every row of a batch in one ``CapturedCall`` (a CUDA graph on a
    GPU): on a GPU a step is bound by launching kernels, and :meth:`WhisperLogitRules.select` is about
    55 of them, each queued by the host for microseconds of device work.

    Inputs are fixed buffers: :attr:`x` (the logits [rows, V], or what ``scores`` makes them from, a
    drafter's states: the tensor ``x`` passed in, not a copy, so calls that never run at the same time
    may read views of one buffer; without ``scores`` the call masks it in place) and :attr:`facts` (the rows' :class:`RuleState`, set from prefixes by
    :meth:`set_facts`; ``advance``: the call moves them past its picks, for a draft loop's next step).
    ``finish(tokens, logprobs)`` turns the picks into the call's outputs (in the capture, too). The
    kernels are those the same calls launch eagerly, for the same shapes: no cuBLAS product is among
    them (``scores`` aside, whose numbers only shape a drafter's guesses), so a plain step's choice
    has the bits of the eager one."""

    def __init__(self, rules: WhisperLogitRules, x: torch.Tensor,
                 finish: Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, ...]],
                 scores: Callable[[torch.Tensor], torch.Tensor] | None = None, advance: bool = False, pool=None,
                 sampled: bool = False):
        self.rules, self.scores, self.finish, self.advance = rules, scores, finish, advance
        self.x = x
        self.facts = torch.zeros((x.shape[0], 4), dtype=torch.long, device=x.device)
        # ``sampled``: each row's token is drawn (``tempered_draw``) at its temperature with its random number
        self.sampled = sampled
        self.temperatures = torch.ones((x.shape[0], 1), dtype=torch.float32, device=x.device)
        self.uniforms = torch.zeros(x.shape[0], dtype=torch.float32, device=x.device)
        self.call = CapturedCall(self._run, x.device, updates=(self.x, self.facts), pool=pool)

    @property
    def rows(self) -> int:
        return self.x.shape[0]

    def set_facts(self, prefixes: list[list[int]]) -> None:
        """The rows' facts from their prefixes (``WhisperLogitRules.facts``), queued to the device."""
        self.facts.copy_(on_device(self.rules.facts(prefixes), self.facts.device).reshape(self.rows, 4))

    def __call__(self, x: torch.Tensor | None = None) -> tuple[torch.Tensor, ...]:
        """``finish``'s outputs for ``x`` (None: what :attr:`x` holds), the capture's own tensors:
        overwritten by the next call."""
        if x is not None:
            self.x.copy_(x)
        return self.call()

    def _run(self) -> tuple[torch.Tensor, ...]:
        logits = self.x if self.scores is None else self.scores(self.x)  # the buffer is masked in place
        state = RuleState.of(self.facts)
        if self.sampled:
            self.rules.select_state(logits, state, pick=False)
            tokens, logprobs = tempered_draw(logits, self.temperatures, self.uniforms)
        else:
            tokens, logprobs = self.rules.select_state(logits, state)
        if self.advance:
            self.facts.copy_(self.rules.advance(state, tokens).facts())
        return self.finish(tokens, logprobs)


def tempered_draw(logits: torch.Tensor, temperatures: torch.Tensor, uniforms: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A token of each row of ``logits`` [rows, V] (the rules applied) drawn at its temperature
    (``temperatures`` [rows, 1]) with its random number (``uniforms`` [rows] in [0, 1)), and its untempered
    log-probability: the first token whose cumulative probability passes the number."""
    cdf = (logits / temperatures).softmax(-1).cumsum(-1)
    total = cdf[:, -1:]
    # below the total, so the token found has a probability above 0 (the rules' masked ones have none)
    x = torch.minimum(uniforms[:, None].to(cdf.dtype) * total, torch.nextafter(total, torch.zeros_like(total)))
    tokens = torch.searchsorted(cdf, x, right=True)[:, 0]
    return tokens, logits.log_softmax(-1).gather(1, tokens[:, None])[:, 0]
