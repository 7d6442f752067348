"""Speakers for the speech the transcript hears and the diarizer does not.

The diarizer can find no turn where Whisper wrote words: a short backchannel, a far or quiet voice
(-46 to -64 dBFS), a turn its segmentation called silence, or a whole excerpt with nothing but
such turns. Every stretch of words that no turn overlaps becomes a turn of its own, so that each
word has a speaker and the RTTM holds that speech:

* when the diarizer found speakers, the stretch takes the speaker whose centroid (the diarizer's
  own speaker embeddings) is closest, by cosine, to the stretch's embedding computed by the
  diarizer's own embedding model; a stretch too short to embed takes the speaker of the nearest
  turn in time;
* when it found none, the stretches are one speaker (``SPEAKER_00``): with no turn at all there is
  no speaker to tell them from, and one label is the answer that needs no threshold.

A stretch counts only where there is speech under it: the diarizer's segmentation model, run on the
stretch, gives speech (any speaker) a probability of at least one half in one of its frames (its own
decision before the clustering and the turn-length filters; in noise, Whisper also writes words where
nobody speaks: "1 Bd" over brown noise at -50 dBFS, where the model hears none).

Words that overlap a turn, even partly, keep the speaker that attribution gives them
(``specwhisper.diarize.attribution``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np
import torch

from specwhisper.results.transcript import SpeakerTurn

JOIN_S = 1.0  # words of one stretch: uncovered words closer than this (a pause inside one turn)
MIN_EMBED_S = 0.5  # a stretch is embedded over at least this much audio, centred on it
SAMPLE_RATE = 16000

Embed = Callable[[np.ndarray], np.ndarray | None]  # 16 kHz mono audio -> one embedding
Heard = Callable[[np.ndarray, float, float], bool]  # (16 kHz mono audio, start s, end s) -> speech there?


def uncovered(turns: Sequence[SpeakerTurn], words: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    """Stretches of ``words`` (start, end in seconds) that no turn overlaps, words closer than
    ``JOIN_S`` joined into one stretch."""
    spans = sorted((t.start, t.end) for t in turns if t.end > t.start)
    ends = np.maximum.accumulate([e for _, e in spans]) if spans else np.array([])
    starts = np.array([s for s, _ in spans])
    out: list[tuple[float, float]] = []
    for start, end in sorted(words):
        end = max(end, start + 1e-3)
        i = int(np.searchsorted(starts, end))  # turns that start before the word ends
        if i and ends[i - 1] > start:
            continue  # a turn that starts before the word ends, ends after it starts: it overlaps the word
        if out and start - out[-1][1] < JOIN_S:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def _excerpt(audio: np.ndarray, start: float, end: float) -> np.ndarray:
    """The stretch's audio, widened evenly to ``MIN_EMBED_S`` where it is shorter (inside the file)."""
    missing = max(0.0, MIN_EMBED_S - (end - start))
    a = max(0, int((start - missing / 2) * SAMPLE_RATE))
    b = min(len(audio), max(a + int(MIN_EMBED_S * SAMPLE_RATE), int((end + missing / 2) * SAMPLE_RATE)))
    return audio[a:b]


def _nearest_turn(turns: Sequence[SpeakerTurn], start: float, end: float) -> str:
    mid = (start + end) / 2
    return min(turns, key=lambda t: (max(t.start - mid, mid - t.end, 0.0), t.start)).speaker


def cover_words(audio: np.ndarray, turns: list[SpeakerTurn], words: Sequence[tuple[float, float]],
                centroids: dict[str, np.ndarray] | None = None, embed: Embed | None = None,
                heard: Heard | None = None) -> list[SpeakerTurn]:
    """``turns`` plus one turn per uncovered stretch of ``words`` with speech under it (see the module
    docstring), sorted. ``centroids``: the diarizer's speaker embeddings by speaker name; ``embed``: its
    embedding model (without them a stretch takes the speaker of the nearest turn); ``heard``: its
    speech decision on a stretch of the audio (None: every stretch counts)."""
    stretches = [(s, e) for s, e in uncovered(turns, words) if heard is None or heard(audio, s, e)]
    if not stretches:
        return turns
    if not turns:
        return [SpeakerTurn(s, e, "SPEAKER_00") for s, e in stretches]
    names = [k for k, v in (centroids or {}).items() if v is not None and np.linalg.norm(v) > 0]
    matrix = np.stack([centroids[k] / np.linalg.norm(centroids[k]) for k in names]) if names else None
    added = []
    for start, end in stretches:
        speaker = None
        piece = _excerpt(audio, start, end)
        if matrix is not None and embed is not None:
            if len(piece) >= int(MIN_EMBED_S * SAMPLE_RATE) // 2:
                raw = embed(piece)
                e = np.asarray(raw if raw is not None else [np.nan], dtype=np.float64).ravel()
                if np.isfinite(e).all() and np.linalg.norm(e) > 0:
                    speaker = names[int(np.argmax(matrix @ (e / np.linalg.norm(e))))]
        added.append(SpeakerTurn(start, end, speaker or _nearest_turn(turns, start, end)))
    return sorted(turns + added, key=lambda t: (t.start, t.end, t.speaker))


def speech_heard_by(pipeline) -> Heard | None:
    """A pyannote pipeline's segmentation model as a ``Heard``: on its window of the audio centred on
    [start, end], does it give speech (any speaker) a probability of at least one half in one frame of
    that stretch. None for a pipeline without one."""
    inference = getattr(pipeline, "_segmentation", None)
    if inference is None:
        return None
    model = inference.model

    def heard(audio: np.ndarray, start: float, end: float) -> bool:
        window = int(round(model.specifications.duration * SAMPLE_RATE))
        a = max(0, min(len(audio) - window, int((start + end) / 2 * SAMPLE_RATE) - window // 2))
        x = torch.from_numpy(np.ascontiguousarray(audio[a:a + window], dtype=np.float32))
        x = torch.nn.functional.pad(x, (0, window - len(x)))[None, None].to(model.device)  # a file shorter than it
        with torch.inference_mode():
            out = model(x)[0]
        if model.specifications.powerset:  # log-probabilities of speaker sets; set 0 is "nobody"
            speech = 1.0 - out.exp()[:, 0]
        else:
            speech = out.max(dim=-1).values
        per_frame = window / SAMPLE_RATE / out.shape[0]
        i0 = max(0, int((start - a / SAMPLE_RATE) / per_frame))
        i1 = min(out.shape[0], int(np.ceil((end - a / SAMPLE_RATE) / per_frame)) + 1)
        return bool((speech[i0:i1] >= 0.5).any())

    return heard


def embedding_of(pipeline) -> Embed | None:
    """A pyannote pipeline's own speaker embedding model as an ``Embed`` (None without one)."""
    model = getattr(pipeline, "_embedding", None)
    if model is None:
        return None
    def embed(piece: np.ndarray) -> np.ndarray:
        x = torch.from_numpy(np.ascontiguousarray(piece, dtype=np.float32))[None, None]
        with torch.inference_mode():
            out = model(x.to(getattr(model, "device", "cpu")))[0]
        return out.float().cpu().numpy() if isinstance(out, torch.Tensor) else np.asarray(out)

    return embed
