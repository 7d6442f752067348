"""Whisper's input convention (specwhisper.asr.features): a file that fits one window gets its log-mel
zero-padded as faster-whisper computes it; a chunk of a longer file and a re-decoded stretch keep
openai-whisper's padding of the audio with silence."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import WhisperFeatureExtractor

from specwhisper.asr.engine import _pieces
from specwhisper.asr.features import LogMel
from specwhisper.audio.chunking import Chunk
from specwhisper.audio.loading import SAMPLE_RATE, load_audio


@pytest.fixture(scope="module")
def clip(eval_root):
    return load_audio(eval_root / "cuttledoc-fleurs" / "fleurs-es-000.ogg")


def test_a_whole_file_is_zero_padded_as_faster_whisper_pads_it(clip):
    """Against faster-whisper's own feature code: its log-mel of the file, then ``pad_or_trim`` to 3000
    frames (WhisperModel.generate_segments)."""
    from faster_whisper.audio import pad_or_trim
    from faster_whisper.feature_extractor import FeatureExtractor

    theirs = pad_or_trim(FeatureExtractor()(clip)[:, :-1])  # content frames: the last one straddles the end
    ours = LogMel(WhisperFeatureExtractor())([clip], [True])[0].numpy()
    assert ours.shape == theirs.shape == (80, 3000)
    n = len(clip) // 160
    assert np.abs(theirs[:, n:]).max() == 0.0 and np.abs(ours[:, n:]).max() == 0.0
    assert np.abs(ours - theirs).max() < 1e-3


def test_a_piece_of_a_longer_file_is_padded_with_silence(clip):
    """openai-whisper's input: the audio padded to 30 s, so the frames after it sit at the floor, 80 dB
    (2.0 in Whisper's scaled units) under the loudest frame."""
    ours = LogMel(WhisperFeatureExtractor())([clip], [False])[0].numpy()
    tail = ours[:, len(clip) // 160 + 2:]
    assert np.allclose(tail, ours.max() - 2.0, atol=1e-5)


def test_a_batch_of_pieces_gets_transformers_own_features_bitwise(clip):
    """Pieces of unequal lengths (a whole window, a few seconds, a few milliseconds, one past 30 s), in
    one call: each window is what ``WhisperFeatureExtractor`` gives the same batch, to the bit."""
    fe = WhisperFeatureExtractor()
    pieces = [clip[: 30 * SAMPLE_RATE], clip[SAMPLE_RATE : 4 * SAMPLE_RATE], clip[:80], np.tile(clip, 8)[: 31 * SAMPLE_RATE]]
    theirs = fe(pieces, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features
    ours = LogMel(fe)(pieces, [False] * len(pieces)).numpy()
    assert ours.shape == theirs.shape == (4, 80, 3000)
    assert np.array_equal(ours, theirs)
    # a zero-padded piece among them: the same windows for the others
    mixed = LogMel(fe)(pieces, [False, True, False, False]).numpy()
    assert np.array_equal(mixed[[0, 2, 3]], theirs[[0, 2, 3]]) and not np.array_equal(mixed[1], theirs[1])


def test_the_engine_zero_pads_only_planned_chunks_that_are_their_whole_file():
    short, long = np.zeros(10 * SAMPLE_RATE, np.float32), np.zeros(70 * SAMPLE_RATE, np.float32)
    items = [(0, Chunk(0, len(short))),  # a file that fits one window
             (1, Chunk(0, 30 * SAMPLE_RATE)), (1, Chunk(30 * SAMPLE_RATE, len(long))),  # chunks of a long file
             (0, Chunk(0, len(short), depth=1)),  # a re-decoded stretch (here: all of the short file)
             (0, Chunk(SAMPLE_RATE, len(short), depth=1))]
    pieces, zero = _pieces([short, long], items)
    assert zero == [True, False, False, False, False]
    assert [len(p) for p in pieces] == [c.end - c.start for _, c in items]
