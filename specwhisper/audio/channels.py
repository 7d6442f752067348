"""Recordings with one speaker per channel (a phone call, an interview on two microphones): each channel's
own speech, with the other speakers' bleed taken out, for ``multichannel`` transcription.

Each party's microphone also picks up the others, quietly (crosstalk, a phone line's echo), and Whisper
normalises its input's level: it writes that bleed as words even 30 dB down. Calls built from the eval
clips, the parties taking turns, each voice leaking into the other channel (bench/multichannel.py, base):
with the bleed kept both parties' words came out in both channels (WER 0.96, 0.98, 1.0 at -30, -20 and
-12 dB), with it muted each channel holds its own party's words (0.0 at all three). Where another channel is ``BLEED_DB`` louder than this one, this
one carries bleed there and is muted; where both speak (overlapping talk) each is loudest in its own
channel and both are kept. ``HOLD_S`` around this channel's own speech stays untouched (word onsets and
ends are quiet), and the mute fades in and out over ``FADE_S``.
"""

from __future__ import annotations

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE

BLEED_DB = 10.0  # another channel this much louder: this one holds its bleed
FRAME_S = 0.02  # level frames
HOLD_S = 0.2  # own speech within this much of a frame keeps it
FADE_S = 0.01


def without_bleed(channels: np.ndarray) -> np.ndarray:
    """``channels`` (channels x samples) with each channel muted where another is ``BLEED_DB`` louder."""
    channels = np.asarray(channels, dtype=np.float32)
    if channels.ndim != 2 or len(channels) < 2:
        return channels
    hop = int(FRAME_S * SAMPLE_RATE)
    n = channels.shape[1] // hop
    if n == 0:
        return channels
    frames = channels[:, : n * hop].reshape(len(channels), n, hop)
    level = 10.0 * np.log10(np.mean(frames.astype(np.float64) ** 2, axis=2) + 1e-12)  # dB per frame
    hold = np.ones(2 * int(HOLD_S / FRAME_S) + 1)
    k = int(FADE_S * SAMPLE_RATE)
    fade = np.ones(k) / k
    out = channels.copy()
    for i in range(len(channels)):
        loudest_other = np.max(np.delete(level, i, axis=0), axis=0)
        own = np.convolve((loudest_other - level[i] <= BLEED_DB).astype(float), hold, "same") > 0
        gain = np.ones(channels.shape[1], dtype=np.float32)
        gain[: n * hop] = np.repeat(own.astype(np.float32), hop)
        out[i] *= np.convolve(np.pad(gain, (k // 2, k - k // 2 - 1), mode="edge"), fade, "valid").astype(np.float32)
    return out
