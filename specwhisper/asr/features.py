"""Whisper's input: log-mel windows of audio pieces, each padded to the 30 s window.

Each piece gets its own spectrogram (its loudest frame sets the 80 dB floor) and the frames past its
end are zeros, as faster-whisper and WhisperX feed Whisper (``padding_value`` keeps a very quiet piece
on the floor instead). openai-whisper and transformers pad the audio with silence, so their padding
frames sit at the floor. Measured on the public eval set (``bench/accuracy.py``, base, greedy, the
same decoder, 2026-11-26): corpus WER en 0.1026 -> 0.1000, en-long 0.1619 -> 0.1565, es 0.1379 ->
0.1034 (faster-whisper's own; "enfaticamente" became "enfáticamente"), de, fr and pt unchanged. On
espeak-ng sentences (10 clips of 7-12 s a language) zero padding split: de 0.404 -> 0.361, es 0.251
-> 0.272, and on the same features our decoder wrote faster-whisper's text for every clip.
"""

from __future__ import annotations

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE

HOP = 160  # samples per mel frame
FLOOR = 2.0  # Whisper's log-mel keeps 8 log10 units below the loudest frame, scaled by 1/4
SILENCE = -1.5  # a frame of digital silence: log10 of the 1e-10 clamp, scaled as (x + 4) / 4


def log_mel_windows(feature_extractor, pieces: list[np.ndarray], pad_audio: bool = False) -> np.ndarray:
    """[len(pieces), mels, frames] float32: each piece's log-mel, cut to the window, padded after it
    with ``padding_value``, as faster-whisper computes it: the piece and one hop of zeros, the
    spectrogram's last frame dropped (it would straddle the piece's end).

    ``pad_audio``: openai's input instead (the audio padded with silence to the window). The live
    engine keeps it: its buffer-only encoder reads the frames after the audio as a margin, and on the
    live bench (``bench/streaming.py``, 64 s in 0.5 s pieces, back to back on one machine) zero-padded
    margins took WER 0.089 -> 0.123 and p50 latency 1.77 -> 2.07 s, and plain re-decodes fell behind
    real time (their decodes ran longer: 45.5 -> 59.5 s)."""
    fe = feature_extractor
    if pad_audio:
        return fe(pieces, sampling_rate=SAMPLE_RATE, return_tensors="np").input_features.astype(np.float32)
    frames = fe.nb_max_frames
    out = np.empty((len(pieces), fe.feature_size, frames), np.float32)
    for i, piece in enumerate(pieces):
        piece = np.asarray(piece, np.float32)[: frames * HOP]
        # one hop of zeros; a piece shorter than the FFT (a few ms) is zero-padded to it for the STFT
        padded = np.pad(piece, (0, max(HOP, fe.n_fft - len(piece))))
        mel = fe(padded, sampling_rate=SAMPLE_RATE, padding=False, return_tensors="np").input_features[0][:, :-1]
        mel = mel[:, :frames]
        out[i, :, : mel.shape[1]] = mel
        out[i, :, mel.shape[1] :] = padding_value(mel)
    return out


def padding_value(mel: np.ndarray) -> float:
    """Zero, unless zero would be louder than the piece's loudest frame: then what openai's padding of
    the audio with silence gives (the spectrogram's floor, 80 dB below that frame, or silence itself). A -60 dB recording's
    loudest frame scores below zero (the public clips: 0.26 to 1.50 at their own level, -0.01 to -1.50
    at -60 dB); padded with zeros, the padding was the loudest sound of the window and Whisper wrote
    nothing for a -60 dB sentence (``tests/test_no_lost_speech.py``)."""
    top = float(mel.max()) if mel.size else 0.0
    return 0.0 if top > 0.0 else max(top - FLOOR, SILENCE)
