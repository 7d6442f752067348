"""``--draft auto`` (specwhisper.asr.drafters.auto): chooses by measured costs and running acceptance; exact either way."""

from __future__ import annotations

import json

import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.asr.drafters.auto import MARGIN, Costs, best_possible, choose, expected_speedup
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions


# Every expected number below is worked out by hand from the cost model in the module's docstring:
# a round of k drafts at per-token acceptance a yields T = (1 - a^(k+1)) / (1 - a) tokens when the target
# adds its own token after the drafts (bonus), T = (1 - a^k) / (1 - a) when the last draft is checked
# instead; it costs k draft steps and one verify pass of k+1 (bonus) or k tokens, so its speed-up over
# plain decoding is T * step / (k * draft + verify(width)). verify(1) is a step; a width between measured
# ones is interpolated linearly, one beyond them follows the last two; a pass below a step counts as one.


def test_the_expected_speedup_follows_the_acceptance_and_the_costs():
    free_verify = Costs(step=0.1, verify={2: 0.1, 4: 0.1, 8: 0.1})
    # a = 0.8, k = 4, free drafts: T = (1 - 0.8^5) / 0.2 = (1 - 0.32768) / 0.2 = 3.3616; 3.3616 * 0.1 / 0.1
    assert expected_speedup(free_verify, 0.0, 0.8, 4, bonus=True) == pytest.approx(3.3616)
    # without the target's token: T = (1 - 0.8^4) / 0.2 = (1 - 0.4096) / 0.2 = 2.952
    assert expected_speedup(free_verify, 0.0, 0.8, 4, bonus=False) == pytest.approx(2.952)
    # drafts of 0.05 s: 3.3616 * 0.1 / (4 * 0.05 + 0.1) = 0.33616 / 0.3 = 1.12053
    assert expected_speedup(free_verify, 0.05, 0.8, 4, bonus=True) == pytest.approx(1.12053, abs=1e-5)
    assert free_verify.verify_at(3) == 0.1
    # 13 tokens, past the widest pass: 0.4 + (0.8 - 0.4) * (13 - 4) / (8 - 4) = 0.4 + 0.9 = 1.3
    assert Costs(0.1, {2: 0.2, 4: 0.4, 8: 0.8}).verify_at(13) == pytest.approx(1.3)
    # a pass measured below a step counts as a step: 2 tokens at 0.223 s with a 0.240 s step cost 0.240
    assert Costs(0.240, {2: 0.223, 4: 0.332}).verify_at(2) == 0.240
    assert Costs(0.240, {2: 0.223, 4: 0.332}).verify_at(3) == pytest.approx(0.286)  # 0.240 + 0.092 / 2
    # a wider pass measured below a narrower one (the 16-core CPU's large-v3 passes of 6, 7, 8: 179, 168,
    # 171 ms) costs the narrower one's, and nothing past it is extrapolated downward
    noisy = Costs(0.0946, {5: 0.1445, 6: 0.1786, 7: 0.1679, 8: 0.1712})
    assert noisy.verify_at(7) == noisy.verify_at(8) == 0.1786
    assert noisy.verify_at(9) == 0.1786  # the slope of the last two: 0


def test_it_keeps_plain_decoding_where_nothing_pays_and_speculates_where_it_does():
    # base at batch 8 on this CPU (measured): verify passes cost well over a step, early exit 40% of one.
    # ngram (a = 0.1, bonus): k = 1: T = 1.1, 1.1 * 0.030 / (0.0002 + 0.045) = 0.730; wider is worse.
    # early-exit:3 (a = 0.55, no bonus): k = 1: T = 1, 0.030 / (0.012 + 0.030) = 0.714; k = 2: T = 1.55,
    # 0.0465 / (0.024 + 0.045) = 0.674. Nothing beats plain decoding's 1.0; the best expected (0.730) is told.
    small = Costs(step=0.030, verify={2: 0.045, 4: 0.055, 8: 0.085}, draft={"ngram": 0.0002, "early-exit:3": 0.012})
    none, k, best = choose(small, {"ngram": 0.1, "early-exit:3": 0.55}, {"ngram": True, "early-exit:3": False})
    assert (none, k) == (None, 0) and best == pytest.approx(0.7301, abs=1e-4)

    # large-v3 at batch 1 on this CPU (bench/results/large_target_cpu.json, random weights): a verify pass
    # of 8 about 1.7 steps, the distil-shaped drafter's step a ninth of one. distil at a = 0.8 (bonus),
    # verify(2) = 0.240 (0.223 is below a step), verify(6) = 0.332 + 0.070 * 2 / 4 = 0.367:
    #   k = 4: T = 3.3616, 3.3616 * 0.240 / (0.104 + 0.3495) = 0.806784 / 0.4535 = 1.7790
    #   k = 5: T = 3.68928, 3.68928 * 0.240 / (0.130 + 0.367) = 0.885427 / 0.497 = 1.7815  (the best)
    #   k = 6: T = 3.951424, 0.948342 / (0.156 + 0.3845) = 1.7546
    # ngram at a = 0.1: k = 1: 1.1 * 0.240 / (0.0002 + 0.240) = 1.0991, below distil's.
    large = Costs(step=0.240, verify={2: 0.223, 4: 0.332, 8: 0.402}, draft={"ngram": 0.0002, "distil": 0.026})
    name, k, speedup = choose(large, {"ngram": 0.1, "distil": 0.8}, {"ngram": True, "distil": True})
    assert (name, k) == ("distil", 5) and speedup == pytest.approx(1.7815, abs=1e-4)
    # the same drafter measured at acceptance 0.2 no longer pays: k = 1: T = (1 - 0.04) / 0.8 = 1.2,
    # 1.2 * 0.240 / 0.266 = 1.0827; the best is ngram's 1.0991, under the 1.10 margin
    none, _, best = choose(large, {"ngram": 0.1, "distil": 0.2}, {"ngram": True, "distil": True})
    assert none is None and best == pytest.approx(1.0991, abs=1e-4)

    # large-v3 at batch 1 on an H200 with CUDA graphs (bench/results/large_target_cuda.json): a verify pass
    # of 2-8 costs one step (4.2 ms), early exit's step 0.77 ms. early-exit:4 at a = 0.8 (no bonus):
    #   k = 5: T = (1 - 0.8^5) / 0.2 = 3.3616, 3.3616 * 0.0042 / (0.00385 + 0.0042) = 1.7539
    #   k = 6: T = 3.68928, 0.015495 / (0.00462 + 0.0042) = 1.7568  (the best)
    #   k = 7: T = 3.951424, 0.016596 / (0.00539 + 0.0042) = 1.7306
    # ngram at a = 0.1: k = 1: 1.1 * 0.0042 / 0.0044 = 1.05. (The bench measured 1.83x at a = 0.8.)
    gpu = Costs(step=0.0042, verify={2: 0.0042, 4: 0.0042, 8: 0.0042}, draft={"ngram": 0.0002, "early-exit:4": 0.00077})
    name, k, speedup = choose(gpu, {"ngram": 0.1, "early-exit:4": 0.8}, {"ngram": True, "early-exit:4": False})
    assert (name, k) == ("early-exit:4", 6) and speedup == pytest.approx(1.7568, abs=1e-4)
    # at a = 0.1 early exit's best is k = 1: 0.0042 / 0.00497 = 0.845; ngram at a = 0.05, k = 1:
    # T = (1 - 0.0025) / 0.95 = 1.05, 1.05 * 0.0042 / 0.0044 = 1.0023, under the margin
    none, _, best = choose(gpu, {"ngram": 0.05, "early-exit:4": 0.1}, {"ngram": True, "early-exit:4": False})
    assert none is None and best == pytest.approx(1.0023, abs=1e-4)


def test_the_bound_before_the_wide_passes_are_timed():
    # base at batch 8 on this CPU (measured): at their running acceptance neither drafter can pay even if
    # wide passes cost what the pass of 2 costs (0.1035 s), so those passes are not timed.
    base = Costs(step=0.0748, verify={2: 0.1035}, draft={"ngram": 0.0, "early-exit:3": 0.0376})
    # ngram, free drafts, a = 0.1: T grows toward 1 / 0.9; at k = 8, 1.1111 * 0.0748 / 0.1035 = 0.8030
    assert best_possible(base, 0.0, 0.1, bonus=True) == pytest.approx(0.8030, abs=1e-4)
    # early-exit:3, a = 0.55, no bonus: k = 1 (a pass of 1 is a step): 0.0748 / (0.0376 + 0.0748) = 0.6655;
    # k = 2: T = 1.55, 0.11594 / (0.0752 + 0.1035) = 0.6488; larger k add drafts faster than tokens
    assert best_possible(base, 0.0376, 0.55, bonus=False) == pytest.approx(0.6655, abs=1e-4)
    assert MARGIN == 1.10
    # with only the pass of 2 known, ngram's k = 1 is the best: 1.1 * 0.0748 / 0.1035 = 0.7950
    none, k, best = choose(base, {"ngram": 0.1, "early-exit:3": 0.55}, {"ngram": True, "early-exit:3": False})
    assert (none, k) == (None, 0) and best == pytest.approx(0.7950, abs=1e-4)
    # the bound (0.6655) is never below the expected speed-up once the wide passes are known:
    # k = 3: verify(3) = 0.1035 + 0.0622 / 2 = 0.1346, T = 1.8525, 0.138567 / (0.1128 + 0.1346) = 0.5601;
    # k = 4: T = 2.018875, 0.151012 / (0.1504 + 0.1657) = 0.4777; k = 8: T = 2.2036, 0.164831 / 0.5746 = 0.2869
    full = Costs(step=0.0748, verify={2: 0.1035, 4: 0.1657, 8: 0.2738})
    expected = [0.6655, 0.6488, 0.5601, 0.4777, 0.4146, 0.3629, 0.3210, 0.2869]
    assert [round(expected_speedup(full, 0.0376, 0.55, k, bonus=False), 4) for k in range(1, 9)] == expected
    # large-v3 at batch 1 with a distil-shaped drafter may pay, so the wide passes are timed: with every
    # pass at the pass of 2 (a step, 0.240), k = 6: T = 3.951424, 0.948342 / (0.156 + 0.240) = 2.3948
    assert best_possible(Costs(step=0.240, verify={2: 0.223}), 0.026, 0.8, bonus=True) == pytest.approx(2.3948, abs=1e-4)


def test_auto_is_exact_and_measures_once_per_batch_size(base_engine, eval_root, tmp_path):
    """Two English files at batch size 1 (the second decoded with the first's measurement): plain
    decoding's tokens, and one measurement."""
    auto = AsrEngine("base", bundle=base_engine.bundle, decoder_factory=decoder_factory("auto", cache_dir=tmp_path))
    dec = auto.decoder
    assert set(dec.candidates) == {"ngram", "early-exit:3"}  # base has committed adapters
    opts = DecodeOptions(language="en")
    acceptance, bonus = dict(dec.acceptance), dict(dec.bonus)  # what the measurement, before the first decode, reads
    for name in ("openai-whisper/jfk.flac", "faster-whisper/stereo_diarization.wav"):
        audio = load_audio(eval_root / name)
        want, got = base_engine.transcribe(audio, opts), auto.transcribe(audio, opts)
        assert [s.tokens for s in got.segments] == [s.tokens for s in want.segments]
    costs = dec.costs[1]
    assert list(dec.costs) == [1] and costs.step > 0 and set(costs.draft) == set(dec.candidates)
    # measure() times the wide passes only where best_possible (checked on hand-worked numbers above) says
    # a drafter may pay at its running acceptance: the one it had then (a drafter that ran since has its own;
    # read after the decodes, it failed a clean-clone run on a loaded machine, where the wide passes were timed)
    may_pay = any(best_possible(costs, costs.draft[n], acceptance[n], bonus[n]) >= MARGIN for n in dec.candidates)
    assert set(costs.verify) == ({2, 4, 8} if may_pay else {2})  # base on this CPU: {2}
    assert dec.last_choice is not None
    if dec.last_choice[0] is None:  # plain decoding pays for one head product, not the drafter's split
        assert dec.rt.head.compact_split is None


def test_a_later_process_takes_the_stored_costs(base_engine, eval_root, tmp_path, monkeypatch):
    """The costs one engine measured are kept in the cache folder: an engine built later (a new process:
    the CLI run on the next file) decodes without timing anything, to the same tokens and choice. A
    damaged store, or costs a week old, are timed again."""
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    opts = DecodeOptions(language="en")
    want = [s.tokens for s in base_engine.transcribe(audio, opts).segments]

    def engine():
        return AsrEngine("base", bundle=base_engine.bundle, decoder_factory=decoder_factory("auto", cache_dir=tmp_path))

    first = engine()
    assert [s.tokens for s in first.transcribe(audio, opts).segments] == want
    assert first.decoder.summary()["choices"]["1"]["costs"] == "measured"
    second = engine()
    monkeypatch.setattr(type(second.decoder), "measure", lambda *a, **k: pytest.fail("measured again"))
    assert [s.tokens for s in second.transcribe(audio, opts).segments] == want
    assert second.decoder.costs[1] == first.decoder.costs[1]
    assert second.decoder.last_choice == first.decoder.last_choice
    assert second.decoder.summary()["choices"]["1"]["costs"] == "stored"
    monkeypatch.undo()

    store = tmp_path / "auto-costs.json"
    store.write_text("{not json")
    third = engine()
    assert [s.tokens for s in third.transcribe(audio, opts).segments] == want
    assert third.decoder.summary()["choices"]["1"]["costs"] == "measured"
    assert second.decoder.store.get(1) is not None  # rewritten whole

    data = json.loads(store.read_text())
    for setting in data.values():
        setting["1"]["measured_at"] -= 8 * 86400
    store.write_text(json.dumps(data))
    assert engine().decoder.store.get(1) is None  # a week old: timed again


def test_a_batch_keeps_the_chosen_draft_length_where_a_lone_row_adapts(unpacked_engine, unpacked, eval_root):
    """In the fixed-shape mode (a GPU's; float32 over plain products here) a round drafts as many passes as its longest draft
    and each costs what one of all rows does: a batch's rows drafting by passes keep the k auto chose,
    while a lone row grows its k after a fully accepted draft. Exact either way."""
    from specwhisper.asr.decoding.greedy import GreedyDecoder

    auto = AsrEngine("base", bundle=unpacked_engine.bundle, decoder_factory=decoder_factory("auto"))
    dec = auto.decoder
    assert auto.runtime.fixed_width is not None
    # early-exit:3 at a = 0.9 (no bonus), a draft step 0.05 of a step: k = 1: T = 1, 1 / (0.05 + 1) = 0.95;
    # k = 2: T = 1.9, verify(2) = 1.0: 1.9 / 1.1 = 1.727 (the best); k = 3: T = 2.71, verify(3) = 2.0 (halfway
    # from 2: 1.0 to 4: 3.0): 2.71 / 2.15 = 1.26; wider passes cost more still. ngram: 10 steps a draft.
    forced = Costs(step=1.0, verify={2: 1.0, 4: 3.0, 8: 7.0}, draft={"ngram": 10.0, "early-exit:3": 0.05})
    clips = [load_audio(eval_root / n)[: 6 * 16000] for n in ("openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-002.ogg")]
    prompt = auto.special.prompt("en", "transcribe", True)
    plain = GreedyDecoder(auto.runtime, auto.special, auto.rules)
    drafter = dec.candidates["early-exit:3"].drafter
    longest = {}
    both_feats, both_enc, _ = auto.encode(clips)
    for rows in (1, 2):
        feats, enc = both_feats[:rows], both_enc[:rows]
        dec.costs[rows], dec.acceptance = forced, {"ngram": 0.1, "early-exit:3": 0.9}
        asked = []
        drafter.draft = lambda contexts, ks, draft=type(drafter).draft: asked.append(max(ks)) or draft(drafter, contexts, ks)
        try:
            got = dec.decode(enc, prompt, feats)
        finally:
            del drafter.draft
        assert dec.last_choice[:2] == ("early-exit:3", 2)
        assert [s.tokens for s in got.sequences] == [s.tokens for s in plain.decode(enc, prompt).sequences]
        assert got.stats.accepted_tokens > 0
        longest[rows] = max(asked)
    assert longest[1] > 2 and longest[2] == 2  # the lone row grew after a full acceptance; the batch kept 2


@pytest.mark.gpu
@pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="no CUDA GPU is usable here")
def test_on_a_gpu_a_measured_pass_includes_the_gpu_work():
    """A GPU runs a call's kernels after the call returns: auto's clock must wait for them, or every pass
    costs its launch alone and the widest verify pass looks free. A kernel that keeps the GPU busy for
    a known time (CUDA events) must be charged at least that time."""
    import torch

    from specwhisper.asr.drafters.auto import _seconds

    def busy():
        torch.cuda._sleep(20_000_000)  # some 10-20 ms of GPU cycles, queued at once

    busy()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    busy()
    end.record()
    end.synchronize()
    device_s = start.elapsed_time(end) / 1000
    assert device_s > 0.002
    assert _seconds(busy, "cuda") >= 0.9 * device_s


@pytest.mark.parametrize("stored", ["[]", '{"S": [1]}', '{"S": {"1": [2]}}',
                                    '{"S": {"1": {"step": "x", "verify": 3, "draft": {}, "measured_at": NOW}}}',
                                    '{"S": {"1": {"step": 1, "verify": {"2": 1}, "draft": {}, "width": "8", "measured_at": NOW}}}',
                                    '{"S": {"1": {"step": 1, "verify": {"2": 1}, "draft": {}}}}',
                                    '{"S": {"1": {"step": 1, "verify": {"2": 1}, "draft": {}, "measured_at": 1e12}}}',
                                    '{"T": {"1": {"step": 1, "verify": {"2": 1}, "draft": {}, "measured_at": 0}}}'])
def test_a_store_that_is_not_what_it_wrote_is_timed_again(tmp_path, stored):
    """Whatever the file holds (edited, another version's, a clock set back), a bad entry is no costs,
    never an error, and the next measurement is written over it; costs too old to be taken (another
    setting's here) are dropped then."""
    from specwhisper.asr.drafters.cost_store import CostStore

    import time

    (tmp_path / "auto-costs.json").write_text(stored.replace("NOW", str(time.time())))
    store = CostStore(tmp_path / "auto-costs.json", "S")
    assert store.get(1) is None
    costs = Costs(step=0.1, verify={2: 0.2}, draft={"ngram": 0.001})
    store.put(1, costs)
    assert CostStore(tmp_path / "auto-costs.json", "S").get(1) == costs
    assert list(json.loads((tmp_path / "auto-costs.json").read_text())) == ["S"]
