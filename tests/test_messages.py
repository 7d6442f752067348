"""A failure is said in one line at every layer, whatever the library's message looks like."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from specwhisper.audio.loading import AudioError, load_audio
from specwhisper.messages import one_line


def test_one_line_takes_the_first_line_and_bounds_it():
    assert one_line(ValueError("bad header\n  at byte 12\nTraceback ...")) == "bad header"
    assert one_line(RuntimeError("")) == "RuntimeError"
    assert one_line(OSError("\n\n")) == "OSError"
    said = one_line(ValueError("x" * 10_000))
    assert len(said) <= 300 and said.endswith("...")
    assert one_line(OSError("/in/Meeting  notes.wav: not found\n")) == "/in/Meeting  notes.wav: not found"


def test_a_decoder_failing_without_a_message_is_one_line(tmp_path, monkeypatch):
    """libsndfile errors can come without text: that was an IndexError traceback below the servers."""
    path = tmp_path / "talk.wav"
    sf.write(path, np.zeros(16000, dtype=np.float32), 16000)

    def fail(*args, **kwargs):
        raise RuntimeError("")

    monkeypatch.setattr(sf.SoundFile, "read", fail)
    monkeypatch.setenv("PATH", "")  # and no ffmpeg to read what libsndfile could not
    with pytest.raises(AudioError) as err:
        load_audio(path)
    assert str(err.value) == f"{path}: corrupt audio (RuntimeError)"
