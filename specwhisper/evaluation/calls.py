"""Two-party calls built from the eval clips, one party per channel, for ``multichannel`` transcription
(tests/test_multichannel.py, bench/multichannel.py): the parties take turns (or talk over each other),
and each one's voice leaks into the other's channel at ``bleed_db`` (crosstalk, a phone line's echo)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, load_audio
from specwhisper.evaluation.transcripts import EvalItem

# each party's clips (files of the eval manifest), in turn: A, B, A, B
PARTY_A = ("lhotse/LJ002-0020.wav", "coqui-tts-ljspeech/LJ001-0002.wav")
PARTY_B = ("mfa/61-70968-0000.flac", "whisper.cpp/jfk.wav")
GAP_S = 0.5


@dataclass
class Call:
    channels: np.ndarray  # 2 x samples
    references: tuple[str, str]  # what each party says, in order
    voices: np.ndarray  # 2 x samples: each party's voice alone (no bleed), for reference turns


def build_call(items: list[EvalItem], bleed_db: float | None = -20.0, overlap_s: float = 0.0,
               parties: tuple[tuple[str, ...], tuple[str, ...]] = (PARTY_A, PARTY_B)) -> Call:
    """The parties' clips in turns (A's first, then B's, ...), each next clip starting ``overlap_s`` before
    the one before ends (0: one after the other, ``GAP_S`` apart); ``bleed_db`` None: no bleed."""
    by_file = {i.file: i for i in items}
    turns = [(party, by_file[f]) for pair in zip(*parties) for party, f in enumerate(pair)]
    clips = [load_audio(item.path) for _, item in turns]
    voices = np.zeros((2, sum(map(len, clips)) + int(GAP_S * SAMPLE_RATE) * len(turns)), np.float32)
    at = end = 0
    for (party, _), clip in zip(turns, clips):
        voices[party, at : at + len(clip)] += clip
        end = max(end, at + len(clip))
        at = max(at + len(clip) + int((GAP_S if overlap_s == 0 else -overlap_s) * SAMPLE_RATE), 0)
    voices = voices[:, : end + int(GAP_S * SAMPLE_RATE)]
    leak = 0.0 if bleed_db is None else 10 ** (bleed_db / 20)
    channels = np.stack([voices[0] + leak * voices[1], voices[1] + leak * voices[0]]).astype(np.float32)
    refs = tuple(" ".join(item.reference for p, item in turns if p == party) for party in (0, 1))
    return Call(channels, refs, voices)
