"""The exactness check every drafter's tests share: a speculative decode of each window alone gives
the plain greedy result (tokens, timestamps included, no-speech probability, log-probability)."""

from __future__ import annotations

import warnings
from contextlib import contextmanager

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


@contextmanager
def plain_float32_products():
    """float32 CPU products as a torch build without oneDNN's packed kernels makes them: plain ``F.linear``
    (``specwhisper.hardware.kernels``, its ``KernelFallbackWarning``), so a float32 decoder takes the
    fixed-shape mode, as every GPU dtype does. Most of that mode's checks run so rather than in
    bfloat16: MKL's float32 products depend on the call's row count as a GPU's do (1, 2, 3 or 5 rows
    of a matrix of base's shapes give other bits than the same rows among 16), while bfloat16 products
    of 5-16 rows take 2.9-7.5x as long on a CPU without native bfloat16 (measured on an AVX2 host, one
    thread: 16 rows of a 2048 x 512 matrix 5.0 against 0.67 ms, of base's head 116 against 40 ms)."""
    from specwhisper.hardware import kernels

    real = kernels.kernel_problem

    def problem(ops):
        return "a torch build without them" if ops == kernels.PACKED_OPS else real(ops)

    with pytest.MonkeyPatch.context() as patch, warnings.catch_warnings():
        warnings.simplefilter("ignore", kernels.KernelFallbackWarning)
        patch.setattr(kernels, "kernel_problem", problem)
        yield
