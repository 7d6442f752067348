"""Word timestamps from cross-attention: openai/whisper's ``timing.py`` method on our runtime.

After a chunk is decoded, its text tokens are run once more, teacher-forced, with the
``<|notimestamps|>`` prompt; the cross-attention logits of the model's alignment heads
(from the generation config) are normalised, median-filtered and averaged into a
token x frame matrix, and dynamic time warping finds the monotonic token->time path.
Word boundaries come from the tokenizer's word split. One batched forward pass per
batch of chunks: cheap next to autoregressive decoding.
"""

from __future__ import annotations

import functools
import string
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from specwhisper.asr.decoding.tokens import SpecialTokens
from specwhisper.asr.runtime.decoder import WhisperDecoderRuntime
from specwhisper.hardware.device import on_device
from specwhisper.results.words import APPEND_PUNCTUATIONS, PREPEND_PUNCTUATIONS, SENTENCE_END
from specwhisper.results.transcript import Segment, Word

FRAME_S = 0.02  # seconds per encoder frame
MEDFILT_WIDTH = 7
NO_SPACE_LANGUAGES = {"zh", "ja", "th", "lo", "my", "yue"}


@functools.cache
def _compiled_dtw():
    """``_dtw`` compiled by numba, on first use: importing numba (and llvmlite) costs about 50 MB of
    resident memory and 0.3 s, which a transcript without word timestamps should not pay."""
    import numba

    return numba.njit(cache=True)(_dtw)


def _dtw(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Minimum-cost monotonic path through cost matrix ``x`` [tokens, frames] (openai's dtw_cpu)."""
    n, m = x.shape
    cost = np.full((n + 1, m + 1), np.inf, dtype=np.float32)
    trace = -np.ones((n + 1, m + 1), dtype=np.float32)
    cost[0, 0] = 0.0
    for j in range(1, m + 1):
        for i in range(1, n + 1):
            c0 = cost[i - 1, j - 1]
            c1 = cost[i - 1, j]
            c2 = cost[i, j - 1]
            if c0 < c1 and c0 < c2:
                c, t = c0, 0
            elif c1 < c0 and c1 < c2:
                c, t = c1, 1
            else:
                c, t = c2, 2
            cost[i, j] = x[i - 1, j - 1] + c
            trace[i, j] = t
    trace[0, :] = 2
    trace[:, 0] = 1
    i, j = n, m
    text_idx = np.empty(n + m, dtype=np.int64)
    time_idx = np.empty(n + m, dtype=np.int64)
    k = 0
    while i > 0 or j > 0:
        text_idx[k] = i - 1
        time_idx[k] = j - 1
        k += 1
        t = trace[i, j]
        if t == 0:
            i -= 1
            j -= 1
        elif t == 1:
            i -= 1
        else:
            j -= 1
    return text_idx[:k][::-1].copy(), time_idx[:k][::-1].copy()


@dataclass
class WordTokens:
    """A word's text and tokens (dated by all of them); ``core``: the slice of its tokens its probability is the
    mean over (None: all of them), without the punctuation marks joined to it."""

    text: str
    tokens: list[int]
    core: tuple[int, int] | None = None

    @property
    def span(self) -> tuple[int, int]:
        return self.core if self.core is not None else (0, len(self.tokens))


def split_words(tokens: list[int], tokenizer, language: str | None, prepend: str = PREPEND_PUNCTUATIONS,
                append: str = APPEND_PUNCTUATIONS) -> list[WordTokens]:
    """Group tokens into words (openai's ``split_to_word_tokens``), then attach each opening punctuation mark in
    ``prepend`` to the word after it and each closing one in ``append`` to the word before it (its
    ``merge_punctuations``: a mark stays a word of its own when it is not in them). A word keeps its own
    tokens' span as its ``core``, its probability's (openai-whisper's: a mark's doubt is not the word's; with
    the mark's, JFK's "you," scores 0.68 where faster-whisper gives 0.996). Its time spans the marks too,
    unlike openai-whisper's: against the forced alignment of mfa/acoustic_corpus, its 13 words ending in a mark
    end 0.16 s early (signed median) in openai-whisper's and faster-whisper's words, 0.00 s in ours (mean
    error 0.24 s against 0.19 s; bench/word_timing.py)."""
    # whole unicode characters first: a character may span several byte-level tokens
    pieces: list[WordTokens] = []
    pending: list[int] = []
    for tok in tokens:
        pending.append(tok)
        text = tokenizer.decode(pending)
        if "\ufffd" not in text:
            pieces.append(WordTokens(text, pending))
            pending = []
    if pending:
        pieces.append(WordTokens(tokenizer.decode(pending), pending))
    if language in NO_SPACE_LANGUAGES:
        words = pieces
    else:
        words = []
        for p in pieces:
            if not words or p.text.startswith(" ") or p.text.strip() in string.punctuation:
                words.append(WordTokens(p.text, list(p.tokens)))
            else:
                words[-1] = WordTokens(words[-1].text + p.text, words[-1].tokens + p.tokens)
    # openai's two passes, in its order (``in`` is a substring test there too)
    i, j = len(words) - 2, len(words) - 1
    while i >= 0:
        before, after = words[i], words[j]
        if before.text.startswith(" ") and before.text.strip() in prepend:
            lo, hi = after.span
            n = len(before.tokens)
            words[j] = WordTokens(before.text + after.text, before.tokens + after.tokens, (lo + n, hi + n))
            words[i] = WordTokens("", [], (0, 0))
        else:
            j = i
        i -= 1
    i, j = 0, 1
    while j < len(words):
        before, after = words[i], words[j]
        if not before.text.endswith(" ") and after.text in append:
            words[i] = WordTokens(before.text + after.text, before.tokens + after.tokens, before.span)
            words[j] = WordTokens("", [], (0, 0))
        else:
            i = j
        j += 1
    return [w for w in words if w.text]


class WordAligner:
    """Adds ``Segment.words`` (absolute times, probabilities) to a batch of decoded chunks."""

    def __init__(self, runtime: WhisperDecoderRuntime, special: SpecialTokens, tokenizer, alignment_heads):
        self.rt = runtime
        self.sp = special
        self.tokenizer = tokenizer
        heads = [tuple(map(int, h)) for h in (alignment_heads or [])]
        if not heads:  # openai's fallback: every head of the upper half of the decoder
            n = len(runtime.layers)
            heads = [(layer, h) for layer in range(n // 2, n) for h in range(runtime.n_head)]
        self.heads = heads

    def sot_sequence(self, language: str | None, task: str) -> list[int]:
        return self.sp.prompt(language, task, timestamps=True) + [self.sp.no_timestamps]

    @torch.inference_mode()
    def align(
        self,
        encoder_out: torch.Tensor,
        chunk_segments: list[list[Segment]],
        chunk_offsets: list[float],
        chunk_durations: list[float],
        language: str | None,
        task: str,
        words_of: Callable[[Segment], list[WordTokens]] | None = None,
        punctuations: tuple[str, str] = (PREPEND_PUNCTUATIONS, APPEND_PUNCTUATIONS),
    ) -> None:
        """Fill the words of every segment; row i of ``encoder_out`` is chunk i. ``words_of``: a segment's
        tokens grouped into words, when not the tokenizer's word split (``split_words``, which attaches the
        marks ``punctuations``, (prepended, appended), to their words)."""
        from scipy.ndimage import median_filter  # imported on first use, like numba (``_compiled_dtw``)

        words_of = words_of or (lambda seg: split_words(seg.tokens, self.tokenizer, language, *punctuations))
        prompt = self.sot_sequence(language, task)
        rows = [i for i, segs in enumerate(chunk_segments) if any(s.tokens for s in segs)]
        if not rows:
            return
        texts = [[t for s in chunk_segments[i] for t in s.tokens] for i in rows]
        n = len(prompt) + max(len(t) for t in texts) + 1
        n = min(n, self.rt.max_len)
        device = self.rt.device
        seqs = on_device([((prompt + text + [self.sp.eot])[:n] + [self.sp.eot] * n)[:n] for text in texts], device)
        positions = torch.arange(n, device=device).expand(len(rows), -1)
        # all rows: the very tensor, so a projection shared for it is found (``sharing_cross_kv``)
        cache = self.rt.new_cache(encoder_out if len(rows) == encoder_out.shape[0] else encoder_out[on_device(rows, device)])
        qk: dict[int, torch.Tensor] = {layer: None for layer, _ in self.heads}
        hidden = self.rt.hidden(seqs, positions, cache, cross_qk=qk, whole_rows=True)
        logprobs = self.rt.logits(hidden).float().log_softmax(-1)
        for r, i in enumerate(rows):
            weights = torch.stack([qk[layer][r, head] for layer, head in self.heads])  # [H, n, frames]
            frames = max(1, min(weights.shape[-1], int(round(chunk_durations[i] / FRAME_S))))
            text = texts[r][: n - len(prompt) - 1]
            m = len(text)
            w = weights[:, : len(prompt) + m + 1, :frames].softmax(-1)
            std, mean = torch.std_mean(w, dim=-2, keepdim=True, unbiased=False)
            w = ((w - mean) / (std + 1e-8)).float().cpu().numpy()  # the filter and DTW run on the host
            w = median_filter(w, (1, 1, MEDFILT_WIDTH), mode="mirror")
            # row p is the query that predicts token p+1: from <|notimestamps|> (predicting the first
            # text token) to the last text token (predicting end-of-text), as in openai's timing.py
            matrix = w.mean(axis=0)[len(prompt) - 1 : len(prompt) + m]
            text_idx, time_idx = _compiled_dtw()(np.ascontiguousarray(-matrix, dtype=np.float32))
            jumps = np.pad(np.diff(text_idx), (1, 0), constant_values=1).astype(bool)
            jump_times = time_idx[jumps] * FRAME_S  # first frame of each token (+ final eot)
            pos = np.arange(len(prompt) - 1, len(prompt) - 1 + m)
            if m:
                at = on_device(pos.tolist(), device), on_device(text, device)
                token_p = logprobs[r, at[0], at[1]].exp().cpu().numpy()
            else:
                token_p = np.zeros(0)
            self._assign(chunk_segments[i], text, jump_times, token_p, chunk_offsets[i], words_of)

    def _assign(self, segments, text, jump_times, token_p, offset, words_of) -> None:
        k = 0
        per_segment: list[list[Word]] = []
        for seg in segments:
            words = words_of(seg)
            out: list[Word] = []
            for w in words:
                a, b = k, k + len(w.tokens)
                k = b
                if a >= len(text):
                    break
                start = offset + float(jump_times[a])
                end = offset + float(jump_times[min(b, len(jump_times) - 1)])
                lo, hi = w.span  # scored by its own tokens, as openai-whisper scores it (``split_words``)
                prob = float(np.mean(token_p[a + lo:a + hi])) if hi > lo else None
                out.append(Word(start=start, end=end, text=w.text, probability=prob))
            per_segment.append(out)
        median = median_duration([w for out in per_segment for w in out])
        last_speech = offset  # the speech before a chunk is taken to end at its start
        for seg, out in zip(segments, per_segment):
            seg.words = fit_words(out, seg.start, seg.end, median, last_speech)
            if seg.words:
                last_speech = seg.words[-1].end


def median_duration(words: list[Word]) -> float:
    """openai's typical word length of a window: the median of its words' nonzero durations, at most 0.7 s."""
    durations = np.array([w.end - w.start for w in words])
    nonzero = durations[durations > 0]
    return min(0.7, float(np.median(nonzero))) if len(nonzero) else 0.0


def fit_words(words: list[Word], start: float, end: float, median: float | None = None,
              last_speech: float | None = None) -> list[Word]:
    """Keep words inside their segment, ordered, and trim implausibly long ones (openai's heuristics,
    whisper/timing.py): ``median`` is the window's typical word length (``median_duration``, these
    words' when None), ``last_speech`` where the speech before the segment ended. The first and second
    word after a pause get at most twice the median: over music or noise before speech, the aligner
    stretches the first word or the second over it (measured: "many" over 19 s of tones), and the
    hallucination rules (specwhisper.asr.hallucination) would score such a segment as invented."""
    if not words:
        return words
    median = median_duration(words) if median is None else median
    max_d = median * 2 if median > 0 else 1.0
    first = words[0]
    if last_speech is not None and median > 0 and first.end - last_speech > median * 4 and (
        first.end - first.start > max_d or (len(words) > 1 and words[1].end - first.start > max_d * 2)
    ):
        if len(words) > 1 and words[1].end - words[1].start > max_d:
            first.end = words[1].start = max(words[1].end / 2, words[1].end - max_d)
        first.start = max(0.0, first.end - max_d)
    prev_end = start
    for i, w in enumerate(words):
        w.start = min(max(w.start, prev_end), end)
        w.end = min(max(w.end, w.start), end)
        if w.end - w.start > max_d:
            if i == 0 or _ends_sentence(words[i - 1].text):
                w.start = max(w.start, w.end - max_d)
            elif _ends_sentence(w.text) or i == len(words) - 1:
                w.end = w.start + max_d
        prev_end = w.end
    return words


def _ends_sentence(text: str) -> bool:
    t = text.strip()
    return bool(t) and t[-1] in SENTENCE_END
