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
import torch

HOP = 160  # samples per mel frame
FLOOR = 2.0  # Whisper's log-mel keeps 8 log10 units below the loudest frame, scaled by 1/4
SILENCE = -1.5  # a frame of digital silence: log10 of the 1e-10 clamp, scaled as (x + 4) / 4


class LogMel:
    """Log-mel windows where the model runs: the operations of transformers' ``WhisperFeatureExtractor``
    (its torch path, one batched STFT), bitwise, without its trip through the host. Given a list of
    pieces it pads them with numpy on the host, copies all 30 s of each window to the device, and
    copies the spectrogram back to the host as numpy, which the engine then copies to the device
    again: on the H200 machine the log-mel took 0.78 s of a 62-minute file's 3.3 s that way, more than
    the encoder's 0.17 s (``bench/results/gpu_longform_h200.json``, ``features_s``). Here only each piece's
    own samples travel, into a window of zeros made on the device, and the result stays there: on an
    H200, 32 windows in 0.41 ms a window against 1.98 ms, bitwise the same
    (``bench/results/gpu_features_h200.json``). On a CPU both take the same time (the STFT is most of
    it; ``bench/features.py``)."""

    def __init__(self, feature_extractor, device: str | torch.device = "cpu"):
        fe = feature_extractor
        self.n_fft, self.hop, self.frames, self.samples = fe.n_fft, fe.hop_length, fe.nb_max_frames, fe.n_samples
        self.mels, self.dither = fe.feature_size, fe.dither
        self.device = torch.device(device)
        self.window = torch.hann_window(self.n_fft, device=self.device)
        # [freqs, mels]: transformers multiplies by its transposed view, and so do we (the same product)
        self.filters = torch.from_numpy(np.asarray(fe.mel_filters)).to(self.device, torch.float32)

    def __call__(self, pieces: Sequence[np.ndarray], zero_pad: Sequence[bool]) -> torch.Tensor:
        """[len(pieces), mels, frames] float32 on the device: each piece's window, padded by the
        convention ``zero_pad`` names for it (see the module docstring). A zero-padded piece is cut to
        the window and transformed as faster-whisper does it: the piece and one hop of zeros, the
        spectrogram's last frame dropped (it would straddle the piece's end)."""
        out = torch.empty(len(pieces), self.mels, self.frames, device=self.device)
        openai = [i for i, z in enumerate(zero_pad) if not z]
        if openai:
            out[openai] = self.log_mel(self._waves([pieces[i] for i in openai], self.samples))
        for i in (i for i, z in enumerate(zero_pad) if z):
            piece = np.asarray(pieces[i], np.float32)[: self.frames * self.hop]
            # one hop of zeros; a piece shorter than the FFT (a few ms) is zero-padded to it for the STFT
            mel = self.log_mel(self._waves([piece], len(piece) + max(self.hop, self.n_fft - len(piece))))[0, :, :-1]
            mel = mel[:, : self.frames]
            out[i, :, : mel.shape[1]] = mel
            out[i, :, mel.shape[1] :] = padding_value(mel)
        return out

    def _waves(self, pieces: Sequence[np.ndarray], length: int) -> torch.Tensor:
        """[len(pieces), length]: each piece (cut to ``length``) followed by zeros, on the device."""
        waves = torch.zeros(len(pieces), length, device=self.device)
        for row, piece in zip(waves, pieces):
            piece = np.asarray(piece, np.float32)[:length]
            row[: len(piece)] = torch.from_numpy(piece).to(self.device)
        return waves

    def log_mel(self, waves: torch.Tensor) -> torch.Tensor:
        """transformers' ``_torch_extract_fbank_features`` of a batch, on the device."""
        if self.dither != 0.0:
            waves = waves + self.dither * torch.randn(waves.shape, dtype=waves.dtype, device=waves.device)
        stft = torch.stft(waves, self.n_fft, self.hop, window=self.window, return_complex=True)
        magnitudes = (stft[..., :-1].abs() ** 2).contiguous()
        log_spec = torch.clamp(self.filters.T @ magnitudes, min=1e-10).log10()
        top = log_spec.max(dim=2, keepdim=True)[0].max(dim=1, keepdim=True)[0]
        return (torch.maximum(log_spec, top - 8.0) + 4.0) / 4.0


def padding_value(mel: torch.Tensor) -> torch.Tensor:
    """Zero, unless zero would be louder than the piece's loudest frame: then what openai's padding of
    the audio with silence gives (the spectrogram's floor, 80 dB below that frame, or silence itself).
    A -60 dB recording's loudest frame scores below zero (the public clips: 0.26 to 1.50 at their own
    level, -0.01 to -1.50 at -60 dB); padded with zeros, the padding was the loudest sound of the
    window and Whisper wrote nothing for a -60 dB sentence (``tests/test_no_lost_speech.py``). A 0-d
    tensor on ``mel``'s device: the host does not wait for the device to learn it."""
    top = mel.max() if mel.numel() else mel.new_zeros(())
    return torch.where(top > 0.0, torch.zeros_like(top), torch.clamp(top - FLOOR, min=SILENCE))
