"""The CTranslate2 -> transformers converter gives the same model: same greedy tokens as CTranslate2."""

from __future__ import annotations

import ctranslate2
import numpy as np
import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.asr.weights.ct2 import CT2FormatError, read_ct2_model
from specwhisper.asr.weights.loader import EMBEDDED_MODELS, _package_dir, write_ct2_folder

# two voices, a window each: CTranslate2's greedy tokens, timestamps included
FILES = ["whisper.cpp/jfk.wav", "cuttledoc-fleurs/fleurs-en-002.ogg"]


def _ct2_dir(name: str, tmp_path) -> str:
    return str(write_ct2_folder(name, tmp_path))


def test_reader_reads_whole_file():
    emb = EMBEDDED_MODELS["tiny.en"]
    m = read_ct2_model([_package_dir(p) / r for p, r in emb.parts])
    assert m.spec_name == "WhisperSpec"
    assert m.aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    assert m.get("decoder/embeddings/weight").shape == (51864, 384)
    assert int(m.get("decoder/num_heads")) == 6


@pytest.mark.parametrize("fraction", [0.00001, 0.001, 1 / 3, 0.99999])
def test_reader_rejects_truncated_file(tmp_path, fraction):
    # cut inside the header's names and shapes, inside an array, and in the aliases at the end
    emb = EMBEDDED_MODELS["tiny.en"]
    data = (_package_dir(emb.parts[0][0]) / emb.parts[0][1]).read_bytes()
    bad = tmp_path / "model.bin"
    bad.write_bytes(data[: int(len(data) * fraction)])
    with pytest.raises(CT2FormatError):
        read_ct2_model(bad)


def test_reader_reads_a_file_split_anywhere(tmp_path):
    # parts that split a name, a shape and an array: the same arrays as the whole file
    emb = EMBEDDED_MODELS["tiny.en"]
    data = (_package_dir(emb.parts[0][0]) / emb.parts[0][1]).read_bytes()
    cuts = [0, 7, 70_001, 70_003, len(data) // 2, len(data)]
    parts = []
    for i, (a, b) in enumerate(zip(cuts, cuts[1:])):
        parts.append(tmp_path / f"model.bin.part{i}")
        parts[-1].write_bytes(data[a:b])
    whole = tmp_path / "model.bin"
    whole.write_bytes(data)
    split, ref = read_ct2_model(parts), read_ct2_model(whole)
    assert list(split.variables) == list(ref.variables) and split.aliases == ref.aliases
    for name in ref.variables:
        np.testing.assert_array_equal(split.variables[name], ref.variables[name])


@pytest.mark.parametrize("model", ["base", "tiny.en"])
def test_converted_model_matches_ctranslate2(model, eval_root, tmp_path, request):
    engine = request.getfixturevalue("base_engine" if model == "base" else "tiny_engine")
    ref = ctranslate2.models.Whisper(_ct2_dir(model, tmp_path), device="cpu", compute_type="float32", intra_threads=2)
    sp = engine.special
    prompt = sp.prompt("en", "transcribe", timestamps=True)
    for file in FILES:
        audio = load_audio(eval_root / file)
        feats = engine.bundle.feature_extractor(audio, sampling_rate=16000, return_tensors="pt").input_features
        ours = engine.decoder.decode(engine.encoder.encode(feats), prompt).sequences[0]
        theirs = ref.generate(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(feats.numpy())),
            [prompt],
            beam_size=1,
            max_length=448,
            return_no_speech_prob=True,
            suppress_blank=True,
            max_initial_timestamp_index=50,
        )[0]
        assert ours.tokens == theirs.sequences_ids[0], f"{model} {file}: tokens differ from CTranslate2"
        assert any(t >= sp.timestamp_begin for t in ours.tokens), "timestamps expected"
        assert ours.no_speech_prob == pytest.approx(theirs.no_speech_prob, abs=1e-4)


def test_unknown_model_fails_fast_with_one_line():
    """Neither embedded, nor a folder, nor in the hub cache: a one-line ModelError (hub or no hub)."""
    from specwhisper.asr.weights.loader import ModelError, resolve_model_path

    with pytest.raises(ModelError, match="is not an embedded model") as info:
        resolve_model_path("no-such-org/no-such-whisper-model")
    assert "\n" not in str(info.value)
    with pytest.raises(ModelError, match="model folder not found"):
        resolve_model_path("./no/such/folder")


@pytest.mark.parametrize("model", ["tiny.en", "base"])
def test_transformers_pipeline_reads_the_converted_folder_with_timestamps(model, eval_root):
    """A peer's reader on our files: transformers' own ASR pipeline on the converted folder, timestamps on.
    An English-only folder needs a generation config without language and task ids, as openai's *.en."""
    from transformers import pipeline

    from specwhisper.asr.weights.loader import resolve_model_path
    from specwhisper.evaluation.transcripts import load_manifest, wer

    item = next(i for i in load_manifest(eval_root) if i.file == "whisper.cpp/jfk.wav")
    asr = pipeline("automatic-speech-recognition", model=resolve_model_path(model), device="cpu")
    out = asr(load_audio(item.path), return_timestamps=True, generate_kwargs={"language": "en"} if model == "base" else {})
    assert wer([item.reference], [out["text"]]) <= 0.1, out
    assert out["chunks"] and out["chunks"][0]["timestamp"][0] == 0.0 and 10.0 <= out["chunks"][-1]["timestamp"][1] <= 11.0, out


def test_a_new_converter_version_removes_the_folders_of_older_ones(tmp_path):
    """An upgrade that converts again (a new CONVERTER_VERSION) leaves no stale copy behind; other
    models' folders and other names are kept."""
    from specwhisper.asr.weights.loader import CONVERTER_VERSION, ensure_embedded

    models = tmp_path / "models"
    for stale in ("tiny.en-ct2conv0", "tiny.en-ct2conv1"):
        (models / stale).mkdir(parents=True)
        (models / stale / "model.safetensors").write_bytes(b"old")
    for kept in ("base-ct2conv1", "tiny.en-ct2conv1-mine"):
        (models / kept).mkdir(parents=True)
    folder = ensure_embedded("tiny.en", cache_dir=tmp_path)
    assert folder.name == f"tiny.en-ct2conv{CONVERTER_VERSION}" and (folder / "config.json").is_file()
    assert sorted(p.name for p in models.iterdir()) == sorted(["base-ct2conv1", "tiny.en-ct2conv1-mine", folder.name])


def test_a_streamed_safetensors_file_is_what_safetensors_reads(tmp_path):
    """The tensors written one by one after their header: safetensors' own reader gives them back, with the
    metadata, from an 8-byte-aligned data section; a tensor out of the planned order or shape is refused."""
    from safetensors import safe_open

    from specwhisper.asr.weights.safetensors_stream import write_streamed

    rng = np.random.default_rng(0)
    tensors = {"b.weight": rng.standard_normal((3, 5)), "a.bias": rng.standard_normal(7),
               "c.q": rng.standard_normal((4, 2, 3))[:, 1]}  # a strided view, written contiguous
    for dtype in (np.float16, np.float32):
        path = tmp_path / f"{np.dtype(dtype).name}.safetensors"
        write_streamed(path, {k: v.shape for k, v in tensors.items()}, dtype, tensors.items(), metadata={"format": "pt"})
        assert int.from_bytes(path.read_bytes()[:8], "little") % 8 == 0
        with safe_open(str(path), framework="np") as f:
            assert f.metadata() == {"format": "pt"} and sorted(f.keys()) == sorted(tensors)
            for name, value in tensors.items():
                got = f.get_tensor(name)
                assert got.dtype == dtype and np.array_equal(got, value.astype(dtype)), name
    shapes = {k: v.shape for k, v in tensors.items()}
    with pytest.raises(ValueError, match="not the one planned next"):
        write_streamed(tmp_path / "x.safetensors", shapes, np.float32, reversed(list(tensors.items())))
    with pytest.raises(ValueError, match="was planned but never came"):
        write_streamed(tmp_path / "y.safetensors", shapes, np.float32, list(tensors.items())[:2])


def test_a_conversion_that_fails_leaves_no_folder(tmp_path, monkeypatch):
    """A disk that fills while the weights are written: the error comes through and neither the model folder
    nor its partial copy is left for the next run to trust."""
    from specwhisper.asr.weights import convert

    def full_disk(path, *args, **kwargs):
        path.write_bytes(b"\0" * 64)
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(convert, "write_streamed", full_disk)
    emb = EMBEDDED_MODELS["tiny.en"]
    with pytest.raises(OSError, match="No space left"):
        convert.convert_ct2_whisper([_package_dir(p) / r for p, r in emb.parts], write_ct2_folder("tiny.en", tmp_path / "ct2"),
                                    tmp_path / "out" / "tiny.en")
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
