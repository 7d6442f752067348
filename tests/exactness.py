"""The exactness check every drafter's tests share: a speculative decode of each window alone gives
the plain greedy result (tokens, timestamps included, no-speech probability, log-probability)."""

from __future__ import annotations

import pytest

from specwhisper.asr.drafters.choice import decoder_factory, model_drafter
from specwhisper.asr.decoding.speculative import Lookahead, SpeculativeDecoder


def drafting_factory(draft: str):
    """``specwhisper.asr.drafters.choice.decoder_factory``, plus ``layers:N``: the target's own first N
    decoder layers as a model drafter (same vocabulary, the target's encoder output shared), and its
    name for base, ``base:4``."""
    if draft == "base:4":
        draft = "layers:4"
    if not draft.startswith("layers:"):
        return decoder_factory(draft)

    def build(engine):
        return SpeculativeDecoder(engine.runtime, engine.special, engine.rules,
                                  model_drafter(engine, engine.model_name, num_layers=int(draft.split(":")[1])), Lookahead())
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
