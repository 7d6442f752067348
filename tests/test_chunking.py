"""Chunk planning (specwhisper.audio.chunking): the VAD chooses cut points, every sample is decoded once
(but what a pause leaves under a second between full chunks)."""

from __future__ import annotations

import pytest

from specwhisper.audio.chunking import Chunk, plan_chunks, to_decode

SR = 16000


def _check_tiling(chunks: list[Chunk], n: int, limit_s: float = 30.0) -> None:
    assert chunks[0].start == 0 and chunks[-1].end == n
    for a, b in zip(chunks, chunks[1:]):
        assert a.end == b.start, "chunks must neither overlap nor leave a gap"
    assert all(0 < c.end - c.start <= limit_s * SR for c in chunks)


@pytest.mark.parametrize(
    "spans, n",
    [
        ([], 75 * SR),  # the VAD heard nothing: the file is still decoded, in <=30 s pieces
        ([(2 * SR, 10 * SR)], 12 * SR),
        ([(1 * SR, 9 * SR), (70 * SR, 80 * SR)], 100 * SR),  # a minute of pause between two utterances
        ([(k * 7 * SR, k * 7 * SR + 6 * SR) for k in range(20)], 140 * SR),  # dense speech
        ([(0, 30 * SR), (30 * SR, 60 * SR)], 60 * SR),  # spans silero already split at the limit
    ],
)
def test_chunks_cover_the_whole_file(spans, n):
    chunks = plan_chunks(spans, n)
    _check_tiling(chunks, n)
    for s, e in spans:  # each speech span lies in one chunk, which knows it heard speech there
        holder = [c for c in chunks if c.start <= s and e <= c.end]
        assert len(holder) == 1 and holder[0].speech and holder[0].voiced_in(s, e) == e - s


def test_long_pause_becomes_chunks_marked_without_speech():
    chunks = plan_chunks([(1 * SR, 9 * SR), (70 * SR, 80 * SR)], 100 * SR)
    assert [c.speech for c in chunks] == [True, False, True, False]
    # each utterance takes the pauses beside it, the room under 30 s shared between its two sides
    assert (chunks[0].start, chunks[0].end) == (0, 30 * SR)
    assert (chunks[2].start, chunks[2].end) == (60 * SR, 90 * SR)
    assert [(c.start, c.end) for c in chunks if not c.speech] == [(30 * SR, 60 * SR), (90 * SR, 100 * SR)]
    assert plan_chunks([], 10 * SR) == [Chunk(0, 10 * SR)]


def test_a_piece_of_a_pause_under_a_second_is_not_decoded():
    ms = SR // 1000
    # two full windows around a 600 ms pause: each takes 100 ms of it, 400 ms are left between them
    chunks = plan_chunks([(0, 29_900 * ms), (30_500 * ms, 60_400 * ms)], 60_400 * ms)
    assert [(c.start, c.end, c.speech) for c in chunks] == [
        (0, 30_000 * ms, True), (30_000 * ms, 30_400 * ms, False), (30_400 * ms, 60_400 * ms, True)]
    assert to_decode(chunks) == [chunks[0], chunks[2]]
    # with 1 s windows a 2.5 s pause is three pieces of 833 ms, all decoded
    short = plan_chunks([(0, SR), (3_500 * ms, 4_500 * ms)], 4_500 * ms, max_chunk_s=1.0)
    assert [c.speech for c in short] == [True, False, False, False, True] and to_decode(short, 1.0) == short
    assert to_decode([Chunk(0, SR // 2)]) == [Chunk(0, SR // 2)]  # a half-second file is still decoded


def test_cut_is_in_the_middle_of_a_pause():
    chunks = plan_chunks([(0, 20 * SR), (22 * SR, 40 * SR)], 40 * SR)
    assert [c.start for c in chunks] == [0, 21 * SR]


def test_part_keeps_the_speech_inside_it():
    c = Chunk(0, 30 * SR, ((SR, 5 * SR), (10 * SR, 20 * SR)))
    p = c.part(4 * SR, 12 * SR)
    assert p.voiced == ((4 * SR, 5 * SR), (10 * SR, 12 * SR)) and p.depth == 1
    assert c.voiced_in(4 * SR, 12 * SR) == 3 * SR



def test_joined_chunks_hold_the_speech_alone():
    """--vad-filter: spans packed back to back, at most 30 s of speech a window; the pauses are in none."""
    import numpy as np

    from specwhisper.audio.chunking import join_spans

    spans = [(1 * SR, 9 * SR), (70 * SR, 80 * SR), (81 * SR, 95 * SR), (100 * SR, 110 * SR)]  # 8, 10, 14, 10 s
    chunks = join_spans(spans)
    assert [c.voiced for c in chunks] == [tuple(spans[:2]), tuple(spans[2:])]  # 8 + 10 s; 14 + 10 s
    assert [c.duration_s for c in chunks] == [18.0, 24.0] and all(c.joined and c.speech for c in chunks)
    audio = np.arange(120 * SR, dtype=np.float32)
    assert np.array_equal(chunks[0].samples(audio), np.concatenate([audio[SR : 9 * SR], audio[70 * SR : 80 * SR]]))
    # times in the joined audio -> times of the file; where two spans meet: the first one's end, or the next one's start
    first = chunks[0]
    assert [first.time_at(t) for t in (0.0, 4.0, 8.0, 12.5, 18.0, 99.0)] == [1.0, 5.0, 70.0, 74.5, 80.0, 80.0]
    assert first.time_at(8.0, end=True) == 9.0 and first.time_at(-1.0) == 1.0


def test_a_pause_is_cut_at_its_quietest_point():
    """Loud noise, a -60 dB murmur the spans call a pause with 0.3 s of silence in it, loud noise."""
    import numpy as np

    from specwhisper.audio.chunking import frame_levels

    rng = np.random.default_rng(0)
    audio = rng.normal(0, 0.1, 40 * SR).astype(np.float32)
    audio[10 * SR : 25 * SR] *= 1e-2
    audio[19 * SR : int(19.3 * SR)] = 0
    spans = [(0, 10 * SR), (25 * SR, 40 * SR)]
    assert plan_chunks(spans, 40 * SR)[1].start == int(17.5 * SR)  # the middle, without levels
    cut = plan_chunks(spans, 40 * SR, levels=frame_levels(audio))[1].start
    assert 19 * SR <= cut <= 19.3 * SR


def test_a_voice_the_vad_misses_is_not_cut_inside_a_word(eval_root):
    """MFA's spontaneous clip at -55 dB between two JFKs: the VAD hears none of it, so it is one 27 s
    "pause"; cut in its middle (24.5 s) a word is split between two windows, cut at its quietest point
    the cut falls between words (MFA's word alignment)."""
    import numpy as np

    from specwhisper.audio.chunking import frame_levels
    from specwhisper.audio.loading import load_audio
    from specwhisper.audio.vad import VoiceActivityDetector
    from specwhisper.evaluation.transcripts import read_textgrid_words

    jfk = load_audio(eval_root / "openai-whisper/jfk.flac")
    quiet = load_audio(eval_root / "mfa/acoustic_corpus.wav") * 10 ** (-55 / 20)
    audio = np.concatenate([jfk, quiet, jfk])
    spans = VoiceActivityDetector().speech_spans(audio)
    offset = len(jfk) / SR
    words = [(offset + a, offset + b) for a, b, w in read_textgrid_words(eval_root / "mfa/acoustic_corpus.TextGrid") if w]
    assert not any(s < (offset + 26) * SR and e > (offset + 1) * SR for s, e in spans)  # the VAD hears none of it

    def cuts(levels):
        return [c.start / SR for c in plan_chunks(spans, len(audio), levels=levels)[1:]]

    assert any(a < t < b for t in cuts(None) for a, b in words)
    assert not any(a < t < b for t in cuts(frame_levels(audio)) for a, b in words)


def test_a_voice_the_vad_misses_is_decoded_at_its_own_level(base_engine, eval_root):
    """FLEURS en-004 is a -67 dB recording: between two JFKs the VAD hears none of it and, in one window
    with them, Whisper writes JFK twice and nothing of it. The sound in that pause is a chunk of its own,
    decoded alone: the sentence is found. A pause of steady noise as loud is not split off."""
    import numpy as np

    from specwhisper.asr.engine import DecodeOptions
    from specwhisper.audio.chunking import frame_levels
    from specwhisper.audio.loading import load_audio

    jfk = load_audio(eval_root / "openai-whisper/jfk.flac")
    quiet = load_audio(eval_root / "cuttledoc-fleurs/fleurs-en-004.ogg")
    gap = np.zeros(SR // 2, np.float32)
    audio = np.concatenate([jfk, gap, quiet, gap, jfk])
    spans = base_engine.vad.speech_spans(audio)
    assert len(plan_chunks(spans, len(audio))) == 1  # without the levels: one window
    chunks = plan_chunks(spans, len(audio), levels=frame_levels(audio))
    middle = [c for c in chunks if not c.speech]
    assert len(middle) == 1 and middle[0].start <= len(jfk) + SR // 2 and middle[0].end >= len(jfk) + SR // 2 + len(quiet)

    text = " ".join(s.text for s in base_engine.transcribe(audio, DecodeOptions(language="en")).segments).lower()
    assert "people don't think about" in text and "feathers and can fly" in text, text

    noise = np.random.default_rng(0).normal(0, 10 ** (-67 / 20), len(quiet)).astype(np.float32)
    steady = np.concatenate([jfk, noise, jfk])
    spans = base_engine.vad.speech_spans(steady)
    assert all(c.speech for c in plan_chunks(spans, len(steady), levels=frame_levels(steady)))


def test_a_piece_of_a_pause_ends_before_the_speech_the_vad_heard_late(base_engine, tmp_path):
    """The built conversation (seed 4) at 152.1-159.0 s: ABBIE's clip, 0.14 s of digital silence, FLEURS
    en-004 (-65 dB, unheard by the VAD), 0.2 s of digital silence, then the acoustic-corpus clip, whose
    first second (-8 to -20 dB) silero scores under 0.5: its span starts 0.9 s late, and the chunk from
    it, full at 30 s, takes only 0.5 s before it. The piece of the pause between ends where that loud
    sound begins (``chunking._onset``); decoded alone it is the FLEURS sentence, and with that sound's
    first 0.5 s it reads as other words."""
    from specwhisper.asr.engine import DecodeOptions
    from specwhisper.audio.chunking import frame_levels
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, normalize

    audio = load_audio(build_long_file("speakers", tmp_path, 600, seed=4).path)
    spans = base_engine.vad.speech_spans(audio, 30.0)
    (piece,) = [c for c in to_decode(plan_chunks(spans, len(audio), levels=frame_levels(audio))) if c.start < 155 * SR < c.end]
    assert not piece.speech and 153 * SR < piece.start and 157.96 * SR < piece.end < 158.16 * SR
    following = min(c.start for c in plan_chunks(spans, len(audio), levels=frame_levels(audio)) if c.start >= piece.end and c.speech)

    def text(a, b):
        return normalize(" ".join(s.text for s in base_engine.transcribe(audio[a:b], DecodeOptions(language="en")).segments))

    assert "feathers" in text(piece.start, piece.end)
    assert "feathers" not in text(piece.start, following)  # the piece as it was, to the speech chunk's start


def test_sound_in_a_pause_ends_before_the_speech_the_vad_heard_late(base_engine, tmp_path):
    """The built talk (seed 4) at 157.6-165.2 s: the room after ABBIE's clip (-71 dB), digital silence,
    FLEURS en-004 (-65 dB, unheard by the VAD), digital silence, then the acoustic-corpus clip, whose
    first second silero scores under 0.5. The sound in that pause (``chunking._sounding``) reached the
    pause's end through that loud start (-13 dB, as if it were the quiet voice close to the speech); it
    ends before it now, and decoded alone it is the FLEURS sentence."""
    from specwhisper.asr.engine import DecodeOptions
    from specwhisper.audio.chunking import frame_levels
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file, normalize

    talk = build_long_file("dense", tmp_path, 600, seed=4)
    audio = load_audio(talk.path)
    corpus = next(c for c in talk.clips if c.start > 160 and "acoustic corpus" in c.reference)
    spans = base_engine.vad.speech_spans(audio, 30.0)
    (piece,) = [c for c in to_decode(plan_chunks(spans, len(audio), levels=frame_levels(audio))) if c.start < 161 * SR < c.end]
    assert not piece.speech and piece.end <= corpus.start * SR
    text = normalize(" ".join(s.text for s in base_engine.transcribe(audio[piece.start : piece.end], DecodeOptions(language="en")).segments))
    assert "feathers" in text, text
