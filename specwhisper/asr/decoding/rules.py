"""Whisper's greedy decoding rules, after openai/whisper ``decoding.py`` (SuppressBlank, SuppressTokens,
ApplyTimestampRules), written so that one call processes many (row, prefix) pairs at once: the plain
decoder calls them on the last position of each row, the speculative decoder on every drafted
position. Sharing this one implementation is what makes speculative output identical."""

from __future__ import annotations

import torch

from specwhisper.asr.decoding.tokens import SpecialTokens
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
    ):
        self.sp = special
        self.timestamps = timestamps
        self.max_initial = max_initial_timestamp_index
        self._settings = (vocab_size, suppress_tokens, begin_suppress_tokens, max_initial_timestamp_index)
        self._untimed: WhisperLogitRules | None = None
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

    def for_prompt(self, prompt: list[int]) -> WhisperLogitRules:
        """The rules for a decode after ``prompt``: these, or, for a prompt ending in
        ``<|notimestamps|>``, the same rules without the timestamp ones (openai/whisper adds its
        ApplyTimestampRules only when timestamps are asked for)."""
        if not self.timestamps or not prompt or prompt[-1] != self.sp.no_timestamps:
            return self
        if self._untimed is None:
            vocab_size, suppress, begin, max_initial = self._settings
            self._untimed = WhisperLogitRules(self.sp, vocab_size, suppress, begin, False, max_initial)
        return self._untimed

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
