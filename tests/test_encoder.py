"""``specwhisper.asr.runtime.encoder``: the encoder's forward over packed products agrees with the module
(transformers' numbers) to within float32 rounding on real speech, equals it bitwise where nothing
is packed, and the GPU libraries a CUDA build of torch maps are handed back on the CPU (tiny.en's encoder:
the runtime's forward is the same code for every size, at a quarter of base's time)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from specwhisper.asr.runtime.encoder import EncoderRuntime
from specwhisper.hardware import kernels


@pytest.fixture(scope="module")
def speech_features(tiny_engine, manifest):
    """The log-mel features of the first 30 s of the public set's first two files: a batch of two windows."""
    from specwhisper.audio.loading import load_audio

    extract = tiny_engine.bundle.feature_extractor
    feats = [extract(load_audio(item.path)[: 30 * 16000], sampling_rate=16000, return_tensors="pt").input_features
             for item in manifest[:2]]
    return torch.cat(feats).to(tiny_engine.bundle.model.dtype)


def test_packed_encoder_agrees_with_the_module(tiny_engine, speech_features):
    module = tiny_engine.bundle.model.model.encoder
    with torch.inference_mode():
        ref = module(speech_features).last_hidden_state
    out = tiny_engine.encoder.encode(speech_features)
    assert tiny_engine.encoder.layers[0].fc1.packed  # this CPU runs the packed path
    assert out.shape == ref.shape
    # another summation order, nothing more: measured 1.6e-5 at most on outputs up to 12 in magnitude
    assert (out - ref).abs().max().item() < 1e-3
    assert torch.allclose(out, ref, rtol=1e-4, atol=5e-4)
    # the audio-only encoder (drafters, live) runs the same forward over the frames that hold audio
    part = tiny_engine.encoder.encode_audio_part(speech_features[:1])
    assert part.shape[1] <= ref.shape[1] and part.shape[2] == ref.shape[2]


def test_unpacked_encoder_is_the_module_bitwise(tiny_engine, speech_features, monkeypatch):
    """Where weights cannot be packed (a GPU, float16) the products are ``F.linear``: the query, key and
    value in one product and the query scaled after it change no number."""
    monkeypatch.setattr(kernels, "packable", lambda weight: False)
    module = tiny_engine.bundle.model.model.encoder
    runtime = EncoderRuntime(module)
    assert not runtime.layers[0].qkv.packed
    with torch.inference_mode():
        assert torch.equal(runtime(speech_features), module(speech_features).last_hidden_state)


def test_on_a_gpu_the_batch_is_encoded_in_one_call(tiny_engine, speech_features, monkeypatch):
    """A GPU's encoder (weights on CUDA: ``whole_batch``) takes the batch in one call; each window gets the
    module's numbers for that batch, and what it gets alone to within float rounding."""
    monkeypatch.setattr(kernels, "packable", lambda weight: False)
    module = tiny_engine.bundle.model.model.encoder
    runtime = EncoderRuntime(module)
    assert not runtime.whole_batch  # the weights are on the CPU
    with torch.inference_mode():
        alone = runtime(speech_features)
        runtime.whole_batch = True
        together = runtime(speech_features)
        assert torch.equal(together, module(speech_features).last_hidden_state)
    assert torch.allclose(together, alone, rtol=1e-4, atol=1e-4)


LIBRARY_PAGES = """
import mmap, re, sys, torch
from specwhisper.hardware import memory

pattern, release, library = getattr(memory, sys.argv[1]), getattr(memory, sys.argv[2]), sys.argv[3]

def resident_kb(path):
    total, name = 0, ""
    for line in open("/proc/self/smaps"):
        if re.match(r"^[0-9a-f]+-[0-9a-f]+ ", line):
            fields = line.split()
            name = fields[5] if len(fields) > 5 else ""
        elif line.startswith("Rss:") and name == path:
            total += int(line.split()[1])
    return total

torch_maps = any(pattern.search(line) for line in open("/proc/self/maps"))
with open(library, "rb") as f:
    pages = mmap.mmap(f.fileno(), 0, prot=mmap.PROT_READ)
    touched = sum(pages[i] for i in range(0, len(pages), mmap.PAGESIZE))  # every page resident
    before = resident_kb(library)
    advised = release()
    after = resident_kb(library)
    again = sum(pages[i] for i in range(0, len(pages), mmap.PAGESIZE))  # read back from the file
x = torch.randn(64, 64)
print(torch_maps, before, after, advised, touched == again, bool(torch.allclose(x @ torch.eye(64), x)))
"""


@pytest.mark.parametrize("pattern, release, name", [
    ("GPU_LIBRARY", "release_gpu_library_pages", "libcublasLt.so.13"),
    ("TORCH_CPU_LIBRARY", "release_torch_import_pages", "libtorch_cpu.so"),
])
def test_library_pages_are_handed_back_on_the_cpu(pattern, release, name, tmp_path):
    """In a fresh process, as every entry point starts (``AsrEngine`` on the CPU calls both): the GPU
    libraries a CUDA build of torch maps at import, and the pages of torch's CPU library that its
    import ran. The kernel keeps a page resident while another process maps it too (the other test
    worker's torch), so the pages handed back are those of a file only the child maps, named as the
    library is; the child's torch maps libraries the pattern finds."""
    library = tmp_path / name
    library.write_bytes(torch.randint(0, 256, (32 * 2**20,), dtype=torch.uint8).numpy().tobytes())
    run = subprocess.run([sys.executable, "-c", LIBRARY_PAGES, pattern, release, str(library)],
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    torch_maps, before, after, advised, same, computes = run.stdout.split()
    if pattern == "GPU_LIBRARY" and torch.version.cuda is None:
        assert torch_maps == "False"
    else:
        assert torch_maps == "True"
    assert int(before) >= 30 * 1024 and int(advised) >= 32 * 2**20
    assert int(after) < int(before) / 4
    assert same == "True" and computes == "True"  # the pages fault in again, and the CPU still computes
