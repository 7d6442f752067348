"""``--draft auto`` (specwhisper.asr.drafters.auto): chooses by measured costs and running acceptance; exact either way."""

from __future__ import annotations

import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.asr.drafters.auto import MARGIN, Costs, best_possible, choose, expected_speedup
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.engine import AsrEngine, DecodeOptions


def test_the_expected_speedup_follows_the_acceptance_and_the_costs():
    free_verify = Costs(step=0.1, verify={2: 0.1, 4: 0.1, 8: 0.1})
    # a free drafter at acceptance 0.8 with 4 drafts: (1 - 0.8^5) / 0.2 = 3.36 tokens per target pass
    assert expected_speedup(free_verify, 0.0, 0.8, 4, bonus=True) == pytest.approx(3.3616)
    assert expected_speedup(free_verify, 0.0, 0.8, 4, bonus=False) == pytest.approx((1 - 0.8**4) / 0.2)
    assert expected_speedup(free_verify, 0.05, 0.8, 4, bonus=True) < expected_speedup(free_verify, 0.0, 0.8, 4, bonus=True)
    assert free_verify.verify_at(3) == 0.1 and Costs(0.1, {2: 0.2, 4: 0.4, 8: 0.8}).verify_at(13) == pytest.approx(1.3)


def test_it_keeps_plain_decoding_where_nothing_pays_and_speculates_where_it_does():
    # base at batch 8 on this CPU (measured): verify passes cost well over a step, early exit 40% of one
    small = Costs(step=0.030, verify={2: 0.045, 4: 0.055, 8: 0.085}, draft={"ngram": 0.0002, "early-exit:3": 0.012})
    assert choose(small, {"ngram": 0.1, "early-exit:3": 0.55}, {"ngram": True, "early-exit:3": False})[0] is None
    # large-v3 at batch 1 on this CPU (bench/results/large_target_cpu.json, random weights): a verify pass
    # of 8 about 1.7 steps, the distil-shaped drafter's step a ninth of one
    large = Costs(step=0.240, verify={2: 0.223, 4: 0.332, 8: 0.402}, draft={"ngram": 0.0002, "distil": 0.026})
    name, k, speedup = choose(large, {"ngram": 0.1, "distil": 0.8}, {"ngram": True, "distil": True})
    assert name == "distil" and k >= 3 and speedup > 1.5
    # the same drafter measured at acceptance 0.2 no longer pays
    assert choose(large, {"ngram": 0.1, "distil": 0.2}, {"ngram": True, "distil": True})[0] is None
    # large-v3 at batch 1 on an H200 with CUDA graphs (bench/results/large_target_cuda.json): a verify pass
    # of 2-8 costs one step, early exit's step a fifth of one
    gpu = Costs(step=0.0042, verify={2: 0.0042, 4: 0.0042, 8: 0.0042}, draft={"ngram": 0.0002, "early-exit:4": 0.00077})
    name, k, speedup = choose(gpu, {"ngram": 0.1, "early-exit:4": 0.8}, {"ngram": True, "early-exit:4": False})
    assert name == "early-exit:4" and k >= 3 and speedup > 1.5  # 1.76 expected; the bench measured 1.97x
    assert choose(gpu, {"ngram": 0.05, "early-exit:4": 0.1}, {"ngram": True, "early-exit:4": False})[0] is None


def test_the_bound_before_the_wide_passes_are_timed():
    # base at batch 8 on this CPU (measured): at their running acceptance neither drafter can pay even if
    # wide passes cost what the pass of 2 costs, so those passes are not timed
    base = Costs(step=0.0748, verify={2: 0.1035}, draft={"ngram": 0.0, "early-exit:3": 0.0376})
    assert best_possible(base, 0.0, 0.1, bonus=True) < MARGIN
    assert best_possible(base, 0.0376, 0.55, bonus=False) < MARGIN
    assert choose(base, {"ngram": 0.1, "early-exit:3": 0.55}, {"ngram": True, "early-exit:3": False})[0] is None
    # the bound is never below the expected speed-up it bounds
    full = Costs(step=0.0748, verify={2: 0.1035, 4: 0.1657, 8: 0.2738})
    for k in range(1, 9):
        assert expected_speedup(full, 0.0376, 0.55, k, bonus=False) <= best_possible(base, 0.0376, 0.55, bonus=False)
    # large-v3 at batch 1 with a distil-shaped drafter may pay: the wide passes are timed
    assert best_possible(Costs(step=0.240, verify={2: 0.223}), 0.026, 0.8, bonus=True) > MARGIN


def test_auto_is_exact_and_measures_once_per_batch_size(base_engine, manifest):
    auto = AsrEngine("base", bundle=base_engine.bundle, decoder_factory=decoder_factory("auto"))
    dec = auto.decoder
    assert set(dec.candidates) == {"ngram", "early-exit:3"}  # base has committed adapters
    opts = DecodeOptions(language="en")
    for item in [m for m in manifest if m.language == "en"][:3]:
        audio = load_audio(item.path)
        want, got = base_engine.transcribe(audio, opts), auto.transcribe(audio, opts)
        assert [s.tokens for s in got.segments] == [s.tokens for s in want.segments]
    costs = dec.costs[1]
    assert list(dec.costs) == [1] and costs.step > 0 and set(costs.draft) == set(dec.candidates)
    may_pay = any(best_possible(costs, costs.draft[n], dec.acceptance[n], dec.bonus[n]) >= MARGIN for n in dec.candidates)
    assert set(costs.verify) == ({2, 4, 8} if may_pay else {2})  # base on this CPU: {2}
    assert dec.last_choice is not None
    if dec.last_choice[0] is None:  # plain decoding pays for one head product, not the drafter's split
        assert dec.rt.head.compact_split is None
