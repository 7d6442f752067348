"""openai-whisper's quality safeguards around one decode: temperature fallback and the silence rule.

A chunk is decoded greedily (speculatively when a drafter runs: token-identical to plain greedy) or
by beam search. When the text is too repetitive (gzip compression ratio above 2.4, or it ends in a
loop: ``quality.ends_in_loop``) or too unlikely
(average log-probability below -1.0), it is decoded again by sampling at the next temperature
(0.2, 0.4, ... 1.0, best of 5), as openai/whisper ``transcribe.decode_with_fallback`` does; those
passes are plain (no drafter), and each segment says at which temperature it was decoded. When every
temperature fails the check, the attempt kept is faster-whisper's choice (the most likely among those
that are not repetitive, else the most likely): openai keeps the last one, at temperature 1.0, which
is the most random.

A sample may write at most ``quality.SAMPLE_TOKENS_BASE`` + ``sample_tokens_per_s`` tokens per second of
its chunk's audio (openai lets each run to 224 tokens, faster-whisper to 448). A sample at that cap
is unfinished: it is a best-of candidate only when all five are, and it fails the checks. Why: one
looping draw keeps its whole batch of draws decoding. On the 10-minute conversation of
``bench/longform.py`` 2 of 46 chunks fell back; in 2 of their 5 sampled passes one draw of ten looped
to 445 tokens while the others ended by token 25, and those two passes took 35 of the 47 seconds of
sampling. Speech writes 2-8 tokens per second (the eval clips at most 7.5, timestamps included);
12 leaves room for fast speech and scripts that take more tokens per second. A sample whose text
already fails the repetition check (checked every 8 tokens from its 32nd,
``specwhisper.asr.decoding.greedy.LOOP_CHECK_FROM``) stops there as one at its cap does: a loop rarely
ends before the cap, and the tokens between are work for nothing. The greedy decode's text is checked
the same way when a later temperature follows (it would fail the check and be sampled anyway); the
speculative decoder asks the check at the same tokens, so its text stays the plain decoder's.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Callable

import torch

from specwhisper.asr.decoding.greedy import Decoder, Draws, SamplingDecoder, SequenceResult
from specwhisper.asr.decoding.quality import Attempt, QualityRules, is_cut, length_normalized, repetitive
from specwhisper.hardware.device import on_device
from specwhisper.results.stats import DecodeStats


def _likelihood(seq: SequenceResult, rules: QualityRules) -> tuple[bool, float]:
    """openai's ranking of best-of candidates (``length_normalized``); a draw stopped at its cap only
    wins when every draw was."""
    return not seq.hit_max_length, length_normalized(seq.sum_logprob, len(seq.tokens), rules.length_penalty,
                                                     rules.length_exponent)


def _final(attempts: list[Attempt], rules: QualityRules) -> Attempt:
    """The last attempt when it passed; else faster-whisper's pick: the most likely of those that are
    not repetitive, else of all; samples cut at their cap only when nothing else is left."""
    if not rules.needs_fallback(attempts[-1]):
        return attempts[-1]
    whole = [a for a in attempts if not is_cut(a)]
    fine = [a for a in whole if not rules.too_repetitive(a)]
    return replace(max(fine or whole or attempts, key=lambda a: a.seq.avg_logprob), passed=False)


def decode_with_fallback(
    first: Decoder,
    sampler: Callable[[], SamplingDecoder],
    encoder_out: torch.Tensor,
    prompt: list[int],
    features: torch.Tensor | None,
    rules: QualityRules,
    text_of: Callable[[list[int]], str],
    stats: DecodeStats,
    seconds: list[float] | None = None,
    rows: int | None = None,
    keys: list[int] | None = None,
    ahead: bool = False,
) -> list[Attempt]:
    """Decode every row of ``encoder_out`` (``first_attempts``); rows that fail the checks are sampled
    again at the next temperature, ``best_of`` draws each, capped by ``seconds`` (each row's audio)
    (``sample_again``, which says what ``rows``, ``keys`` and ``ahead`` do).

    Returns the attempt kept per row; the counters of every pass are added to ``stats``
    (``fallback_*`` for the sampled ones)."""
    history = first_attempts(first, encoder_out, prompt, features, rules, text_of, stats)
    sample_again(sampler, [Failing(encoder_out, history, seconds, keys)], prompt, rules, text_of, stats, rows, ahead)
    return kept(history, rules)


def first_attempts(first: Decoder, encoder_out: torch.Tensor, prompt: list[int], features: torch.Tensor | None,
                   rules: QualityRules, text_of: Callable[[list[int]], str], stats: DecodeStats) -> list[list[Attempt]]:
    """Each row's attempts so far: its greedy (or beam, or speculative) decode when the schedule starts at
    temperature 0, else none. A greedy text that loops, and so would be sampled again, stops where it
    is first found looping."""
    t0 = rules.temperatures[0]
    if t0 != 0.0:
        return [[] for _ in range(encoder_out.shape[0])]
    limit = rules.compression_ratio_threshold
    cut = _looping(text_of, limit) if limit is not None and len(rules.temperatures) > 1 else None
    out = first.decode(encoder_out, prompt, features=features, looping=cut)
    stats.merge(out.stats)
    return [[Attempt.of(seq, t0, text_of(seq.tokens))] for seq in out.sequences]


def _looping(text_of: Callable[[list[int]], str], limit: float) -> Callable[[list[int]], bool]:
    """Whether a text fails the repetition check already."""
    return lambda tokens: repetitive(text_of(tokens), limit)


@dataclass
class Failing:
    """A batch's rows for ``sample_again``: its encoder output, each row's attempts so far (the rows
    whose last attempt fails the checks are sampled; their attempts are added here), the seconds of
    each row's audio (None: no cap) and each row's chunk key (None: the row's index)."""

    encoder_out: torch.Tensor
    history: list[list[Attempt]]
    seconds: list[float] | None = None
    keys: list[int] | None = None

    def rows(self, rules: QualityRules) -> list[int]:
        """The rows to sample: no attempt yet, or a last one that fails and has a next temperature."""
        following = set(rules.temperatures[:-1])
        return [r for r, h in enumerate(self.history)
                if not h or (h[-1].temperature in following and rules.needs_fallback(h[-1]))]


def sampled_rows(attempts: list[Attempt], rules: QualityRules) -> int:
    """How many rows of a batch were sampled after its first pass (``Failing.rows`` then), from the
    attempt kept per row: one kept at a sampled temperature, or one that failed every check."""
    if rules.temperatures[0] != 0.0:
        return len(attempts)
    return 0 if len(rules.temperatures) == 1 else sum(a.temperature > 0.0 or not a.passed for a in attempts)


def sample_again(
    sampler: Callable[[], SamplingDecoder],
    batches: list[Failing],
    prompt: list[int],
    rules: QualityRules,
    text_of: Callable[[list[int]], str],
    stats: DecodeStats,
    rows: int | None = None,
    ahead: bool = False,
    report: Callable[[], None] | None = None,
) -> None:
    """The failing rows of ``batches`` (all after ``prompt``) sampled at the next temperatures until an
    attempt passes or none is left, each row's attempts added to its history. The samples of all
    failing rows and temperatures, of every batch given, are one continuous decode
    (``SamplingDecoder.stream``) of as many draws at a time as ``rows`` (the batch size; None: the
    largest batch's rows): on a GPU a step of a few rows costs what a step of the batch does, and the
    stream's last steps, where few draws are left, are paid once for all the batches. ``keys`` name
    each row's chunk for its draws' random numbers (``Draws.key``): a chunk's samples are then its
    own, whatever the rows beside it.

    ``ahead``: a failing row's later temperatures wait in the decode's queue at once, temperature by
    temperature over the rows, each starting when rows are free instead of when the one before it
    failed; once a row's attempt passes, its later temperatures are dropped, started or not. The
    attempts are the same (each draw's random numbers are its own), in fewer decoder steps for more
    rows' work: for a GPU, where a step costs about the same at any row count. The counters of the
    sampled passes are added to ``stats`` (``fallback_*``). ``report()`` is called as each row's draws at a
    temperature end; what it raises stops the decode there."""
    chosen = [(b, b.rows(rules)) for b in batches]
    pooled = [(b, r) for b, rows_of in chosen for r in rows_of]  # the stream's rows: (batch, its row)
    if not pooled:
        return
    capped = rules.sample_tokens_per_s is not None
    following = dict(zip(rules.temperatures, rules.temperatures[1:]))
    history = [b.history[r] for b, r in pooled]
    drawn: dict[tuple[int, float], Attempt] = {}  # ahead: attempts not yet in their row's history
    later = rules.temperatures[1:] if rules.temperatures[0] == 0.0 else rules.temperatures  # the sampled ones

    def draws(row: int, temperature: float) -> Draws:
        b, r = pooled[row]
        limit = rules.sample_limit(b.seconds[r]) if capped and b.seconds is not None else None
        return Draws(row, temperature, rules.best_of, limit, key=r if b.keys is None else b.keys[r])

    def settled(row: int) -> bool:
        """The row's attempts end with one that passed, or with the last temperature."""
        last = history[row][-1] if history[row] else None
        return last is not None and (last.temperature not in following or not rules.needs_fallback(last))

    def wanted(row: int) -> tuple[int, float]:
        """Ahead: the row and the temperature its attempts take next."""
        return row, following[history[row][-1].temperature] if history[row] else later[0]

    def then(unit: Draws, sequences: list[SequenceResult]) -> Draws | None:
        if report is not None:
            report()
        best = max(sequences, key=lambda seq: _likelihood(seq, rules))
        attempt = Attempt.of(best, unit.temperature, text_of(best.tokens))
        if not ahead:
            history[unit.row].append(attempt)
            after = following.get(unit.temperature)
            return draws(unit.row, after) if after is not None and rules.needs_fallback(attempt) else None
        drawn[(unit.row, unit.temperature)] = attempt
        while not settled(unit.row) and wanted(unit.row) in drawn:
            history[unit.row].append(drawn.pop(wanted(unit.row)))
        return None

    def dropped(unit: Draws) -> bool:
        return ahead and settled(unit.row)

    units = [draws(p, t) for t in (later if ahead else later[:1]) for p in range(len(pooled))]
    device = batches[0].encoder_out.device
    encoder_out = torch.cat([b.encoder_out[on_device(rows_of, device)] for b, rows_of in chosen if rows_of])
    limit = rules.compression_ratio_threshold
    capacity = max(rows or 0, *(b.encoder_out.shape[0] for b in batches))
    sampled = sampler().stream(encoder_out, prompt, units, then, rows=capacity, dropped=dropped,
                               looping=None if limit is None else _looping(text_of, limit))
    stats.loops_cut += sampled.loops_cut
    stats.fallback_passes += sampled.target_passes
    stats.fallback_steps += sampled.decoder_steps
    stats.fallback_seconds += sampled.decoder_seconds
    stats.decoder_seconds += sampled.decoder_seconds


def kept(history: list[list[Attempt]], rules: QualityRules) -> list[Attempt]:
    """The attempt kept per row (``_final``)."""
    return [_final(h, rules) for h in history]


POOL_BATCHES = 4  # a GPU's pool: the most batches whose failing rows wait for one ``sample_again`` (their encoder outputs are kept)


class FallbackPool:
    """Batches whose first pass is done (``first_attempts``), their failing rows sampled together by one
    ``sample_again`` when the pool is ``full``: once their failing rows would fill a batch of ``rows``
    or ``most_batches`` batches wait (a GPU's schedule, with ``ahead``: ``POOL_BATCHES``; 1: after every
    batch). One stream's last steps, where a few draws decode alone, are then paid once for
    several batches. A chunk's samples are its own (``Draws.key``), so which batches share a stream
    changes the steps, not the attempts, where a row's numbers do not depend on the rows beside it.
    A batch an interrupted run finished is ``held`` in its place: the run that resumes it finishes
    the same batches together, so its work queues see what the first run's saw. ``report()``: called
    inside the stream (``sample_again``), where the caller may stop the run."""

    def __init__(self, sampler: Callable[[], SamplingDecoder], rules: QualityRules, text_of: Callable[[list[int]], str],
                 rows: int, ahead: bool = False, most_batches: int = 1, report: Callable[[], None] | None = None):
        self.sampler, self.rules, self.text_of, self.report = sampler, rules, text_of, report
        self.rows, self.ahead, self.most_batches = rows, ahead, most_batches
        self.batches: list[Failing] = []
        self.counts: list[int] = []  # each added batch's rows to sample
        self.failing = self.held = 0  # rows to sample, batches in the pool (held ones included)

    def add(self, batch: Failing) -> None:
        self.batches.append(batch)
        self.counts.append(len(batch.rows(self.rules)))
        self.failing += self.counts[-1]
        self.held += 1

    def hold(self, attempts: list[Attempt]) -> None:
        """A batch finished before, by the attempts it kept: counted as when it was decoded."""
        self.failing += sampled_rows(attempts, self.rules)
        self.held += 1

    @property
    def full(self) -> bool:
        return self.held >= self.most_batches or self.failing >= self.rows

    def sample(self, prompt: list[int]) -> list[DecodeStats]:
        """The added batches' failing rows sampled (their histories grow), and each batch's share of the
        stream's counters (by its failing rows); the pool is empty after."""
        batches, failing = self.batches, self.counts
        self.batches, self.counts, self.failing, self.held = [], [], 0, 0
        stats = DecodeStats()
        if not sum(failing):
            return [DecodeStats() for _ in batches]
        sample_again(self.sampler, batches, prompt, self.rules, self.text_of, stats, self.rows, self.ahead, self.report)
        return [stats.scaled(n / sum(failing)) if n else DecodeStats() for n in failing]
