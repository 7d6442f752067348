"""``--draft auto`` (specwhisper.asr.auto_draft): chooses by measured costs and running acceptance; exact either way."""

from __future__ import annotations

import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.asr.auto_draft import Costs, choose, expected_speedup
from specwhisper.asr.drafting import decoder_factory
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


def test_auto_is_exact_and_measures_once_per_batch_size(base_engine, manifest):
    auto = AsrEngine("base", bundle=base_engine.bundle, decoder_factory=decoder_factory("auto"))
    dec = auto.decoder
    assert set(dec.candidates) == {"ngram", "early-exit:3"}  # base has committed adapters
    opts = DecodeOptions(language="en")
    for item in [m for m in manifest if m.language == "en"][:3]:
        audio = load_audio(item.path)
        want, got = base_engine.transcribe(audio, opts), auto.transcribe(audio, opts)
        assert [s.tokens for s in got.segments] == [s.tokens for s in want.segments]
    assert list(dec.costs) == [1] and dec.costs[1].step > 0 and set(dec.costs[1].draft) == set(dec.candidates)
    assert dec.last_choice is not None
