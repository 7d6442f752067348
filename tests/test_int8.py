"""``MODEL:int8`` targets (specwhisper.hardware.kernels.Int8Linear): exact with respect to themselves, speculation
included, and close to the float32 model on real speech."""

from __future__ import annotations

import functools

import pytest
import torch

from specwhisper.audio.loading import load_audio
from specwhisper.asr.drafters.choice import decoder_factory
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from specwhisper.hardware.kernels import Int8Linear
from specwhisper.evaluation.transcripts import wer

pytestmark = pytest.mark.filterwarnings("ignore")


@pytest.fixture(scope="module")
def int8_engine():
    return AsrEngine("base:int8")


@pytest.fixture(scope="module")
def int8_plain(int8_engine):
    """The int8 engine's own transcript of a manifest item (English), made once per file for this module."""
    return functools.cache(lambda item: int8_engine.transcribe(load_audio(item.path), DecodeOptions(language="en")))


def test_an_int8_rows_product_does_not_depend_on_the_rows_beside_it(base_engine):
    """fbgemm chooses one activation scale per call; each row is scaled on its own first, so a row's
    numbers are the same alone, among 16, or at any place (what a verify pass needs)."""
    layer = base_engine.runtime.layers[2]
    for lin, width in ((layer.fc1, 512), (layer.fc2, 2048)):
        product = Int8Linear.quantize(lin.weight, lin.bias)
        x = torch.randn(16, width, generator=torch.Generator().manual_seed(0)) * torch.logspace(-2, 2, 16)[:, None]
        whole = product(x)
        for n in range(1, 16):
            assert torch.equal(product(x[:n]), whole[:n])
        for i in (0, 7, 15):
            assert torch.equal(product(x[i : i + 1]), whole[i : i + 1])
        ref = lin(x)
        assert ((whole - ref).norm(dim=1) / ref.norm(dim=1)).max() < 0.05  # int8: about 1.5% off float32
    assert torch.equal(product(torch.zeros(2, 2048)), lin.bias.detach().expand(2, -1))  # an all-zero row


def test_int8_target_runs_int8_products(int8_engine):
    rt = int8_engine.runtime
    assert rt.int8 and rt.row_exact
    assert isinstance(rt.products[0].fc1, Int8Linear) and isinstance(rt.head.main, Int8Linear)
    assert not any(type(m) is torch.nn.Linear for m in int8_engine.bundle.model.model.decoder.modules())


@pytest.mark.parametrize("draft", ["ngram", "early-exit"])
def test_speculation_on_an_int8_target_is_token_identical(int8_engine, int8_plain, manifest, draft):
    spec = AsrEngine("base:int8", bundle=int8_engine.bundle, decoder_factory=decoder_factory(draft))
    # the first three English files but whisper.cpp's jfk.wav (jfk.flac's speech again): jfk.flac,
    # stereo_diarization.wav, 2412-153948-0000.flac
    items = [m for m in manifest if m.language == "en" and m.file != "whisper.cpp/jfk.wav"][:3]
    opts = DecodeOptions(language="en")
    for item in items:
        plain = int8_plain(item)
        fast = spec.transcribe(load_audio(item.path), opts)
        assert [s.tokens for s in fast.segments] == [s.tokens for s in plain.segments], item.file
        assert fast.stats.accepted_tokens > 0 or draft == "ngram"


def test_int8_transcribes_about_as_well_as_float32(int8_plain, base_engine, manifest):
    # the speculation test's three files (83 words; the next two English files add 11), whose int8
    # transcripts are made once
    items = [m for m in manifest if m.language == "en" and m.reference and m.file != "whisper.cpp/jfk.wav"][:3]
    opts = DecodeOptions(language="en")
    refs, f32, i8 = [], [], []
    for item in items:
        audio = load_audio(item.path)
        refs.append(item.reference)
        f32.append(" ".join(s.text for s in base_engine.transcribe(audio, opts).segments))
        i8.append(" ".join(s.text for s in int8_plain(item).segments))
    w32, w8 = wer(refs, f32), wer(refs, i8)
    print(f"\nWER float32 {w32:.3f}, int8 {w8:.3f} on {len(items)} files")
    assert w8 <= w32 + 0.05


def test_int8_needs_the_cpu():
    from specwhisper.asr.weights.loader import ModelError, load_whisper

    with pytest.raises(ModelError, match="CPU only"):
        load_whisper("base:int8", device="cuda")
