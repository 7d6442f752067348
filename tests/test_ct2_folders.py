"""faster-whisper's own model folders (CTranslate2, float16 or int8) load as the models they hold, from a
path, a hub id or the hub cache's copy of an openai checkpoint; a broken one is a one-line error."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

import specwhisper
from specwhisper.asr.weights.loader import ensure_embedded

CLIPS = ["openai-whisper/jfk.flac", "cuttledoc-fleurs/fleurs-en-002.ogg"]


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """tiny.en as faster-whisper folders, written by CTranslate2's own converter (what Systran's repositories
    hold: ``float16``; and ``int8``, the quantization users convert to for CPUs)."""
    from ctranslate2.converters import TransformersConverter

    root = tmp_path_factory.mktemp("ct2")
    source = str(ensure_embedded("tiny.en"))
    return {q: TransformersConverter(source, copy_files=["tokenizer.json"]).convert(str(root / q), quantization=q)
            for q in ("float16", "int8")}


@pytest.fixture(scope="module")
def tiny_transcripts(eval_root):
    tiny = specwhisper.load("tiny.en", draft="none")
    return [tiny.transcribe(str(eval_root / clip)) for clip in CLIPS]


def _decoded(transcript) -> list[tuple]:
    return [(s.start, s.end, s.tokens) for s in transcript.segments]


def test_a_float16_folder_decodes_as_the_model_it_holds(folders, tiny_transcripts, eval_root, tmp_path):
    """tiny.en's float16 weights from a faster-whisper folder: every token and timestamp of tiny.en's. The
    conversion the Inference Endpoint handler wrote of the same file before (``repository-<folder>-<key>``,
    float32) is removed once this one is written."""
    weights = Path(folders["float16"]) / "model.bin"
    stat = weights.stat()
    key = hashlib.sha256(f"{weights.resolve()}:{stat.st_size}:{stat.st_mtime_ns}".encode()).hexdigest()[:16]
    (tmp_path / "models" / f"repository-float16-{key}").mkdir(parents=True)
    (tmp_path / "models" / f"repository-float16-{key}" / "config.json").write_text("{}")
    (tmp_path / "models" / "repository-other-0123456789abcdef").mkdir()  # another model's: kept
    model = specwhisper.load(folders["float16"], draft="none", cache_dir=str(tmp_path))
    for clip, want in zip(CLIPS, tiny_transcripts):
        assert _decoded(model.transcribe(str(eval_root / clip))) == _decoded(want), clip
    converted, other = sorted((tmp_path / "models").iterdir())
    assert converted.name.startswith("float16-")  # converted once, named after the folder
    assert other.name == "repository-other-0123456789abcdef"


def test_an_int8_folder_gives_faster_whispers_segments(folders, eval_root, tmp_path):
    """An int8 folder through our faster-whisper interface and through faster-whisper itself (its weights
    taken as floats, ``compute_type="float32"``): the same segments (their texts and ends: ours start at the
    first word, docs/transcription.md)."""
    import faster_whisper

    ours = specwhisper.WhisperModel(folders["int8"], device="cpu", download_root=str(tmp_path), draft="none")
    theirs = faster_whisper.WhisperModel(folders["int8"], device="cpu", compute_type="float32", cpu_threads=2)
    for clip in CLIPS:  # faster-whisper's defaults: beam 5, each window after the text before
        # the samples PyAV decodes (faster-whisper's reader): ours of the .ogg differ by up to 8e-4, which
        # turns a near tie of beam search ("with" or "within" on fleurs-en-002, with base too)
        samples = faster_whisper.decode_audio(str(eval_root / clip))
        got = [(s.end, s.text) for s in ours.transcribe(samples)[0]]
        want = [(s.end, s.text) for s in theirs.transcribe(samples)[0]]
        assert got == want, clip


def test_faster_whispers_copy_in_the_hub_cache_stands_for_the_openai_checkpoint(folders, tiny_transcripts, eval_root,
                                                                             tmp_path, monkeypatch):
    """With no network, ``openai/whisper-tiny.en`` (``-m`` of a user who ran faster-whisper before) loads from
    the hub cache's ``Systran/faster-whisper-tiny.en``, as does that id itself."""
    import shutil

    import huggingface_hub.constants

    revision = "0" * 40
    repo = tmp_path / "hub" / "models--Systran--faster-whisper-tiny.en"
    shutil.copytree(folders["float16"], repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    for name in ("openai/whisper-tiny.en", "Systran/faster-whisper-tiny.en"):
        model = specwhisper.load(name, draft="none", cache_dir=str(tmp_path / "cache"))
        assert _decoded(model.transcribe(str(eval_root / CLIPS[0]))) == _decoded(tiny_transcripts[0]), name
    assert [p.name.split("-")[0] for p in (tmp_path / "cache" / "models").iterdir()] == ["faster"]  # converted once


@pytest.mark.parametrize("damage, message", [
    ("no tokenizer", "a CTranslate2 model without tokenizer.json"),
    ("truncated", "cannot convert the CTranslate2 model in"),
])
def test_a_broken_folder_is_one_line(folders, capsys, tmp_path, damage, message):
    import shutil

    from specwhisper.serving.cli.main import main

    broken = shutil.copytree(folders["int8"], tmp_path / "broken")
    if damage == "no tokenizer":
        (broken / "tokenizer.json").unlink()
    else:
        data = (broken / "model.bin").read_bytes()
        (broken / "model.bin").write_bytes(data[: len(data) // 2])
    code = main(["samples/meeting-dev00.wav", "-m", str(broken), "--cache-dir", str(tmp_path / "cache"), "-o", str(tmp_path)])
    err = capsys.readouterr().err
    assert code != 0 and message in err and len(err.strip().splitlines()) == 1, err
