"""Known speakers: the diarizer's speakers named after short reference clips of their voices.

A reference is a clip of one person speaking (OpenAI's ``known_speaker_references[]``: 2 to 10 s; here
2 to 30 s). Each speaker the diarizer found takes the name of the reference whose embedding (the
diarizer's own embedding model, on the whole clip) is closest, by cosine, to the speaker's centroid,
when that similarity is at least ``SAME_SPEAKER``; a speaker close to no reference keeps its
``SPEAKER_NN`` label, and a reference close to no speaker names nobody. Two speakers close to one
reference (one voice the diarizer split in two) both take its name, and their turns are joined.

``SAME_SPEAKER`` comes from bench/known_speakers.py (bench/results/known_speakers.json) on the eval
recordings, with the embedded CAM++ model: a reference clip and the centroid of the same voice in another
recording were at 0.70 to 0.96 (AMI speakers across the two meeting excerpts, the LJSpeech reader, the MFA
speaker), a clip and the centroid of another voice at most 0.38 (the MFA developers' spontaneous recording
against their read ones, taken as two voices); 0.5 sits in between. With the clips recorded over another
channel than the targets the gap narrows, most over a phone line (8 kHz mu-law): the same voice 0.52 to
0.81, other voices at most 0.41; in a reverberant room (RT60 0.7 s) 0.70 / 0.37, under pink noise at 10 dB
SNR 0.64 / 0.35. 0.5 stays nearer the same voices' lowest: a wrong name is worse than none.
"""

from __future__ import annotations

import base64
import binascii
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from specwhisper.audio.loading import SAMPLE_RATE, AudioError, AudioTooLong, load_audio, load_audio_bytes
from specwhisper.results.transcript import SpeakerTurn

SAME_SPEAKER = 0.5  # cosine, reference clip vs a speaker's centroid (module docstring)
MIN_REFERENCE_S = 2.0
MAX_REFERENCE_S = 30.0
MAX_NAME_CHARS = 64
ERROR_PREFIX = "known speaker"  # how a clip's errors begin ("known speaker 'ann': ...")

Embed = Callable[[np.ndarray], np.ndarray | None]  # 16 kHz mono audio -> one embedding


@dataclass(frozen=True)
class KnownSpeaker:
    """A name and its reference clip (16 kHz mono)."""

    name: str
    audio: np.ndarray = field(repr=False, compare=False)


def check_name(name: object) -> str:
    """A speaker's name as it will be written: text, trimmed, not empty, at most ``MAX_NAME_CHARS``, no
    control characters."""
    if not isinstance(name, str):
        raise ValueError(f"a speaker's name must be text, got {type(name).__name__}")
    name = name.strip()
    if not name:
        raise ValueError("a speaker's name is empty")
    if len(name) > MAX_NAME_CHARS:
        raise ValueError(f"the speaker name '{name[:20]}...' is over {MAX_NAME_CHARS} characters")
    if any(ord(c) < 32 or ord(c) == 127 for c in name):
        raise ValueError(f"the speaker name {name!r} holds control characters")
    if re.fullmatch(r"SPEAKER_\d+", name):
        raise ValueError(f"'{name}' is how an unnamed speaker is labelled: choose another name")
    return name


def _data_url(source: str, name: str) -> bytes:
    """The bytes of a base64 ``data:`` URL (``data:audio/wav;base64,...``), as OpenAI's clients send a clip."""
    header, comma, payload = source.partition(",")
    if not comma or not header.endswith(";base64"):
        raise AudioError(f"{name}: a data URL must be base64 (data:audio/wav;base64,...)")
    try:
        return base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise AudioError(f"{name}: the data URL's base64 is not valid") from None


def load_reference(name: str, source: str) -> KnownSpeaker:
    """``name``'s reference clip from a file path or a base64 data URL, checked: audio of
    ``MIN_REFERENCE_S`` to ``MAX_REFERENCE_S`` seconds (AudioError, one line, otherwise)."""
    label = f"{ERROR_PREFIX} '{name}'"
    try:
        if source.startswith("data:"):
            data = _data_url(source, label)
            if not data:
                raise AudioError(f"{label}: the data URL holds no bytes")
            audio = load_audio_bytes(data, label, MAX_REFERENCE_S)
        else:
            audio = load_audio(source, max_seconds=MAX_REFERENCE_S, name=f"{label} ({source})")
    except AudioTooLong:
        raise AudioError(f"{label}: the reference clip is over {MAX_REFERENCE_S:g} s (give {MIN_REFERENCE_S:g} to "
                         f"{MAX_REFERENCE_S:g} s of the voice alone)") from None
    seconds = len(audio) / SAMPLE_RATE
    if seconds < MIN_REFERENCE_S:
        raise AudioError(f"{label}: the reference clip is {seconds:.1f} s (give {MIN_REFERENCE_S:g} to "
                         f"{MAX_REFERENCE_S:g} s of the voice alone)")
    if not np.any(audio):
        raise AudioError(f"{label}: the reference clip is silent")
    return KnownSpeaker(name, audio)


def load_known_speakers(pairs: Sequence[tuple[str, str]]) -> tuple[KnownSpeaker, ...]:
    """Every (name, path or data URL) loaded and checked (``load_reference``)."""
    return tuple(load_reference(name, source) for name, source in pairs)


def _unit(v) -> np.ndarray | None:
    v = np.asarray(v if v is not None else [np.nan], dtype=np.float64).ravel()
    norm = np.linalg.norm(v)
    return v / norm if np.isfinite(v).all() and norm > 0 else None


def similarities(centroids: Mapping[str, np.ndarray], references: Mapping[str, np.ndarray]) -> dict[tuple[str, str], float]:
    """Cosine of every (speaker, reference name) pair with usable embeddings."""
    out = {}
    for label, c in centroids.items():
        for name, r in references.items():
            a, b = _unit(c), _unit(r)
            if a is not None and b is not None:
                out[label, name] = float(a @ b)
    return out


def name_speakers(centroids: Mapping[str, np.ndarray], references: Mapping[str, np.ndarray],
                  threshold: float = SAME_SPEAKER) -> dict[str, str]:
    """Speaker label -> reference name, for each speaker whose closest reference is at least ``threshold``."""
    best: dict[str, tuple[float, str]] = {}
    for (label, name), sim in similarities(centroids, references).items():
        if sim >= threshold and sim > best.get(label, (-2.0, ""))[0]:
            best[label] = (sim, name)
    return {label: name for label, (_, name) in best.items()}


def rename(turns: Sequence[SpeakerTurn], names: Mapping[str, str]) -> list[SpeakerTurn]:
    """``turns`` with their speakers renamed; turns of one name that overlap or touch are joined."""
    out: list[SpeakerTurn] = []
    last: dict[str, int] = {}
    for t in sorted((SpeakerTurn(t.start, t.end, names.get(t.speaker, t.speaker)) for t in turns),
                    key=lambda t: (t.start, t.end, t.speaker)):
        i = last.get(t.speaker)
        if i is not None and t.speaker in names.values() and t.start <= out[i].end:
            out[i] = SpeakerTurn(out[i].start, max(out[i].end, t.end), t.speaker)
            continue
        last[t.speaker] = len(out)
        out.append(t)
    return out


def named_turns(turns: Sequence[SpeakerTurn], centroids: Mapping[str, np.ndarray], known: Sequence[KnownSpeaker],
                embed: Embed) -> tuple[list[SpeakerTurn], dict[str, str]]:
    """``turns`` with the speakers that match a known speaker's reference named after it, and the names given
    (speaker label -> name)."""
    names = name_speakers(centroids, {k.name: embed(k.audio) for k in known})
    return rename(turns, names), names


def voice_embeddings(centroids: Mapping[str, np.ndarray], names: Mapping[str, str]) -> dict[str, list[float]]:
    """Each speaker's embedding under its final name, unit length: a centroid, or the mean of the centroids
    one name was given to (a voice the diarizer split in two)."""
    grouped: dict[str, list[np.ndarray]] = {}
    for label, c in centroids.items():
        if (u := _unit(c)) is not None:
            grouped.setdefault(names.get(label, label), []).append(u)
    return {name: [round(float(x), 6) for x in _unit(np.mean(units, axis=0))] for name, units in grouped.items()}
