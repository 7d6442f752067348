"""Whisper's input: log-mel windows of audio pieces, each padded to the 30 s window, by one of two conventions.

* openai-whisper's and transformers' (``zero_pad=False``): the audio is padded with silence to 30 s,
  so the frames after a piece sit at the spectrogram's floor (80 dB under the window's loudest frame).
* faster-whisper's and WhisperX's (``zero_pad=True``): each piece gets its own spectrogram and the
  frames past its end are zeros (``padding_value`` keeps a very quiet piece on the floor instead).

The engine (``specwhisper.asr.engine``) chooses by what a chunk is: a file that fits one window is
zero-padded, like faster-whisper's input for it; a chunk of a longer file and a re-decoded stretch
keep openai's padding. Zero padding everywhere was measured on the 10-minute files of
``bench/longform.py`` and lost there (dense WER 0.141 -> 0.148, speakers 0.125 -> 0.140, the dense
file's sampled fallback passes 62 -> 913), and zero padding of VAD-speech chunks only lost too (dense
0.141 -> 0.152); on the short public clips zero padding gave faster-whisper's text (es 0.138 -> 0.103,
its own). ``bench/results/accuracy.json`` holds the per-language figures of the choice made here.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE

HOP = 160  # samples per mel frame
FLOOR = 2.0  # Whisper's log-mel keeps 8 log10 units below the loudest frame, scaled by 1/4
SILENCE = -1.5  # a frame of digital silence: log10 of the 1e-10 clamp, scaled as (x + 4) / 4


def log_mel_windows(feature_extractor, pieces: Sequence[np.ndarray], zero_pad: Sequence[bool],
                    device: str = "cpu") -> np.ndarray:
    """[len(pieces), mels, frames] float32: each piece's window, padded by the convention ``zero_pad``
    names for it (see the module docstring). A zero-padded piece is cut to the window and transformed
    as faster-whisper does it: the piece and one hop of zeros, the spectrogram's last frame dropped
    (it would straddle the piece's end). ``device``: where transformers computes the STFT (a GPU's
    "cuda": on the H100 machine the host's took 0.33 s of a 10-minute file's 3.6 s at batch 32)."""
    fe = feature_extractor
    frames = fe.nb_max_frames
    out = np.empty((len(pieces), fe.feature_size, frames), np.float32)
    openai = [i for i, z in enumerate(zero_pad) if not z]
    if openai:
        out[openai] = fe([pieces[i] for i in openai], sampling_rate=SAMPLE_RATE, return_tensors="np", device=device).input_features
    for i in (i for i, z in enumerate(zero_pad) if z):
        piece = np.asarray(pieces[i], np.float32)[: frames * HOP]
        # one hop of zeros; a piece shorter than the FFT (a few ms) is zero-padded to it for the STFT
        padded = np.pad(piece, (0, max(HOP, fe.n_fft - len(piece))))
        mel = fe(padded, sampling_rate=SAMPLE_RATE, padding=False, return_tensors="np", device=device).input_features[0][:, :-1]
        mel = mel[:, :frames]
        out[i, :, : mel.shape[1]] = mel
        out[i, :, mel.shape[1] :] = padding_value(mel)
    return out


def padding_value(mel: np.ndarray) -> float:
    """Zero, unless zero would be louder than the piece's loudest frame: then what openai's padding of
    the audio with silence gives (the spectrogram's floor, 80 dB below that frame, or silence itself).
    A -60 dB recording's loudest frame scores below zero (the public clips: 0.26 to 1.50 at their own
    level, -0.01 to -1.50 at -60 dB); padded with zeros, the padding was the loudest sound of the
    window and Whisper wrote nothing for a -60 dB sentence (``tests/test_no_lost_speech.py``)."""
    top = float(mel.max()) if mel.size else 0.0
    return 0.0 if top > 0.0 else max(top - FLOOR, SILENCE)
