"""The names a user types and the drafter ``--draft auto`` pairs with them: ``-m large-v3`` and the other
short names resolve to openai's Hugging Face ids, the embedded ``base`` and ``tiny.en`` stay embedded,
and auto weighs the target's distil-whisper drafter where the local Hugging Face cache has it (a fake
cache of random-weight checkpoints here), falling back with one line where neither the cache nor
the hub has it. Also the batch size against the device's memory (specwhisper.asr.batch_memory)."""

from __future__ import annotations

import logging
import time

import pytest
import torch

from specwhisper.asr import batch_memory
from specwhisper.asr.weights.loader import DISTIL_DRAFTERS, SHORT_NAMES, find_distil_drafter, hub_id, resolve_model_path
from tests.random_whisper import write_random_whisper

pytestmark = pytest.mark.filterwarnings("ignore")


def test_short_names_are_openai_hub_ids():
    assert hub_id("large-v3") == "openai/whisper-large-v3" and hub_id("large-v3-turbo") == "openai/whisper-large-v3-turbo"
    assert hub_id("medium.en:int8") == "openai/whisper-medium.en" and hub_id("turbo") == "openai/whisper-large-v3-turbo"
    assert {"tiny", "base.en", "small", "small.en", "medium", "large-v2", "large"} <= set(SHORT_NAMES)
    assert hub_id("someone/whisper-fine-tune") == "someone/whisper-fine-tune"
    # faster-whisper's -m names of the distil models: the drafters of --draft too
    assert hub_id("distil-large-v3") == "distil-whisper/distil-large-v3" and hub_id("distil-small.en") == "distil-whisper/distil-small.en"
    assert {d for ds in DISTIL_DRAFTERS.values() for d in ds} <= {hub_id(n) for n in SHORT_NAMES}
    assert resolve_model_path("base").endswith("base-ct2conv2")  # the embedded copy, no hub
    assert find_distil_drafter("large-v3-turbo") == (None, "no distil-whisper drafter is known for 'large-v3-turbo'")


def _snapshot(cache, repo: str):
    folder = cache / f"models--{repo.replace('/', '--')}"
    (folder / "refs").mkdir(parents=True)
    (folder / "refs" / "main").write_text("0" * 40)
    return folder / "snapshots" / ("0" * 40)


@pytest.fixture
def hub_cache(tmp_path, monkeypatch):
    """A Hugging Face cache holding random-weight large-v3 and distil-large-v3 (its encoder) at a small
    width, and a hub that cannot be reached. The "large-v3" has large-v3-turbo's 4 decoder layers: the
    pairing goes by name, and 32 layers would only make the test slower."""
    import huggingface_hub
    from huggingface_hub import HfApi

    cache = tmp_path / "hub"
    v3 = write_random_whisper(_snapshot(cache, "openai/whisper-large-v3"), "large-v3-turbo", max_positions=48, eot_scale=2.5)
    write_random_whisper(_snapshot(cache, "distil-whisper/distil-large-v3"), "distil-large-v3", max_positions=48,
                         seed=2, encoder_from=v3)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))

    def unreachable(self, name, **kwargs):
        raise ConnectionError("[Errno -2] Name or service not known")

    monkeypatch.setattr(HfApi, "model_info", unreachable)
    return cache


def test_large_v3_is_paired_with_its_cached_distil_drafter(hub_cache, manifest):
    from specwhisper.asr.drafters.choice import decoder_factory, model_drafter
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.asr.decoding.quality import QualityRules
    from specwhisper.audio.loading import load_audio

    assert resolve_model_path("large-v3").startswith(str(hub_cache))
    name, why = find_distil_drafter("large-v3")
    assert name == "distil-whisper/distil-large-v3" and "local Hugging Face cache" in why
    auto = AsrEngine("large-v3", decoder_factory=decoder_factory("auto"))
    dec = auto.decoder
    assert set(dec.candidates) == {"ngram", "distil-whisper/distil-large-v3"}
    drafter = dec.candidates["distil-whisper/distil-large-v3"].drafter
    assert drafter.m.shares_encoder and drafter.m.runtime.model.model.encoder is auto.bundle.model.model.encoder
    plain = AsrEngine("large-v3", bundle=auto.bundle)
    assert model_drafter(plain, "distil-large-v3").m.shares_encoder  # --draft by faster-whisper's name: the cached copy
    audio = load_audio(next(m for m in manifest if m.file.endswith("jfk.flac")).path)
    opts = DecodeOptions(language="en", quality=QualityRules(temperatures=(0.0,)))
    with torch.inference_mode():
        want, got = plain.transcribe(audio, opts), auto.transcribe(audio, opts)
    assert [s.tokens for s in got.segments] == [s.tokens for s in want.segments]
    summary = dec.summary()
    assert summary["candidates"] == list(dec.candidates) and "1" in summary["choices"]
    assert "local Hugging Face cache" in dec.describe() and "at batch 1" in dec.describe()


def test_without_the_drafter_auto_says_so_in_one_line_and_goes_on(hub_cache, caplog):
    import shutil

    from specwhisper.asr.drafters.choice import decoder_factory
    from specwhisper.asr.engine import AsrEngine

    shutil.rmtree(hub_cache / "models--distil-whisper--distil-large-v3")
    t = time.perf_counter()
    with caplog.at_level(logging.WARNING):
        auto = AsrEngine("large-v3", decoder_factory=decoder_factory("auto"))
    assert time.perf_counter() - t < 60
    assert set(auto.decoder.candidates) == {"ngram"}
    lines = [r.getMessage() for r in caplog.records if "--draft auto" in r.getMessage()]
    assert lines == ["--draft auto: distil-whisper/distil-large-v3.5 is not in the local Hugging Face cache and the hub "
                     "cannot be reached; weighing ngram and plain decoding"]
    assert "cannot be reached" in auto.decoder.summary()["notes"][0]


@pytest.fixture(scope="module")
def small_runtime(tmp_path_factory):
    from specwhisper.asr.engine import AsrEngine

    return AsrEngine(str(write_random_whisper(tmp_path_factory.mktemp("rw") / "turbo", "large-v3-turbo", max_positions=48))).runtime


def test_a_batch_past_the_free_memory_shrinks_with_one_line(small_runtime, caplog):
    rt = small_runtime
    per = batch_memory.row_bytes(rt)
    assert per > 2 * 4 * 1500 * rt.d_model * len(rt.layers)  # at least the cross-attention keys and values
    free = int(5 * per / batch_memory.USABLE) + 1  # room for 5 rows
    with caplog.at_level(logging.WARNING):
        assert batch_memory.fit_batch_size(16, rt, free=free) == 5
        assert batch_memory.fit_batch_size(4, rt, free=free) == 4
        assert batch_memory.fit_batch_size(None, rt, free=free) == 5  # the CPU's default 8, as far as memory goes
        assert batch_memory.fit_batch_size(None, rt, free=100 * per) == 8
    assert [r.getMessage() for r in caplog.records] == [
        f"batch size 16 needs about {16 * per / 2**30:.1f} GB and the CPU has {free / 2**30:.1f} GB free: decoding 5 chunks at a time"]
    with pytest.raises(ValueError, match=r"^one 30 s chunk needs about \d+ MB on the CPU and only \d+ MB are free: free some memory"):
        batch_memory.fit_batch_size(1, rt, free=per // 2)


def test_the_engine_and_the_cli_check_the_batch_before_any_work(small_runtime, monkeypatch, capsys, manifest, tmp_path):
    from specwhisper.serving.cli.main import main

    per = batch_memory.row_bytes(small_runtime)
    monkeypatch.setattr(batch_memory, "free_bytes", lambda device: per // 3)
    jfk = next(m for m in manifest if m.file.endswith("jfk.flac")).path
    t = time.perf_counter()
    assert main([str(jfk), "-m", "base", "--draft", "none", "--batch-size", "4", "-o", str(tmp_path), "-q"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("transcribe: error: one 30 s chunk needs about") and "Traceback" not in err[0]
    assert not list(tmp_path.iterdir())  # nothing written
    assert time.perf_counter() - t < 120
