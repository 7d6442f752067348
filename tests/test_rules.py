"""Whisper's logit rules against openai-whisper's own logit filters (SuppressBlank, SuppressTokens,
ApplyTimestampRules), and the device-side rule state a draft loop advances without reading its tokens."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

whisper_decoding = pytest.importorskip("whisper.decoding")
whisper_tokenizer = pytest.importorskip("whisper.tokenizer")

from specwhisper.asr.decoding.rules import WhisperLogitRules  # noqa: E402
from specwhisper.asr.decoding.tokens import SpecialTokens  # noqa: E402

VOCAB = 51865


@pytest.fixture(scope="module")
def tok():
    return whisper_tokenizer.get_tokenizer(multilingual=True, num_languages=99, language="en", task="transcribe")


def ours(tok, timestamps: bool = True) -> WhisperLogitRules:
    sp = SpecialTokens(eot=tok.eot, sot=tok.sot, sot_prev=tok.sot_prev, sot_lm=tok.sot_lm, no_speech=tok.no_speech,
                       no_timestamps=tok.no_timestamps, transcribe=tok.transcribe, translate=tok.translate,
                       timestamp_begin=tok.timestamp_begin, languages={"en": tok.sot + 1}, multilingual=True)
    return WhisperLogitRules(sp, VOCAB, list(tok.non_speech_tokens), tok.encode(" ") + [tok.eot], timestamps, 50)


def openai_filters(tok, timestamps: bool, sample_begin: int, suppress_blank: bool = True, max_initial: int | None = 50):
    suppress = [*tok.non_speech_tokens, tok.transcribe, tok.translate, tok.sot, tok.sot_prev, tok.sot_lm, tok.no_speech]
    filters = [whisper_decoding.SuppressBlank(tok, sample_begin)] if suppress_blank else []
    filters.append(whisper_decoding.SuppressTokens(suppress))
    if timestamps:
        filters.append(whisper_decoding.ApplyTimestampRules(tok, sample_begin, max_initial))
    return filters


def prefixes(tok, n: int, rng: random.Random) -> list[list[int]]:
    """Sampled-token prefixes that reach every branch of the timestamp rules: empty, one token, ending
    in text, in one timestamp, in a pair, timestamps going up through the window."""
    tb = tok.timestamp_begin
    out: list[list[int]] = [[], [tb], [tb + 3, tb + 3], [400], [tb, 400, tb + 7], [tb, 400, tb + 7, tb + 7]]
    while len(out) < n:
        seq, stamp = [], 0
        for _ in range(rng.randrange(1, 12)):
            if rng.random() < 0.35:
                stamp = min(1500, stamp + rng.randrange(0, 40))
                seq.append(tb + stamp)
            else:
                seq.append(rng.randrange(220, 50000))
        out.append(seq)
    return out


def repeating(rows: list[list[int]], rng: random.Random) -> list[list[int]]:
    """``rows`` with every third one (after the first six) made to repeat itself, so that the penalties on
    repetition find tokens and n-grams seen before (text and timestamps)."""
    out = []
    for i, r in enumerate(rows):
        if i >= 6 and i % 3 == 0 and r:
            cut = rng.randrange(len(r))
            r = r + r[cut:]
        out.append(r)
    return out


def logits_for(tok, n: int, seed: int) -> torch.Tensor:
    """Random logits with timestamps sometimes winning, sometimes not, and a strong end-of-text now and then."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, VOCAB, generator=g) * 3
    x[:, tok.timestamp_begin:] += torch.randn(n, 1, generator=g) * 6 - 2
    x[::5, tok.eot] += 20
    return x


@pytest.mark.parametrize("start", [(True, 1.0), (False, 0.0), (True, None)], ids=["defaults", "blank-first-0s", "any-first"])
@pytest.mark.parametrize("timestamps", [True, False])
def test_select_equals_openai_whisper_filters_row_by_row(tok, timestamps, start):
    """Our batched select (every row with its own prefix, one call) picks openai-whisper's greedy token
    and masks exactly what its filters mask, row by row; with its ``suppress_blank`` and ``max_initial_timestamp``
    (seconds; its filter takes their index of 0.02 s steps) at their defaults and not."""
    rng = random.Random(7)
    rules = ours(tok, timestamps).with_start(*start)
    rows = prefixes(tok, 160, rng)
    x = logits_for(tok, len(rows), seed=3)
    mine = x.clone()
    picked, lps = rules.select(mine, rows)
    sot = list(tok.sot_sequence)
    for i, seq in enumerate(rows):
        ref = x[i : i + 1].clone()
        context = torch.tensor([sot + seq])
        blank, initial = start
        for f in openai_filters(tok, timestamps, len(sot), blank, None if initial is None else round(initial / 0.02)):
            f.apply(ref, context)
        assert torch.equal(torch.isinf(mine[i]), torch.isinf(ref[0])), f"row {i} prefix {seq[-4:]}"
        assert picked[i].item() == int(ref[0].argmax()), f"row {i}"
        assert lps[i].item() == pytest.approx(float(torch.log_softmax(ref[0], -1).max()), abs=1e-5)


@pytest.mark.parametrize("penalties", [(1.0, 0), (1.3, 2), (0.8, 3)], ids=["plain", "penalty-2gram", "favour-3gram"])
def test_the_device_state_advances_as_the_host_prefix_grows(tok, penalties):
    """``advance`` (a draft loop's rule facts, kept on the device) gives the state read from the grown
    prefix, and the same masks, for every kind of next token; with penalties on repetition, the same
    penalized logits as the grown prefixes' own."""
    rng = random.Random(11)
    rules = ours(tok).with_penalties(*penalties)
    tb = tok.timestamp_begin
    rows = repeating(prefixes(tok, 60, rng), rng)
    nxt = [rng.choice([tb + rng.randrange(0, 1500), rng.randrange(220, 50000), tb, tok.eot]) for _ in rows]
    grown = rules.advance(rules.state(rows, "cpu"), torch.tensor(nxt))
    for _ in range(2):  # and once more, past the first token
        more = [rng.choice([tb + rng.randrange(0, 1500), rng.randrange(220, 50000)]) for _ in rows]
        rows = [r + [a] for r, a in zip(rows, nxt)]
        grown, nxt = rules.advance(grown, torch.tensor(more)), more
    rows = [r + [a] for r, a in zip(rows, nxt)]
    want = rules.state(rows, "cpu")
    for f in ("empty", "last_ts", "penult_ts", "stamp"):
        assert torch.equal(getattr(grown, f), getattr(want, f)), f
    x = logits_for(tok, len(rows), seed=5)
    a, b = x.clone(), x.clone()
    rules.select_state(a, grown)
    rules.select(b, rows)
    assert torch.equal(a, b)
    if rules.penalized:  # the penalties did something the plain rules do not
        plain = x.clone()
        ours(tok).select(plain, rows)
        assert not torch.equal(a, plain)
    assert np.isinf(a.numpy()).any(axis=1).all()


@pytest.mark.parametrize("penalties", [(1.0, 0), (1.3, 2), (1.5, 1)], ids=["plain", "penalty-2gram", "no-repeat"])
def test_the_state_along_a_draft_is_the_state_of_each_of_its_prefixes(tok, penalties):
    """``along`` (the verify pass's rule facts at every drafted position, from drafts that stay on the
    device) gives, at column j, the state read from the prefix and the draft's first j tokens; a row's
    drafts mix text, timestamps, pairs and end-of-text, after prefixes of every kind, the empty one
    included; with penalties on repetition, drafts that repeat the prefix's tokens and n-grams too."""
    rng = random.Random(13)
    rules = ours(tok).with_penalties(*penalties)
    tb = tok.timestamp_begin
    rows = repeating(prefixes(tok, 60, rng), rng)
    m = 6
    drafts = [[rng.choice([tb + rng.randrange(0, 1500), rng.randrange(220, 50000), tb, tok.eot]) for _ in range(m)]
              for _ in rows]
    drafts[0][:2] = [tb + 4, tb + 4]  # a pair right after the empty prefix
    for r, d in zip(rows[6::2], drafts[6::2]):  # drafts going on with their prefix's own n-grams
        d[: min(m, len(r))] = r[:m]
    state = rules.along(rules.state(rows, "cpu"), torch.tensor(drafts))
    for j in range(m + 1):
        want = rules.state([r + d[:j] for r, d in zip(rows, drafts)], "cpu")
        got = state.at((torch.arange(len(rows)), torch.full((len(rows),), j)))
        for f in ("empty", "last_ts", "penult_ts", "stamp"):
            assert torch.equal(getattr(got, f), getattr(want, f)), (j, f)
    cols = torch.tensor([rng.randrange(m + 1) for _ in rows])
    x = logits_for(tok, len(rows), seed=9)
    a, b = x.clone(), x.clone()
    rules.select_state(a, state.at((torch.arange(len(rows)), cols)))
    rules.select(b, [r + d[:j] for r, d, j in zip(rows, drafts, cols.tolist())])
    assert torch.equal(a, b)


@pytest.mark.parametrize("penalty,ngram", [(1.3, 0), (0.7, 0), (1.0, 1), (1.0, 3), (2.0, 2)])
def test_penalties_equal_transformers_logits_processors_row_by_row(tok, penalty, ngram):
    """faster-whisper's repetition_penalty and no_repeat_ngram_size (CTranslate2's, on the tokens sampled so
    far) against transformers' RepetitionPenaltyLogitsProcessor and NoRepeatNGramLogitsProcessor on the same
    tokens, followed by openai-whisper's filters: the same logits, bit for bit, and the same pick."""
    from transformers import NoRepeatNGramLogitsProcessor, RepetitionPenaltyLogitsProcessor

    rng = random.Random(17)
    rules = ours(tok).with_penalties(penalty, ngram)
    rows = repeating(prefixes(tok, 120, rng), rng)
    x = logits_for(tok, len(rows), seed=19)
    mine = x.clone()
    picked, _ = rules.select(mine, rows)
    sot = list(tok.sot_sequence)
    changed = 0
    for i, seq in enumerate(rows):
        ref = x[i : i + 1].clone()
        if seq:
            ids = torch.tensor([seq])
            if penalty != 1.0:
                ref = RepetitionPenaltyLogitsProcessor(penalty)(ids, ref)
            if ngram:
                ref = NoRepeatNGramLogitsProcessor(ngram)(ids, ref)
        changed += not torch.equal(ref, x[i : i + 1])
        context = torch.tensor([sot + seq])
        for f in openai_filters(tok, True, len(sot)):
            f.apply(ref, context)
        assert torch.equal(mine[i], ref[0]), f"row {i} prefix {seq[-6:]}"
        assert picked[i].item() == int(ref[0].argmax()), f"row {i}"
    assert changed >= 20  # of 120 rows, a third of them repeating themselves


def test_penalized_rules_refuse_a_state_without_the_prefixes(tok):
    """A captured call's state holds four facts a row, not its tokens: penalized rules given one raise
    (the decoders choose eagerly with them) rather than choose without their penalties."""
    from specwhisper.asr.decoding.rules import RuleState

    rules = ours(tok).with_penalties(1.2, 0)
    facts = RuleState.of(torch.tensor(rules.facts([[400, 401]])))
    with pytest.raises(ValueError, match="prefixes"):
        rules.select_state(logits_for(tok, 1, seed=1), facts)
