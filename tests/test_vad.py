"""The VAD: silero's network run batched gives silero's own probabilities and spans, on one thread."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from silero_vad import get_speech_timestamps

from specwhisper.audio.loading import load_audio
from specwhisper.audio.chunking import WHISPER_WINDOW_S
from specwhisper.audio.vad import VoiceActivityDetector
from specwhisper.evaluation.transcripts import english_set


@pytest.fixture(scope="module")
def vad():
    return VoiceActivityDetector()


def _silero_loop_probs(vad: VoiceActivityDetector, audio: np.ndarray) -> np.ndarray:
    """silero's own per-window loop, as its get_speech_timestamps runs it."""
    model = vad.model
    model.reset_states()
    x = torch.from_numpy(audio)
    x = torch.nn.functional.pad(x, (0, -len(x) % 512))
    with torch.inference_mode():
        return np.array([model(x[i : i + 512], 16000).item() for i in range(0, len(x), 512)])


def test_probabilities_match_silero_loop(vad, eval_root):
    # the meeting excerpt and a quiet, disfluent clip; 30 s and 11.5 s
    for name in ("pyannote-audio/tests_data/dev00.wav", "mfa/mfa_laughter.flac"):
        audio = load_audio(eval_root / name)
        ours = np.array(vad.speech_probs(audio))
        ref = _silero_loop_probs(vad, audio)
        assert ours.shape == ref.shape
        assert np.abs(ours - ref).max() < 1e-4, name


def test_probabilities_across_blocks(vad, eval_root, monkeypatch):
    """Blocks carry the LSTM state and the 64-sample context: small blocks give the same numbers."""
    import specwhisper.audio.vad

    audio = load_audio(eval_root / "pyannote-audio/tests_data/dev01.wav")
    whole = np.array(vad.speech_probs(audio))
    monkeypatch.setattr(specwhisper.audio.vad, "BLOCK", 7)
    assert np.abs(np.array(vad.speech_probs(audio)) - whole).max() < 1e-5


def test_spans_equal_silero_on_english_set(vad, eval_root):
    pad = vad.speech_pad_ms / 1000
    for item in english_set(eval_root):
        audio = load_audio(item.path)
        ref = get_speech_timestamps(torch.from_numpy(audio), vad.model, threshold=vad.threshold, sampling_rate=16000,
                                    min_silence_duration_ms=vad.min_silence_ms, speech_pad_ms=vad.speech_pad_ms,
                                    max_speech_duration_s=WHISPER_WINDOW_S - 2 * pad - 0.1)
        assert vad.speech_spans(audio) == [(s["start"], s["end"]) for s in ref], item.file


def test_vad_runs_on_one_thread_and_restores(vad, eval_root):
    seen = []
    audio = load_audio(eval_root / "openai-whisper/jfk.flac")
    before = torch.get_num_threads()
    vad.speech_spans(audio, progress=lambda f: seen.append(torch.get_num_threads()))
    assert seen and set(seen) == {1}
    assert torch.get_num_threads() == before


def test_long_files_built_from_the_public_clips(tmp_path, eval_root):
    """The long-form bench's inputs: long enough, the reference is the clips' references in order."""
    import soundfile as sf

    from specwhisper.evaluation.transcripts import build_long_file

    dense = build_long_file("dense", tmp_path, min_seconds=60)
    talk = build_long_file("speakers", tmp_path, min_seconds=60)
    for f in (dense, talk):
        info = sf.info(str(f.path))
        assert info.samplerate == 16000 and info.channels == 1
        assert f.duration >= 60 and len(f.clips) >= 5
        assert len(f.reference.split()) > 100
    again = build_long_file("dense", tmp_path, min_seconds=60)  # cached: the same file and reference
    assert again == dense
    # each clip's place: the reference is theirs in order, the dense talk's pauses between them are silence
    audio, sr = load_audio(dense.path), 16000
    assert " ".join(c.reference for c in dense.clips) == dense.reference
    for a, b in zip(dense.clips, dense.clips[1:]):
        pause = audio[round(a.end * sr) : round(b.start * sr)]
        assert 0.3 * sr - 2 <= len(pause) <= 0.8 * sr and not pause.any()
        assert audio[round(b.start * sr) : round(b.start * sr) + sr // 2].any()  # the quiet clips too (-64 dBFS)
    with pytest.raises(ValueError, match="kind must be one of"):
        build_long_file("music", tmp_path)


def test_misdated_finds_a_segment_away_from_the_clip_that_holds_its_words():
    from specwhisper.evaluation.transcripts import Clip, misdated
    from specwhisper.results.transcript import Segment

    clips = (Clip(0.0, 5.0, "en", "the cabbage juice changes color"), Clip(6.0, 17.0, "en", "and so my fellow americans ask not"))
    right = [Segment(0.2, 4.8, " The cabbage juice changes color."), Segment(6.5, 16.0, " And so my fellow Americans, ask not")]
    early = Segment(0.2, 2.9, " And so my fellow Americans, ask not")
    assert misdated(right, clips) == []
    assert misdated([right[0], early], clips) == [early]
    assert misdated([Segment(0.2, 2.9, " Fellow Americans")], clips) == []  # under three words: no verdict
    assert misdated([Segment(0.2, 4.8, " Something else entirely here.")], clips) == []  # no clip's words


def test_a_pause_heard_alone_holds_the_quiet_voice_the_file_pass_missed(vad, tmp_path):
    """The built conversation (seed 4): the cabbage clip (FLEURS, quiet) at 105.6-111.4 s after loud
    speech. silero, carrying its state through the file, hears none of it; the pause heard alone
    (``rehear``), most of it."""
    from specwhisper.evaluation.transcripts import build_long_file

    built = build_long_file("speakers", tmp_path, 600, seed=4)
    audio = load_audio(built.path)
    clip = next(c for c in built.clips if 100 < c.start < 110 and "cabbage" in c.reference)
    a, b = int(clip.start * 16000), int(clip.end * 16000)

    def inside(spans):
        return sum(max(0, min(e, b) - max(s, a)) for s, e in spans)

    spans = vad.speech_spans(audio, WHISPER_WINDOW_S)
    assert inside(spans) == 0
    heard = vad.rehear(audio, spans, WHISPER_WINDOW_S)
    assert inside(heard) >= 0.7 * (b - a)
    assert not any(s < e2 and s2 < e for s, e in heard for s2, e2 in spans)  # only in the pauses


def test_pieces_heard_apart_in_one_pass_get_their_own_probabilities(vad, eval_root):
    """``speech_probs_apart`` (every piece from silero's reset state, as one batch) against
    ``speech_probs`` of each piece alone."""
    jfk = load_audio(eval_root / "openai-whisper/jfk.flac")
    quiet = load_audio(eval_root / "cuttledoc-fleurs/fleurs-en-004.ogg")
    pieces = [jfk[: 3 * 16000 + 100], quiet, jfk[5 * 16000 :]]
    for apart, alone in zip(vad.speech_probs_apart(pieces), [vad.speech_probs(p) for p in pieces]):
        assert len(apart) == len(alone) and np.abs(np.array(apart) - np.array(alone)).max() < 1e-5


def test_a_stream_in_pieces_gets_silero_loop_probabilities(vad, eval_root):
    """Audio fed in pieces of odd lengths (as a live client's frames) gets each whole window's
    probability as silero's own loop gives it over the whole clip."""
    audio = load_audio(eval_root / "pyannote-audio/tests_data/dev00.wav")
    stream, probs = vad.stream(), []
    rng = np.random.default_rng(0)
    at = 0
    while at < len(audio):
        size = int(rng.integers(1, 6000))
        probs += stream.feed(audio[at : at + size])
        at += size
    ref = _silero_loop_probs(vad, audio)
    assert len(probs) == len(audio) // 512 == stream.windows
    assert np.abs(np.array(probs) - ref[: len(probs)]).max() < 1e-4


def test_turns_start_at_speech_and_stop_after_the_pause(vad, eval_root):
    """Two clips 2 s apart, fed in 0.1 s pieces: two turns, each started at its speech and stopped
    one pause length after it, as OpenAI's server_vad reports them (``specwhisper.live.turns``)."""
    from specwhisper.live.turns import TurnDetector, TurnSettings

    items = [i for i in english_set(eval_root) if i.category == "single" and 4 <= i.duration <= 12 and "jfk" not in i.file]
    a, b = (load_audio(i.path) for i in items[:2])
    gap = np.zeros(32000, np.float32)
    audio = np.concatenate([gap[:8000], a, gap, b, gap])
    turns = TurnDetector(vad, TurnSettings(silence_duration_ms=1200))
    events = [e for i in range(0, len(audio), 1600) for e in turns.feed(audio[i : i + 1600])]
    assert [e.kind for e in events] == ["started", "stopped", "started", "stopped"]
    a_end, b_start, b_end = 8000 + len(a), 8000 + len(a) + len(gap), 8000 + len(a) + len(gap) + len(b)
    assert 8000 <= events[0].sample <= 8000 + 16000  # the first speech, within a second of the clip's start
    assert a_end - 16000 <= events[1].sample - 1.2 * 16000 <= a_end + 1600  # 1.2 s after its last speech window
    assert b_start <= events[2].sample <= b_start + 16000
    assert b_end - 16000 <= events[3].sample - 1.2 * 16000 <= b_end + 1600


def test_turns_do_not_depend_on_the_piece_size(vad, tmp_path):
    """The turns of the 48 s talk of bench/realtime.py (a -67 dB clip after a loud one, heard as a turn
    only because the stream restarts after a turn) are the same fed in 0.1 s pieces or all at once: a
    stop takes back the windows after it that the piece scored, and hears them again alone."""
    from specwhisper.evaluation.transcripts import build_long_file
    from specwhisper.live.turns import TurnDetector, TurnSettings

    audio = load_audio(build_long_file("dense", tmp_path, min_seconds=40).path)
    pieces = TurnDetector(vad, TurnSettings())
    small = [e for i in range(0, len(audio), 1600) for e in pieces.feed(audio[i : i + 1600])]
    assert small == TurnDetector(vad, TurnSettings()).feed(audio)
    starts = [e.sample / 16000 for e in small if e.kind == "started"]
    assert any(33.0 <= s <= 34.0 for s in starts), starts  # the quiet clip, 33.04-37.36 s
