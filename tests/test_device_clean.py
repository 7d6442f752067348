"""Every tensor the decoders make to meet the model lives on the model's device: checked without a GPU
by simulating a second device on the CPU (tests.devicecheck), with every drafter kind, word timestamps
and language detection, and the host reads per target pass counted (a drafter model's tokens stay on the
device until the verify pass reads them with its verdict)."""

from __future__ import annotations

import pytest
import torch

from specwhisper.audio.loading import load_audio
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from tests.devicecheck import HostDeviceMix, HostDeviceMode
from tests.exactness import drafting_factory

DRAFTS = ["none", "ngram", "early-exit", "base:4", "tiny.en"]


@pytest.fixture(scope="module")
def audio(manifest):
    item = next(m for m in manifest if m.file.endswith("jfk.flac"))
    return load_audio(item.path)


def test_the_check_catches_a_host_tensor_meeting_the_weights(base_engine):
    rt = base_engine.runtime
    with HostDeviceMode(), pytest.raises(HostDeviceMix, match="embedding"):
        rt.embed_at(torch.tensor([[1, 2]]), torch.tensor([[0, 1]]))
    with HostDeviceMode():  # made on the weights' device: fine
        rt.embed_at(torch.tensor([[1, 2]], device=rt.device), torch.tensor([[0, 1]], device=rt.device))


@pytest.mark.parametrize("draft", DRAFTS)
def test_decoding_makes_its_tensors_on_the_models_device(base_engine, audio, draft):
    engine = AsrEngine("base", bundle=base_engine.bundle, decoder_factory=drafting_factory(draft))
    # the runtime as a GPU runs it: no per-query attention, positions never read on the host
    runtimes = {engine.runtime, getattr(getattr(getattr(engine.decoder, "drafter", None), "m", None), "runtime", None)} - {None}
    for rt in runtimes:
        rt.row_exact = rt.host_positions = False
    drafter = getattr(engine.decoder, "drafter", None)
    if hasattr(drafter, "watch_stops"):
        drafter.watch_stops = False  # as on a GPU whose end-of-draft flags land after the round
    for owner in (drafter, getattr(drafter, "runtime", None)):
        if hasattr(owner, "whole_batch"):
            owner.whole_batch = True  # picks for the whole batch in one call, as a GPU captures them
    if hasattr(engine.decoder, "captured"):
        engine.decoder.captured = True  # a plain step's choice in one call, as a GPU captures it
    with HostDeviceMode() as mode:
        result = engine.transcribe(audio, DecodeOptions(language=None, word_timestamps=True))
    text = " ".join(s.text for s in result.segments)
    assert "ask not what your country can do for you" in text
    assert result.segments[0].words
    stats = result.stats
    reads = sum(mode.transfers.values())
    print(f"\n{draft}: {reads} host reads, {stats.target_passes} target passes, {stats.drafted_tokens} drafted: "
          f"{dict(mode.transfers)}; {mode.blocking_copies} blocking copies")
    # a plain step reads its tokens once, a speculative round its verdict once, with a drafter model's
    # drafts when they are in the target's vocabulary (not once per draft token: ``DraftSteps``); then a
    # few for prefill, language detection and word alignment. tiny.en drafts in another vocabulary: its
    # drafts are read to re-tokenise them, once a round.
    # host lists reach the device as queued copies (``on_device``), not as copies that wait for the GPU
    assert mode.blocking_copies == 0
    if draft == "tiny.en":
        assert reads <= 2 * stats.target_passes + 5 < stats.target_passes + stats.drafted_tokens
    else:
        assert reads <= stats.target_passes + 5
