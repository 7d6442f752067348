"""Speculative decoding is exact: the same tokens (timestamps included) as plain greedy decoding of
the same target, for every drafter, batch sizes 1 and 4, on the public eval files (every one of them in the slow tier)."""

from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from specwhisper.audio.loading import load_audio
from specwhisper.asr.drafters.ngram import WhisperNgramDrafter
from specwhisper.asr.drafters.choice import decoder_factory, model_drafter
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.decoding.speculative import WhisperDrafter, Lookahead, SpeculativeDecoder
from tests.exactness import assert_decodes_like_plain


class WrongDrafter(WhisperDrafter):
    """Proposes random tokens (text, timestamps, end-of-text): nothing it says should survive."""

    name = "wrong"

    def __init__(self, vocab_size: int, seed: int = 0):
        self.rng = random.Random(seed)
        self.vocab = vocab_size

    def propose(self, contexts, ks):
        return [[self.rng.randrange(self.vocab) for _ in range(k)] for k in ks]


DRAFTERS = ["ngram", "tiny.en", "base:4", "wrong"]


def make_drafter(engine, name):
    if name == "ngram":
        return WhisperNgramDrafter()
    if name == "wrong":
        return WrongDrafter(engine.runtime.vocab_size)
    if name == "base:4":  # same tokenizer, shares the target's encoder output
        return model_drafter(engine, "base", num_layers=4)
    if name == "tiny.en:int8":  # int8 weights in the drafter: its drafts change, the output must not
        return model_drafter(engine, "tiny.en:int8")
    return model_drafter(engine, name)  # tiny.en: different vocabulary, own encoder


# Batch 1, by default: 6 files spread over the set (``chosen``) for the cross-vocabulary drafter
# (tiny.en, the one with the most ways to go wrong: retokenized text, mapped timestamps; it drafts
# nothing for the Spanish clip); the n-gram, wrong and tiny.en:int8 drafters on 3 of them (LJSpeech,
# FLEURS Spanish, an MFA voice), the weak base:4 on the other 3 (LibriSpeech, FLEURS English, an MFA
# voice: English, where it drafts for its acceptance to be measured). Every window decoded by default
# is one of the 6, whose encoder outputs and reference decodes the cases share. Every drafter on every
# file when slow.
ALL_SIX, ODD, EVEN = range(6), (1, 3, 5), (0, 2, 4)
BATCH_1 = [
    pytest.param("tiny.en", ALL_SIX, id="tiny.en-6-files"),
    pytest.param("tiny.en", None, id="tiny.en", marks=pytest.mark.slow),
    pytest.param("ngram", ODD, id="ngram-3-files"),
    pytest.param("wrong", ODD, id="wrong-3-files"),
    pytest.param("base:4", EVEN, id="base:4-3-files"),
    pytest.param("tiny.en:int8", ODD, id="tiny.en:int8-3-files"),
    pytest.param("ngram", None, id="ngram", marks=pytest.mark.slow),
    pytest.param("wrong", None, id="wrong", marks=pytest.mark.slow),
    pytest.param("base:4", None, id="base:4", marks=pytest.mark.slow),
    pytest.param("tiny.en:int8", None, id="tiny.en:int8", marks=pytest.mark.slow),
]


def chosen(windows, picks):
    """The windows a case decodes: those at ``picks`` among 6 spread over the set (every other one of
    12 evenly spaced ones, from the second: LibriSpeech, LJSpeech, FLEURS English and Spanish, two MFA
    voices), or all of them (``picks`` None)."""
    if picks is None:
        return windows
    six = [windows[round(i * (len(windows) - 1) / 11)] for i in range(1, 12, 2)]
    return [six[i] for i in picks]


def four_english(windows):
    """The default batch of 4: the first 4 English windows of ``chosen`` (LibriSpeech, LJSpeech, FLEURS,
    an MFA voice), of 48, 35, 24 and 9 tokens, so rows end apart."""
    return [w for w in chosen(windows, ALL_SIX) if (w[0].language or "en") == "en"][:4]


@pytest.mark.parametrize("name,picks", BATCH_1)
def test_identical_tokens_batch_1(base_engine, windows, plain_reference, name, picks):
    e = base_engine
    dec = SpeculativeDecoder(e.runtime, e.special, e.rules, make_drafter(e, name), Lookahead(initial=4, maximum=8))
    cases = [(item, enc, prompt, feats) for item, feats, enc, prompt in chosen(windows, picks)]
    drafted, accepted = assert_decodes_like_plain(dec, cases, plain_reference, name)
    rate = accepted / drafted if drafted else 0.0
    print(f"\n{name}: acceptance {rate:.2f} over {drafted} drafted tokens")
    if name == "wrong":
        assert drafted > 0 and rate < 0.05
    if name.startswith("tiny.en"):
        assert rate > 0.3, "a real model drafter should mostly agree"
    if name == "base:4":  # the target's first 4 of 6 layers, no exit adapter: a weak drafter
        assert rate > 0.1


# Every English file in groups of 4 is a slow check (make test-all); the default run takes one batch
# of 4 English files (``four_english``) per drafter, whose rows accept different numbers of tokens and
# end apart. tiny.en's default batch of 4 is test_drafts_do_not_depend_on_when_the_host_learns_a_row_ended[tiny.en]:
# the same decoder on the same 4 windows, watching stops as here, against the same reference.
BATCH_4 = [pytest.param(name, False, id=f"{name}-4-files") for name in DRAFTERS if name != "tiny.en"] + [
    pytest.param(name, True, id=f"{name}-all-files", marks=pytest.mark.slow) for name in DRAFTERS]


@pytest.mark.parametrize("name,every", BATCH_4)
def test_identical_tokens_batch_4(base_engine, windows, plain_reference, name, every):
    """Rows of different files in one batch accept different numbers of tokens and finish apart."""
    e = base_engine
    dec = SpeculativeDecoder(e.runtime, e.special, e.rules, make_drafter(e, name))
    english = windows.english() if every else four_english(windows)
    for i in range(0, len(english), 4):
        group = english[i : i + 4]
        feats = torch.cat([g[1] for g in group])
        enc = torch.cat([g[2] for g in group])
        out = dec.decode(enc, group[0][3], features=feats)
        for (item, *_), got in zip(group, out.sequences):
            assert got.tokens == plain_reference[item.file].tokens, f"{name}: {item.file} differs in a batch of {len(group)}"


@pytest.mark.parametrize("name", ["tiny.en", "early-exit"])
def test_drafts_do_not_depend_on_when_the_host_learns_a_row_ended(base_engine, windows, plain_reference, name):
    """A GPU's end-of-draft flags (end-of-text, the drafter's confidence falling) may land only after a
    round's last step (``watch_stops`` off): rows then draft on past their end and are cut on the host.
    In a batch of 4 (``four_english``), whose rows end their drafts at different steps, both give plain
    greedy's tokens. tiny.en (a drafter with the bonus token) drafts the same either way: the same
    drafted and accepted counts and target passes. Early exit feeds its drafts without the last one; a row that drafted past
    its end has that last one fed too, so a fully accepted draft also earns the target's next token:
    fewer target passes, never more."""
    e = base_engine
    group = four_english(windows)
    feats, enc = torch.cat([g[1] for g in group]), torch.cat([g[2] for g in group])
    runs = {}
    for watch in (True, False):
        dec = decoder_factory(name)(e)
        dec.drafter.watch_stops = watch
        out = dec.decode(enc, group[0][3], features=feats)
        for (item, *_), got in zip(group, out.sequences):
            assert got.tokens == plain_reference[item.file].tokens, f"{name}, watch {watch}: {item.file}"
        runs[watch] = (out.stats.drafted_tokens, out.stats.accepted_tokens, out.stats.target_passes)
    assert runs[True][1] > 0, runs
    if dec.drafter.bonus:
        assert runs[True] == runs[False], runs
    else:
        assert runs[False][2] < runs[True][2], runs


def test_long_form_pipeline_identical(base_engine, eval_root):
    """Chunked long-form through the engine: same segments, timestamps and words with speculation."""
    from specwhisper.asr.engine import AsrEngine  # noqa: F401  (engine fixture is reused)

    # 36 s with the pauses: two chunks, decoded in one batch
    files = ["lhotse/2412-153948-0000.flac", "whisper.cpp/jfk.wav", "cuttledoc-fleurs/fleurs-en-000.ogg"]
    pause = np.zeros(16000, dtype=np.float32)
    audio = np.concatenate([p for f in files for p in (load_audio(eval_root / f), pause)])
    opts = DecodeOptions(language="en", batch_size=4)
    plain = base_engine.transcribe(audio, opts, decoder=decoder_factory("none")(base_engine))
    spec = base_engine.transcribe(audio, opts, decoder=decoder_factory("tiny.en")(base_engine))
    key = lambda r: [(s.start, s.end, s.tokens) for s in r.segments]  # noqa: E731
    assert key(spec) == key(plain)
    assert spec.stats.tokens_per_target_pass > 1.5


def test_a_drafters_own_encoder_reads_the_audio_not_the_padding(tiny_engine, eval_root):
    """tiny.en drafting for base encodes the mel frames holding audio plus a 1 s margin (in whole
    seconds), not a 30 s window of padding; a window full of audio is encoded as Whisper does."""
    rt, fe = tiny_engine.encoder, tiny_engine.bundle.feature_extractor
    audio = load_audio(eval_root / "whisper.cpp/jfk.wav")  # 11.0 s
    feats = fe(audio, sampling_rate=16000, return_tensors="pt").input_features
    part = rt.encode_audio_part(feats)
    # 11.0 s: mel frames 0..1100 hold audio; + 100 frames of margin, rounded up to 1300 frames (13 s)
    assert part.shape[1] == 650
    full = fe(np.tile(audio, 3)[: 30 * 16000], sampling_rate=16000, return_tensors="pt").input_features
    assert torch.equal(rt.encode_audio_part(full), rt.encode(full))
