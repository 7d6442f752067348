"""Which language each file, or each chunk, is decoded in (``AsrEngine.transcribe_many``): detected
once per file on its first chunks with speech (``file_detections``), or per chunk with ``multilingual``,
where a chunk whose turns speak two languages is cut between them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np
import torch

from specwhisper.asr.decoding.alignment import FRAME_S
from specwhisper.asr.decoding.language import detect_language, language_probabilities
from specwhisper.asr.scheduling import Item
from specwhisper.audio.chunking import Chunk, turns
from specwhisper.audio.loading import SAMPLE_RATE
from specwhisper.results.language import LanguageDetection
from specwhisper.results.stats import DecodeStats

if TYPE_CHECKING:
    from specwhisper.asr.engine import AsrEngine
    from specwhisper.asr.options import DecodeOptions

Encoded = dict[Item, tuple[torch.Tensor, torch.Tensor]]  # (file, chunk) -> its features and encoder rows, kept


def detection_chunks(plan: list[Chunk], most: int) -> list[Chunk]:
    """The chunks a file's language may be detected on, in order: its first ``most`` with VAD speech,
    else its first."""
    return [c for c in plan if c.speech][:most] or plan[:1]


def file_detections(engine: AsrEngine, audios: list[np.ndarray], plans: list[list[Chunk]], batch_size: int,
                    encoded: Encoded, stats: list[DecodeStats], opts: DecodeOptions) -> list[LanguageDetection | None]:
    """Each file's language with every language's probability (None for a file with no chunk): detected on
    its first chunk with VAD speech and, while the likeliest language so far is below
    ``language_threshold``, on its next chunks with speech too, up to ``language_detection_segments``
    chunks, their probabilities pooled, each chunk weighted by its seconds of VAD speech. The chunks'
    encoder rows are kept in ``encoded`` (the decode takes them).

    One chunk is too little when a file opens with a word alone: "Hallo?" then 35 s of silence, then
    German speech; base reads the greeting as Chinese at 0.38 (French "Allo?" 0.24, Spanish "Hola?"
    Japanese 0.39), and the whole file came out in Chinese or Japanese. The next chunk says German at
    0.94, and pooled by speech (0.5 s against 9.9 s) German holds at 0.89. faster-whisper's
    ``language_detection_segments`` takes the first window over its threshold and otherwise a majority
    vote, where a tie goes to the first window (the greeting's wrong guess); pooling weighs each guess
    by the speech behind it."""
    candidates = [detection_chunks(plan, opts.language_detection_segments) for plan in plans]
    found: list[LanguageDetection | None] = [None] * len(audios)
    pooled: list[dict[str, float]] = [{} for _ in audios]
    weights = [0.0] * len(audios)
    active = [i for i, chunks in enumerate(candidates) if chunks]
    k = 0
    while active:
        rows = [(i, candidates[i][k]) for i in active]
        for b in range(0, len(rows), batch_size):
            engine.encode_items(audios, rows[b : b + batch_size], encoded, stats)
        for i, c in rows:
            probabilities = language_probabilities(engine.runtime, engine.special, encoded[(i, c)][1])
            weight = c.voiced_in(c.start, c.end) / SAMPLE_RATE
            if k > 0:  # pooled by speech; one chunk's own probabilities stay as the model gave them
                total = weights[i] + weight
                probabilities = {code: (weights[i] * pooled[i].get(code, 0.0) + weight * probabilities.get(code, 0.0))
                                 / total for code in pooled[i].keys() | probabilities.keys()}
                probabilities = dict(sorted(probabilities.items(), key=lambda kv: -kv[1]))
            pooled[i], weights[i] = probabilities, weights[i] + weight
            language, probability = next(iter(probabilities.items()))
            first = candidates[i][0]
            found[i] = LanguageDetection(language, probability, probabilities, round(first.start_s, 3),
                                         round(c.end / SAMPLE_RATE, 3), c.speech, chunks=k + 1)
        k += 1
        active = [i for i in active if found[i].probability < opts.language_threshold and k < len(candidates[i])]
    return found


def file_languages(engine: AsrEngine, audios: list[np.ndarray], plans: list[list[Chunk]], opts: DecodeOptions,
                   batch_size: int, encoded: Encoded, stats: list[DecodeStats]) -> list[tuple[str | None, float | None]]:
    """Each file's language and its probability: the option, or ``file_detections``'."""
    languages: list[tuple[str | None, float | None]] = [(opts.language, None)] * len(audios)
    if opts.language is not None:
        return languages
    for i, found in enumerate(file_detections(engine, audios, plans, batch_size, encoded, stats, opts)):
        if found is not None:
            languages[i] = (found.language, found.probability)
    return languages


def chunk_languages(engine: AsrEngine, audios: list[np.ndarray], plans: list[list[Chunk]], items: list[Item],
                    opts: DecodeOptions, encoded: Encoded, stats: list[DecodeStats], latest: list[str | None]
                    ) -> list[tuple[Item, str | None]]:
    """Each chunk's language (``multilingual``), in order; their encoder rows are kept. A detection
    holds when its probability reaches ``language_threshold`` on a chunk with VAD speech; else the
    file keeps its language so far (``latest``, updated here: the option, then the last detection
    that held), or, when it has none yet, takes the file's (``file_detections``: its first chunks
    with speech, pooled). faster-whisper's ``multilingual`` takes every window's detection, however
    unsure (German called English at p=0.43); a file opening with "Hallo?" alone, then 35 s of
    silence, then German had its greeting decoded in Chinese (its window: zh 0.38). A chunk whose
    turns speak two languages is cut between them (``language_turns``), each part with its own."""
    engine.encode_items(audios, items, encoded, stats)
    out: list[tuple[Item, str | None]] = []
    for i, c in items:
        enc = encoded[(i, c)][1]
        code, p = detect_language(engine.runtime, engine.special, enc)
        parts = language_turns(engine, audios[i], c, enc, code, opts, stats[i], latest[i])
        if parts:
            encoded.pop((i, c))
            for part, language in parts:
                latest[i] = language
                out.append(((i, part), language))
            continue
        if c.speech and p >= opts.language_threshold:
            latest[i] = code
        elif latest[i] is None:
            alone = [plan if j == i else [] for j, plan in enumerate(plans)]
            found = file_detections(engine, audios, alone, 1, encoded, stats, opts)[i]
            latest[i] = found.language if found is not None else code
        out.append(((i, c), latest[i]))
    return out


def language_turns(engine: AsrEngine, audio: np.ndarray, chunk: Chunk, enc: torch.Tensor, language: str,
                   opts: DecodeOptions, stats: DecodeStats, before: str | None) -> list[tuple[Chunk, str]]:
    """``multilingual``: a chunk's parts of one language each, when its turns (``chunking.turns``)
    speak two or more. Whisper's detection of a whole window takes its most spoken language, and
    the decode then translates the rest: on bench/multilingual.py's turns (clips of five languages,
    1.5 s apart) a window of a Spanish, an English and a Portuguese clip was detected Spanish at 0.96.

    Each turn is screened on the window's own encoder output, its frames alone (the decoder attends
    to them only: one decoder step a turn): on that window Spanish, English and Portuguese at
    0.95-1.00. The screen also reads some English turns of one-language windows as another language
    (Chinese at 0.63 on the built conversation), so where a turn screens as another language than
    ``language`` (the window's) at ``language_threshold`` or more, every turn is detected on its
    audio alone (one encoder batch; all English there at 0.94-1.00), and the chunk is cut in the
    pause between two turns those detections put in different languages. A turn detected alone
    below the threshold takes the language of the turn before it (the first: the file's language
    so far, ``before``). Empty: one language. A joined chunk (``--vad-filter``) is its speech back to
    back: its turns' frames and audio are their spans' there."""
    spans = turns(chunk)
    if len(spans) < 2:
        return []
    hop = round(FRAME_S * SAMPLE_RATE)  # samples per encoder frame
    frames = [(chunk.heard_at(a) // hop, -(-chunk.heard_at(b) // hop)) for a, b in spans]
    screened = [detect_language(engine.runtime, engine.special, enc[:, fa:fb]) for fa, fb in frames]
    if all(code == language or p < opts.language_threshold for code, p in screened):
        return []
    languages: list[str] = []
    for code, p in _turn_languages(engine, audio, chunk, spans, stats):
        last = languages[-1] if languages else before
        languages.append(code if p >= opts.language_threshold or last is None else last)
    changes = [k for k in range(1, len(spans)) if languages[k] != languages[k - 1]]
    if not changes:
        return []
    parts = chunk.cut([(spans[k - 1][1] + spans[k][0]) // 2 for k in changes])
    return list(zip(parts, [languages[0], *(languages[k] for k in changes)]))


def _turn_languages(engine: AsrEngine, audio: np.ndarray, chunk: Chunk, spans: list[tuple[int, int]], stats: DecodeStats
                    ) -> list[tuple[str, float]]:
    """Each span of ``chunk``'s language detected on its audio alone (one encoder batch)."""
    if not spans:
        return []
    pieces = [np.concatenate([audio[s:e] for s, e in chunk.voiced if a <= s < b]) if chunk.joined else audio[a:b]
              for a, b in spans]
    _, enc, seconds = engine.encode(pieces)
    stats.encoder_seconds += seconds
    return [detect_language(engine.runtime, engine.special, enc[k : k + 1]) for k in range(len(spans))]
