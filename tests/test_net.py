"""``specwhisper.asr.weights.net``: Whisper's network without transformers' model code gives transformers'
numbers bitwise, from every checkpoint layout a user brings, and keeps that code out of the process."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import WhisperForConditionalGeneration

from specwhisper.asr.weights.loader import ModelError, load_whisper, resolve_model_path
from tests.random_whisper import write_random_whisper

ROOT = Path(__file__).resolve().parents[1]


def _same_as_transformers(folder: Path, mels: int):
    ours = load_whisper(str(folder)).model
    theirs = WhisperForConditionalGeneration.from_pretrained(folder, attn_implementation="sdpa").eval()
    a, b = ours.state_dict(), theirs.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert ours.proj_out.weight is ours.model.decoder.embed_tokens.weight  # tied, as transformers ties them
    torch.manual_seed(0)
    features = torch.randn(1, mels, 3000)
    with torch.inference_mode():
        mine = ours.model.encoder(features).last_hidden_state
        ref = theirs.model.encoder(features).last_hidden_state
    assert torch.equal(mine, ref)


def test_base_encoder_is_bitwise_transformers():
    _same_as_transformers(Path(resolve_model_path("base")), 80)


def test_large_v3_layout_is_bitwise_transformers(tmp_path):
    """32 encoder layers, 128 mel bins, large-v3's vocabulary (random weights, small width)."""
    _same_as_transformers(write_random_whisper(tmp_path / "v3", "large-v3"), 128)


@pytest.fixture(scope="module")
def small_checkpoint(tmp_path_factory):
    return write_random_whisper(tmp_path_factory.mktemp("small") / "m", "medium", max_positions=64)


def test_sharded_and_bin_checkpoints_load_the_same_weights(small_checkpoint, tmp_path):
    model = WhisperForConditionalGeneration.from_pretrained(small_checkpoint)
    want = load_whisper(str(small_checkpoint)).model.state_dict()
    for name, kwargs in (("shards", {"max_shard_size": "2MB"}), ("bin", {"safe_serialization": False})):
        folder = tmp_path / name
        shutil.copytree(small_checkpoint, folder)
        (folder / "model.safetensors").unlink()
        try:
            model.save_pretrained(folder, **kwargs)
        except TypeError:  # a transformers without .bin saving: write the file torch.save would
            torch.save(model.state_dict(), folder / "pytorch_model.bin")
        got = load_whisper(str(folder)).model.state_dict()
        assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got), name


def test_half_precision_checkpoint_loads_as_float32(small_checkpoint, tmp_path):
    folder = tmp_path / "fp16"
    shutil.copytree(small_checkpoint, folder)
    WhisperForConditionalGeneration.from_pretrained(small_checkpoint).half().save_pretrained(folder)
    model = load_whisper(str(folder)).model
    assert model.dtype == torch.float32 and model.model.encoder.conv1.weight.dtype == torch.float32


@pytest.mark.parametrize("damage", ["no weights", "missing layer", "wrong shape"])
def test_broken_checkpoints_fail_in_one_line(small_checkpoint, tmp_path, damage):
    from safetensors.torch import load_file, save_file

    folder = tmp_path / "broken"
    shutil.copytree(small_checkpoint, folder)
    weights = folder / "model.safetensors"
    if damage == "no weights":
        weights.unlink()
    else:
        state = load_file(weights)
        if damage == "missing layer":
            state = {k: v for k, v in state.items() if ".layers.1." not in k}
        else:
            state["model.encoder.conv1.weight"] = state["model.encoder.conv1.weight"][:, :10].contiguous()
        save_file(state, weights, metadata={"format": "pt"})
    with pytest.raises(ModelError) as err:
        load_whisper(str(folder))
    message = str(err.value)
    assert "\n" not in message and "broken" in message
    assert {"no weights": "no model.safetensors", "missing layer": "weights missing", "wrong shape": "has shape"}[damage] in message


def test_transcribing_imports_no_transformers_model_code(tmp_path):
    """transformers' model code (modeling_utils, and torch._dynamo with it) cost 211 MB and 2.3 s of
    start-up; the CLI's whole run on a file must not import it."""
    code = ("import runpy, sys\n"
            "sys.argv = ['transcribe', 'samples/jfk.wav', '-f', 'txt', '-o', sys.argv[1], '--draft', 'none']\n"
            "try:\n    runpy.run_module('specwhisper.serving.cli.main', run_name='__main__')\n"
            "except SystemExit as e:\n    assert not e.code, e.code\n"
            "bad = [m for m in ('transformers.modeling_utils', 'torch._dynamo', 'transformers.models.whisper.modeling_whisper') if m in sys.modules]\n"
            "print(','.join(bad) or 'clean')\n")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], cwd=ROOT,
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "clean"
