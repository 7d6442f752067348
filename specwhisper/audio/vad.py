"""Voice activity detection (silero-vad): speech probabilities and speech spans (specwhisper.audio.chunking cuts at them)."""

from __future__ import annotations

import hashlib
import threading
import warnings
from typing import Callable

import numpy as np
import torch

# Importing silero_vad calls torch.set_num_threads(1) for the whole process; keep the caller's setting.
_threads = torch.get_num_threads()
from silero_vad import load_silero_vad  # noqa: E402
from silero_vad.utils_vad import get_speech_timestamps_from_probs  # noqa: E402

torch.set_num_threads(_threads)
del _threads

from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.audio.chunking import WHISPER_WINDOW_S, Span
from specwhisper.hardware.threads import one_thread

WINDOW = 512  # samples per silero-vad probability at 16 kHz
CONTEXT = 64  # samples of the previous window the model sees before each window
BLOCK = 4096  # windows per batched call (131 s of audio; ~10 MB of input)
# --vad-filter drops what the VAD rejects: faster-whisper's batched pipeline's settings (its
# ``BatchedInferencePipeline.transcribe``: 160 ms of silence ends a span, 400 ms of padding on each
# side, no minimum span). The network is silero-vad 6.2's; faster-whisper 1.2.1 bundles silero 6.0's
# (silero-vad 6.0.0's weights to 3e-6), whose probabilities are up to 0.96 apart from 6.2's on
# bench/longform.py's dense talk (0.10 on average), so on long audio the two cut in other places.
FILTER_SETTINGS = dict(min_silence_ms=160, speech_pad_ms=400, min_speech_ms=0)
REHEAR_S = 1.0  # a pause at least this long is heard again alone (``VoiceActivityDetector.rehear``)


def _no_tf32():
    """cuDNN without TF32: the probabilities are float32's on a GPU too."""
    return torch.backends.cudnn.flags(enabled=torch.backends.cudnn.enabled, benchmark=torch.backends.cudnn.benchmark,
                                      deterministic=torch.backends.cudnn.deterministic, allow_tf32=False)


class VoiceActivityDetector:
    """Finds speech with silero-vad (weights shipped in its PyPI package).

    The speech probabilities are silero's own network, run batched: silero's loop calls the model
    once per 32 ms window from Python (18,750 calls for 10 minutes), which took 2.4-2.8 s per 2
    minutes of audio on one thread of this 2-core CPU (and 87 s per 2 minutes at 2 threads next to
    another job). Its encoder sees each window with the previous window's last 64 samples
    and keeps no state, so all windows go through it in a few large calls; only the small LSTM runs
    in sequence (one ``nn.LSTM`` call per block, with silero's ``LSTMCell`` weights). Measured: 0.31 s
    per 2 minutes, probabilities within 4e-6 of silero's loop (tests/test_vad.py). The spans come from
    silero's own ``get_speech_timestamps_from_probs``. Runs on one thread (``specwhisper.hardware.threads``).

    ``device``: where the network runs. On a GPU the blocks' convolutions and the LSTM take a few
    launches each, where the H100 machine's CPU spent 0.67-1.1 s per 10 minutes of audio, a fifth of
    our long-form time there; cuDNN's TF32 is kept off, so the probabilities are float32's."""

    def __init__(self, threshold: float = 0.5, min_silence_ms: int = 300, speech_pad_ms: int = 200, min_speech_ms: int = 250,
                 device: torch.device | str = "cpu"):
        if not 0.0 < threshold < 1.0:
            raise ValueError(f"VAD threshold must be between 0 and 1, got {threshold}")
        self.device = torch.device(device)
        with warnings.catch_warnings():  # silero's loader calls torch.jit.load, which torch 2.11 calls deprecated at every start
            warnings.filterwarnings("ignore", message=r".*torch\.jit\.load", category=FutureWarning)
            self.model = load_silero_vad(onnx=False)
        self.threshold = threshold
        self.min_silence_ms = min_silence_ms
        self.speech_pad_ms = speech_pad_ms
        self.min_speech_ms = min_speech_ms
        net = self.model._model  # the 16 kHz network: feature extractor, encoder, decoder (LSTM cell + head)
        cell = net.decoder.rnn
        self._lstm = torch.nn.LSTM(cell.weight_ih.shape[1], cell.weight_hh.shape[1])
        with torch.no_grad():
            for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
                getattr(self._lstm, f"{name}_l0").copy_(getattr(cell, name))
        self._net = net.to(self.device)
        self._lstm.to(self.device)
        # the last audio's probabilities, by its samples' digest: faster-whisper's transcribe with vad_filter
        # plans a file twice (duration_after_vad before the first segment, then the decoding), 0.6 s of
        # VAD each on 10 minutes of talk, where the digest costs 0.02 s
        self._last: tuple[bytes, torch.Tensor] | None = None
        self._last_lock = threading.Lock()

    @torch.inference_mode()
    def speech_probs(self, audio: np.ndarray, progress: Callable[[float], None] | None = None) -> list[float]:
        """Silero's speech probability of each 512-sample window (the last one zero-padded)."""
        samples = np.ascontiguousarray(audio, dtype=np.float32)
        digest = hashlib.sha1(memoryview(samples).cast("B")).digest() + len(samples).to_bytes(8, "little")
        with self._last_lock:
            last = self._last
        if last is not None and last[0] == digest:
            if progress:
                progress(1.0)
            return last[1].tolist()
        x = torch.from_numpy(samples)  # no copy of the audio
        n = -(-len(x) // WINDOW)
        out, state = [], None
        with one_thread(), _no_tf32():
            for i in range(0, n, BLOCK):
                start = i * WINDOW
                piece = x[start : start + BLOCK * WINDOW].to(self.device)
                if len(piece) % WINDOW:  # the last window, zero-padded (only this block is copied)
                    piece = torch.nn.functional.pad(piece, (0, WINDOW - len(piece) % WINDOW))
                w = piece.view(-1, WINDOW)
                before = x[start - CONTEXT : start][None].to(self.device) if i else w.new_zeros(1, CONTEXT)
                probs, state = self._windows(w, before, state)
                out.append(probs)
                if progress:
                    progress(min(1.0, (i + len(w)) / n))
        probs = torch.cat(out).cpu() if out else torch.zeros(0)
        with self._last_lock:
            self._last = (digest, probs)
        return probs.tolist()

    def _windows(self, w: torch.Tensor, before: torch.Tensor, state):
        """The probabilities of consecutive windows ``w`` [n, WINDOW] whose stream held ``before`` [1, CONTEXT]
        just ahead of them, from the LSTM ``state`` the windows before left (None at the start); and the
        state they leave."""
        ctx = torch.cat([before, w[:-1, -CONTEXT:]])
        feats = self._net.encoder(self._net.run_extractors(torch.cat([ctx, w], 1)))  # (n, 128, 1)
        h, state = self._lstm(feats.squeeze(-1).unsqueeze(1), state)  # the windows as a sequence
        return self._net.decoder.decoder(h.squeeze(1).unsqueeze(-1)).squeeze(1).mean(1), state

    def stream(self) -> SpeechProbStream:
        """Probabilities of a stream that arrives in pieces (:class:`SpeechProbStream`)."""
        return SpeechProbStream(self)

    @torch.inference_mode()
    def speech_probs_apart(self, pieces: list[np.ndarray]) -> list[list[float]]:
        """``speech_probs`` of each piece heard from its own start (silero's state reset), in one pass:
        the windows of every piece through the encoder together, the LSTM over the pieces as one batch
        (one call each, where a call per piece cost a launch of each layer per pause on a GPU)."""
        if not pieces:
            return []
        rows, counts = [], []
        for piece in pieces:
            x = torch.from_numpy(np.ascontiguousarray(piece, dtype=np.float32))
            w = torch.nn.functional.pad(x, (0, -len(x) % WINDOW)).view(-1, WINDOW)
            rows.append(torch.cat([torch.cat([w.new_zeros(1, CONTEXT), w[:-1, -CONTEXT:]]), w], 1))  # context, window
            counts.append(len(w))
        frames = torch.cat(rows)
        with one_thread(), _no_tf32():
            feats = torch.cat([self._net.encoder(self._net.run_extractors(frames[i : i + BLOCK].to(self.device))).squeeze(-1)
                               for i in range(0, len(frames), BLOCK)])
            h, _ = self._lstm(torch.nn.utils.rnn.pad_sequence(list(feats.split(counts))))  # (windows, pieces, hidden)
            probs = self._net.decoder.decoder(h.reshape(-1, h.shape[-1]).unsqueeze(-1)).squeeze(1).mean(1).view(h.shape[:2])
        return [probs[:n, k].tolist() for k, n in enumerate(counts)]

    def _spans_of(self, probs: list[float], samples: int, max_span_s: float, threshold: float | None = None,
                  min_silence_ms: int | None = None, speech_pad_ms: int | None = None,
                  min_speech_ms: int | None = None) -> list[tuple[int, int]]:
        """silero's spans of ``samples`` samples from their window probabilities (settings: ``speech_spans``)."""
        pad_ms = self.speech_pad_ms if speech_pad_ms is None else speech_pad_ms
        spans = get_speech_timestamps_from_probs(
            probs,
            sampling_rate=SAMPLE_RATE,
            threshold=self.threshold if threshold is None else threshold,
            min_speech_duration_ms=self.min_speech_ms if min_speech_ms is None else min_speech_ms,
            min_silence_duration_ms=self.min_silence_ms if min_silence_ms is None else min_silence_ms,
            speech_pad_ms=pad_ms,
            max_speech_duration_s=max_span_s,  # silero keeps the pads and a window inside it: spans <= max_span_s
            audio_length_samples=samples,
        )
        return [(int(s["start"]), int(s["end"])) for s in spans]

    def speech_spans(
        self,
        audio: np.ndarray,
        max_span_s: float = WHISPER_WINDOW_S,
        progress: Callable[[float], None] | None = None,
        threshold: float | None = None,
        min_silence_ms: int | None = None,
        speech_pad_ms: int | None = None,
        min_speech_ms: int | None = None,
    ) -> list[tuple[int, int]]:
        """Speech regions as (start, end) sample indices; none longer than ``max_span_s``.
        ``threshold`` and the other settings (default: the detector's) are silero's.

        silero splits an over-long region at its longest inner pause (or, lacking
        one, at the limit), so every span fits one Whisper window.
        """
        return self._spans_of(self.speech_probs(audio, progress), len(audio), max_span_s, threshold, min_silence_ms,
                              speech_pad_ms, min_speech_ms)

    def rehear(self, audio: np.ndarray, spans: list[Span], max_span_s: float = WHISPER_WINDOW_S,
               threshold: float | None = None, min_silence_ms: int | None = None,
               speech_pad_ms: int | None = None) -> list[Span]:
        """The speech silero hears in the pauses between ``spans`` (``speech_spans`` of ``audio``) when it
        hears each pause of ``REHEAR_S`` or more alone. It carries its state through a file, and after
        loud speech it scores a quiet voice as silence that, heard from the pause's start, it scores as
        speech. Measured on the twelve files of bench/pause_cuts.py (base): the clips that lost the most
        words in the file against alone were such voices, and silero heard each when it heard the pause
        alone (FLEURS en-004 at -67 dB: no window over 0.5 in the file, 18-85% alone). The level is not the
        cause: the clip alone, at -67 dB or 40 dB louder, is 91% speech to it."""
        if not spans:
            return []  # the whole file was heard from its start
        bounds = [0, *(x for s in spans for x in s), len(audio)]
        pauses = [(a, b) for a, b in zip(bounds[::2], bounds[1::2]) if b - a >= REHEAR_S * SAMPLE_RATE]
        probs = self.speech_probs_apart([audio[a:b] for a, b in pauses])
        return [(a + s, a + e) for (a, b), p in zip(pauses, probs)
                for s, e in self._spans_of(p, b - a, max_span_s, threshold, min_silence_ms, speech_pad_ms)]


class SpeechProbStream:
    """Silero's speech probability of each 512-sample window of audio that arrives in pieces of any
    length: the windows' probabilities are those ``speech_probs`` gives the whole stream at once (the
    LSTM state and the last window's tail carried from piece to piece; a window waits until it is
    whole). For turn detection on live audio (``specwhisper.live.turns``)."""

    def __init__(self, vad: VoiceActivityDetector):
        self.vad = vad
        self.windows = 0  # windows scored so far: the next one starts at sample windows * WINDOW
        self._rest = np.zeros(0, np.float32)  # samples short of a whole window
        self._before = np.zeros(CONTEXT, np.float32)  # the last window's tail (zeros at the start, as speech_probs)
        self._state = None
        self._last = np.zeros(0, np.float32)  # the whole windows the last call scored

    def restart(self, after: int) -> None:
        """Hear the stream from window ``after + 1`` on alone, as from a stream's start (silero's state
        reset): the windows after it that the last call scored are taken back, and the next call scores
        them again first."""
        keep = (after + 1 - (self.windows - len(self._last) // WINDOW)) * WINDOW
        if not 0 <= keep <= len(self._last):
            raise ValueError(f"window {after} is not one the last call scored")
        self._rest = np.concatenate([self._last[keep:], self._rest])
        self.windows -= (len(self._last) - keep) // WINDOW
        self._last = self._last[:keep]
        self._before[:] = 0.0
        self._state = None

    @torch.inference_mode()
    def feed(self, audio: np.ndarray) -> list[float]:
        """The probabilities of the windows ``audio`` completes, in order."""
        x = np.concatenate([self._rest, np.asarray(audio, dtype=np.float32)])
        n = len(x) // WINDOW
        self._rest, self._last = x[n * WINDOW :], x[: n * WINDOW]
        if not n:
            return []
        device = self.vad.device
        w = torch.from_numpy(self._last).view(n, WINDOW).to(device)
        with one_thread(), _no_tf32():
            probs, self._state = self.vad._windows(w, torch.from_numpy(self._before)[None].to(device), self._state)
        self._before = x[n * WINDOW - CONTEXT : n * WINDOW].copy()
        self.windows += n
        return probs.tolist()
