"""Chunk planning (specwhisper.audio.chunking): the VAD chooses cut points, every sample is decoded once
(but what a pause leaves under a second between full chunks)."""

from __future__ import annotations

import pytest

from specwhisper.audio.chunking import LEVEL_HOP, Chunk, join_heard, merge_spans, plan_chunks, to_decode

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

    from specwhisper.asr.options import DecodeOptions
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


def _planned(engine, audio):
    """The chunks the engine decodes (``AsrEngine._plan``'s steps): the VAD's spans, the pauses heard
    again alone, cut at their quietest points, without pieces of a pause under a second."""
    from specwhisper.audio.chunking import frame_levels

    levels = frame_levels(audio)
    spans = engine.vad.speech_spans(audio, 30.0)
    spans = join_heard(spans, engine.vad.rehear(audio, spans, 30.0), levels)
    return to_decode(plan_chunks(spans, len(audio), levels=levels))


def _text(engine, audio) -> str:
    from specwhisper.asr.options import DecodeOptions
    from specwhisper.evaluation.transcripts import normalize

    return normalize(" ".join(s.text for s in engine.transcribe(audio, DecodeOptions(language="en")).segments))


@pytest.mark.parametrize("kind, at", [("speakers", 155), ("dense", 161)])
def test_a_quiet_voice_before_speech_the_vad_heard_late_is_a_chunk_of_its_own(base_engine, tmp_path, kind, at):
    """The built conversation and talk (seed 4) at 152-166 s: ABBIE's clip, digital silence, FLEURS en-004
    (-65 dB, unheard by the VAD in the file), digital silence, then the acoustic-corpus clip, whose first
    second (-8 to -20 dB) silero scores under 0.5 in the file. Decoded with that loud start, the quiet
    voice read as other words; its chunk ends before it, and alone it is the FLEURS sentence."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file

    built = build_long_file(kind, tmp_path, 600, seed=4)
    audio = load_audio(built.path)
    corpus = next(c for c in built.clips if c.start > 150 and "acoustic corpus" in c.reference)
    (chunk,) = [c for c in _planned(base_engine, audio) if c.start < at * SR < c.end]
    assert chunk.end <= corpus.start * SR + 0.1 * SR
    assert "feathers" in _text(base_engine, audio[chunk.start : chunk.end])


def _levels(n: int, spans_db: list[tuple[int, int, float]]):
    """``frame_levels`` of ``n`` samples of digital silence with each (start, end, dB) at its level."""
    import numpy as np

    levels = np.full(n // LEVEL_HOP, -120.0)
    for a, b, db in spans_db:
        levels[a // LEVEL_HOP : b // LEVEL_HOP] = db
    return levels


def test_a_span_far_quieter_than_the_one_before_starts_a_chunk():
    spans = [(0, 4 * SR), (4 * SR + SR // 2, 8 * SR), (9 * SR, 12 * SR)]
    levels = _levels(12 * SR, [(0, 4 * SR, -18.0), (4 * SR + SR // 2, 8 * SR, -66.0), (9 * SR, 12 * SR, -60.0)])
    assert len(merge_spans(spans)) == 1
    assert [c.voiced for c in merge_spans(spans, levels=levels)] == [(spans[0],), (spans[1], spans[2])]


def test_speech_heard_alone_joins_the_span_it_reaches_at_its_level():
    """The VAD heard a voice 2.8 s late (the Sintra clip on the built talk, seed 5): the heard start
    joins its span. A quiet voice right before a loud one stays a span of its own."""
    late = [(0, 2 * SR), (6 * SR, 10 * SR)]
    levels = _levels(10 * SR, [(0, 2 * SR, -15.0), (3 * SR, 10 * SR, -60.0)])
    assert join_heard(late, [(3 * SR, 6 * SR)], levels) == [(0, 2 * SR), (3 * SR, 10 * SR)]
    loud_after = _levels(10 * SR, [(0, 2 * SR, -15.0), (3 * SR, 6 * SR, -66.0), (6 * SR, 10 * SR, -15.0)])
    assert join_heard(late, [(3 * SR, 6 * SR)], loud_after) == [(0, 2 * SR), (3 * SR, 6 * SR), (6 * SR, 10 * SR)]


def test_a_quiet_voice_the_file_pass_missed_is_decoded(base_engine, tmp_path):
    """The built conversation (seed 4) at 100-116 s: JFK's end, "IN EIGHTEEN THIRTEEN", the quiet cabbage
    clip the VAD does not hear in the file (``test_vad``), "no". Heard alone and decoded apart from the
    loud clips, it is found; with the file's spans alone Whisper wrote "No." over it."""
    from specwhisper.audio.loading import load_audio
    from specwhisper.evaluation.transcripts import build_long_file

    audio = load_audio(build_long_file("speakers", tmp_path, 600, seed=4).path)[100 * SR : 116 * SR]
    assert "cabbage juice changes color" in _text(base_engine, audio)
