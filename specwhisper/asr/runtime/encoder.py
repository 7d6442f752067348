"""The Whisper encoder's forward over packed matrix products.

``specwhisper.asr.weights.net.AudioEncoder`` repeats transformers' encoder operation for operation (bitwise the
same output, ``tests/test_net.py``); its products go through ``F.linear``, which on a CPU is torch's
bundled MKL. On this project's AMD EPYC machine (AVX-512) MKL runs its AVX2 code: base's encoder
products took 565 ms of a 30 s window on one thread, 100 GFLOP/s, and the whole window 0.89 CPU
s, while faster-whisper's CTranslate2 encoder took 0.69-0.76 s wall at 2 threads against our
0.93-0.95 s (measured side by side, loaded). oneDNN's inner product on a packed weight
(``specwhisper.hardware.kernels.Linear``, packed for the encoder's 1500 rows) uses AVX-512: the
same products take 255 ms (222 GFLOP/s) and the window 0.61 CPU s, -31%. The rest is attention
(``scaled_dot_product_attention``, 51 ms a layer; the same attention as two oneDNN products per
head and a softmax took 57 ms) and the element-wise operations.

The numbers are not transformers' bitwise (another summation order: the output differs by up to
2e-3), so the transcripts of the two runtimes may differ at a near-tie, as faster-whisper's and
openai-whisper's do; every decoder of this project (plain, speculative, beam, sampling) reads the
one encoder output, so speculation stays token-identical to the target alone. Where the weights
cannot be packed (a GPU, float16) the products are ``F.linear`` over the same weights, and the
output is then transformers' bitwise again (the query, key and value in one product change no
number: checked in ``tests/test_encoder.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from specwhisper.asr.weights.net import AudioEncoder
from specwhisper.hardware.kernels import Int8Linear, Linear, float_sources, product_of
from specwhisper.hardware.memory import release_file_pages

ENCODER_ROWS = 1500  # the rows a 30 s window gives every product: the packed layout is tuned for them


def audio_frames(features: torch.Tensor, margin_frames: int = 100) -> int:
    """The mel frames of ``features`` [B, mels, frames] that hold audio, plus a margin, in steps of 1 s
    (100 frames). Padding frames are those at the spectrogram's floor in every mel bin (the feature
    extractor pads with zeros; log-mel clamps them to the floor); rows of a batch keep the longest row."""
    floor = features.amin(dim=(1, 2), keepdim=True)
    audio = (features > floor).any(1)  # [B, frames]
    last = int(audio.nonzero()[:, 1].max()) + 1 if audio.any() else 1
    return min(features.shape[-1], -(-(last + margin_frames) // 100) * 100)


@dataclass
class EncoderLayerProducts:
    """One encoder layer's products: the query, key and value in one, the attention output, the MLP
    (``kernels.product_of``: int8 where a module is an ``Int8Module``; a ``MODEL:int8`` target
    quantizes its decoder only, so its encoder runs these packed float32 products too)."""

    qkv: Linear | Int8Linear
    out: Linear | Int8Linear
    fc1: Linear | Int8Linear
    fc2: Linear | Int8Linear

    @staticmethod
    def modules(layer: torch.nn.Module) -> list[torch.nn.Module]:
        att = layer.self_attn
        return [att.q_proj, att.k_proj, att.v_proj, att.out_proj, layer.fc1, layer.fc2]

    @classmethod
    def of(cls, layer: torch.nn.Module) -> EncoderLayerProducts:
        lin = cls.modules(layer)
        return cls(product_of(*lin[:3], rows=ENCODER_ROWS), *(product_of(m, rows=ENCODER_ROWS) for m in lin[3:]))


class EncoderRuntime:
    """``features`` [B, mels, frames] -> encoder output [B, frames / 2, d]: on a CPU one window at a
    time, on a GPU the batch in one call.

    Why not one call for the batch on a CPU: on this 2-core CPU a window costs the same alone (0.69-0.80
    s per window for 1, 2, 4 or 8 rows at 2 threads), while 8 rows at once raised peak memory by about
    250 MB (activations of 8 windows); and alone, a window's output cannot depend on its batch-mates.
    On a GPU a window of a small model is bound by launching its kernels (a dozen per layer), which one
    call for the batch launches once (bench/gpu_longform.py times both: ``encoder_ms_per_window``). No
    operation mixes rows, so a window's output depends on its batch's size (the kernels' shapes), not
    on its batch-mates, as the decoder's fixed-shape passes do on a GPU."""

    def __init__(self, encoder: AudioEncoder):
        self.encoder = encoder
        self.whole_batch = encoder.conv1.weight.device.type == "cuda"
        self.layers = [EncoderLayerProducts.of(layer) for layer in encoder.layers]
        att = encoder.layers[0].self_attn
        self.n_head, self.head_dim, self.scaling = att.num_heads, att.head_dim, att.scaling
        if self.layers[0].fc1.packed:  # the packed copies serve from now on: the file pages go back
            release_file_pages(float_sources([m for layer in encoder.layers for m in EncoderLayerProducts.modules(layer)]))

    @torch.inference_mode()
    def __call__(self, features: torch.Tensor) -> torch.Tensor:
        if self.whole_batch:
            return self._window(features)
        return torch.cat([self._window(features[i : i + 1]) for i in range(features.shape[0])])

    def encode(self, features: torch.Tensor) -> torch.Tensor:
        """The encoder output of each row of ``features``. What the forward still reads from the file
        (the convolutions, positions and norms: a few MB; every weight where nothing is packed) is not
        read again until the next batch, while the decode's cache is at its largest: those pages go back
        meanwhile (``specwhisper.hardware.memory``; read again from the page cache by the next batch's
        first window). The packed products' sources went back once, when they were packed."""
        out = self(features)
        release_file_pages(list(self.encoder.parameters()))
        return out

    def encode_audio_part(self, features: torch.Tensor, margin_frames: int = 100) -> torch.Tensor:
        """The encoder over the mel frames that hold audio (``audio_frames``), not the whole 30 s
        window: an approximation (Whisper was trained on full windows), for drafters, whose output the
        verify pass never trusts, and the live engine's cheaper mode. Why: a drafter with its own
        encoder (tiny.en for base) spent 0.37 s per file encoding mostly padding."""
        frames = audio_frames(features, margin_frames)
        return self.encode(features) if frames >= features.shape[-1] else self(features[..., :frames])

    def _window(self, features: torch.Tensor) -> torch.Tensor:
        enc = self.encoder
        x = F.gelu(enc.conv2(F.gelu(enc.conv1(features)))).permute(0, 2, 1)
        x = x + enc.embed_positions.weight[: x.shape[1]]
        for layer, products in zip(enc.layers, self.layers):
            x = x + self._attention(products, layer.self_attn_layer_norm(x))
            x = x + products.fc2(F.gelu(products.fc1(layer.final_layer_norm(x))))
        return enc.layer_norm(x)

    def _attention(self, products: EncoderLayerProducts, x: torch.Tensor) -> torch.Tensor:
        b, n, d = x.shape
        qkv = products.qkv(x)
        # transformers' order: the query scaled after its product (a view of the rest, no copies)
        q = (qkv[..., :d] * self.scaling).view(b, n, self.n_head, self.head_dim).transpose(1, 2)
        k, v = (qkv[..., i * d : (i + 1) * d].view(b, n, self.n_head, self.head_dim).transpose(1, 2) for i in (1, 2))
        out = F.scaled_dot_product_attention(q, k, v, scale=1.0)
        return products.out(out.transpose(1, 2).reshape(b, n, d))
