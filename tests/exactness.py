"""The exactness check every drafter's tests share: a speculative decode of each window alone gives
the plain greedy result (tokens, timestamps included, no-speech probability, log-probability)."""

from __future__ import annotations

import pytest

from specwhisper.asr.drafters.choice import decoder_factory, model_drafter
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder


def drafting_factory(draft: str):
    """``specwhisper.asr.drafters.choice.decoder_factory``, plus ``base:4``: base's first 4 decoder layers drafting for base
    (same vocabulary, the target's encoder output shared)."""
    if draft != "base:4":
        return decoder_factory(draft)

    def build(engine):
        return SpeculativeDecoder(engine.runtime, engine.special, engine.rules,
                                  model_drafter(engine, "base", num_layers=4), Lookahead())
    return build


def assert_decodes_like_plain(decoder, cases, reference, label: str) -> tuple[int, int]:
    """``cases``: (item, encoder output, prompt, features or None) per window; ``reference``: the plain
    greedy sequence per ``item.file``. Returns the (drafted, accepted) token counts."""
    drafted = accepted = 0
    for item, enc, prompt, feats in cases:
        out = decoder.decode(enc, prompt, features=feats)
        got, want = out.sequences[0], reference[item.file]
        assert got.tokens == want.tokens, f"{label}: {item.file} differs from plain greedy"
        assert got.no_speech_prob == pytest.approx(want.no_speech_prob, abs=1e-5)
        assert got.sum_logprob == pytest.approx(want.sum_logprob, abs=1e-2)
        assert out.stats.generated_tokens == len(got.tokens)
        drafted += out.stats.drafted_tokens
        accepted += out.stats.accepted_tokens
    return drafted, accepted
