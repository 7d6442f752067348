"""The compact drafting vocabulary every Whisper drafter model scores with (``CompactVocab``)."""

from __future__ import annotations

import torch

from collections.abc import Callable

from specwhisper.asr.decoding.greedy import read_choices
from specwhisper.asr.decoding.rules import CapturedSelect, WhisperLogitRules
from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime

# A drafter's output head scores only the first text tokens (BPE ids are ordered by merge, so
# frequent pieces come first) plus every special/timestamp token: most of the drafter's cost is
# its head, and a miss only costs acceptance, never exactness.
HEAD_TEXT_TOKENS = 16000


class CompactVocab:
    """A drafter's vocabulary: text tokens [0, n_text) and every special token [eot, V), scored by the
    compact part of the model's own head (``OutputHead``, no second copy of its rows), with Whisper's
    rules in compact ids; ``n_text`` at or above end-of-text: the whole vocabulary.

    Why not the whole head with the other rows masked: the rules' passes over the logits (suppress,
    timestamp floors, the timestamps' total against the best token, argmax, log-sum-exp) scale with
    the vocabulary, and on this CPU took about 0.7 ms of each draft step of 4 rows over base's 51,865
    tokens. A drafter may guess from fewer tokens: the verify pass keeps the output exact.

    It also keeps the drafting rows' rule facts through a round (:meth:`start`, :meth:`choose`), on the
    device: a draft loop never reads its tokens to apply the rules."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, rules: WhisperLogitRules, n_text: int):
        v = runtime.vocab_size
        self.n_text = n_text = min(n_text, special.eot)
        self.eot = special.eot
        self.ids = torch.cat([torch.arange(n_text), torch.arange(special.eot, v)]).to(runtime.device)
        self._runtime = runtime  # the head is split when the drafter first scores (``logits``)
        self.size = n_text + v - special.eot
        self.rows: list[int] = []  # a round's rows still drafting, and their rule facts (``RuleState``)
        self.state = None

        def c(t: int | None) -> int | None:
            return None if t is None else self.compact(t)

        self.special = SpecialTokens(
            eot=c(special.eot), sot=c(special.sot), sot_prev=c(special.sot_prev), sot_lm=c(special.sot_lm),
            no_speech=c(special.no_speech), no_timestamps=c(special.no_timestamps), transcribe=c(special.transcribe),
            translate=c(special.translate), timestamp_begin=c(special.timestamp_begin),
            languages={k: c(t) for k, t in special.languages.items()}, multilingual=special.multilingual)
        sup = [self.compact(t) for t in rules.suppress.nonzero()[:, 0].tolist() if t < n_text or t >= special.eot]
        beg = [self.compact(t) for t in rules.begin.nonzero()[:, 0].tolist() if t < n_text or t >= special.eot]
        self.rules = WhisperLogitRules(self.special, self.size, sup, beg, timestamps=rules.timestamps,
                                       max_initial_timestamp_index=rules.max_initial)

    def compact(self, token: int) -> int:
        """Compact id of a target token; text tokens outside the head map to the last kept text id (the
        rules only ask whether a prefix token is a timestamp and which one)."""
        return token - self.eot + self.n_text if token >= self.eot else min(token, self.n_text - 1)

    def logits(self, x: torch.Tensor) -> torch.Tensor:
        """[N, d] -> [N, compact vocab] float32 logits."""
        if self.n_text == self.eot:
            return self._runtime.logits(x).float()
        return self._runtime.compact_head(self.n_text, self.eot).compact(x).float()

    def start(self, rows: list[int], prefixes: list[list[int]]) -> None:
        """A draft round's drafting ``rows`` and what each drafts after (its tokens, in model ids)."""
        self.rows, self.state = rows, self.rules.state([self._short(p) for p in prefixes], self.ids.device)

    def choose(self, logits: torch.Tensor, rows: list[int], log_min_conf: float) -> tuple[torch.Tensor, torch.Tensor]:
        """The greedy token (a model id, device [n]) of each of ``rows`` (those of the round still drafting,
        in order) under the rules, and whether its draft ends there: at end-of-text, or where the
        drafter's own log-probability falls below ``log_min_conf``."""
        self.state, self.rows = self.state.narrow(self.rows, rows), rows  # rows that ended drop out
        picks, logprobs = self.rules.select_state(logits, self.state)
        self.state = self.rules.advance(self.state, picks)
        return self.ids[picks], (picks == self.special.eot) | (logprobs < log_min_conf)

    def select(self, logits: torch.Tensor, prefixes: list[list[int]]) -> tuple[list[int], list[float]]:
        """Greedy target token ids and their (compact) log-probabilities under the rules, read to the host
        at once (ids exact in float32, below 2^24)."""
        toks, lps = self.rules.select(logits, [self._short(p) for p in prefixes])
        return read_choices(self.ids[toks], lps)

    def _short(self, prefix: list[int]) -> list[int]:
        """The part of a prefix the rules read, in compact ids: its last two tokens, after the latest
        timestamp before them (whether the prefix is empty, ends in timestamps, and the last one)."""
        tb = self.eot + (self.special.timestamp_begin - self.n_text)
        stamp = next((t for t in reversed(prefix[:-2]) if t >= tb), None)
        return [self.compact(t) for t in ([] if stamp is None else [stamp]) + prefix[-2:]]


class WholeBatchPicks:
    """A drafter's picks for all rows of a batch at once, from their states [rows, d]: its scores
    (``scores``: states -> compact logits), Whisper's rules and the pick in one ``CapturedSelect``, the
    rule facts advanced on the device from step to step. On a GPU a draft step is bound by launching
    kernels: these are about 55 of those a step launches outside its layers' graph (distil-large-v3
    shapes on an H100: a 2-layer draft step took 1.8-2.1 ms, the 32-layer step 3.4 ms). Rows that do
    not draft are picked for too, and ignored; the picks come back for every row (``DraftSteps``
    takes such columns). ``states``: the buffer the picks read (:attr:`h`). ``pool``: ``CapturedCall``'s
    (a drafter's picks for each batch size share one)."""

    def __init__(self, vocab: CompactVocab, scores: Callable[[torch.Tensor], torch.Tensor], states: torch.Tensor,
                 log_min_conf: float, pool=None):
        self.vocab = vocab

        def finish(picks: torch.Tensor, logprobs: torch.Tensor) -> tuple[torch.Tensor]:
            ends = (picks == vocab.special.eot) | (logprobs < log_min_conf)
            return (torch.stack([vocab.ids[picks], ends.long()]),)

        self.select = CapturedSelect(vocab.rules, states, finish, scores=scores, advance=True, pool=pool)

    @property
    def rows(self) -> int:
        return self.select.rows

    @property
    def h(self) -> torch.Tensor:
        """The states the next :meth:`pick` reads (fill rows in place, or pass them all)."""
        return self.select.x

    def start(self, rows: list[int], prefixes: list[list[int]]) -> None:
        """A round's drafting ``rows`` and their prefixes (in model ids; other rows: any)."""
        short = [[] for _ in range(self.rows)]
        for r, p in zip(rows, prefixes):
            short[r] = self.vocab._short(p)
        self.select.set_facts(short)

    def pick(self, states: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Every row's greedy token (a model id, device [rows]) and whether its draft ends there (0/1),
        from ``states`` (None: those already in :attr:`h`)."""
        out = self.select(states)[0].clone()  # the next call overwrites the capture's own
        return out[0], out[1]
