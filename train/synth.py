"""Synthetic training speech: espeak-ng (Debian package) in many voices, rates and pitches.

``synth_window`` builds one decoder window (<= 29.5 s at 16 kHz) from a few utterances of generated
text, one to three speakers, pauses between them, random gain and, for some windows, background
noise: the kind of chunk the VAD hands to the decoder.
"""

from __future__ import annotations

import io
import random
import shutil
import subprocess

import numpy as np
import soundfile as sf
import soxr

from train.text import TextGenerator

SAMPLE_RATE = 16000
ACCENTS = ("en-us", "en-us", "en-us", "en-gb", "en-gb", "en-gb-x-rp", "en-gb-scotland", "en-029", "en-us-nyc",
           "en-gb-x-gbclan", "en-gb-x-gbcwmd")
VARIANTS = ("m1", "m2", "m3", "m4", "m5", "m6", "m7", "f1", "f2", "f3", "f4", "f5", "klatt", "klatt2", "klatt3",
            "klatt4", "Andy", "Annie", "Alex", "Denis", "ed", "Mike", "paul", "rob", "steph", "linda", "Michael",
            "david", "john", "max", "robert", "belinda", "Andrea", "Alicia", "aunty", "grandpa", "norbert", "shelby",
            "travis", "victor", "zac", "iven", "Lee", "quincy")


def espeak_available() -> bool:
    return shutil.which("espeak-ng") is not None


def speak(text: str, voice: str, rate: int, pitch: int, gap: int = 0) -> np.ndarray:
    """espeak-ng's speech for ``text`` as float32 at 16 kHz."""
    cmd = ["espeak-ng", "--stdout", "-v", voice, "-s", str(rate), "-p", str(pitch), "-g", str(gap), text]
    wav = subprocess.run(cmd, check=True, capture_output=True).stdout
    audio, sr = sf.read(io.BytesIO(wav), dtype="float32")
    if audio.ndim > 1:
        audio = audio.mean(axis=1)
    return soxr.resample(audio, sr, SAMPLE_RATE).astype(np.float32)


def random_voice(r: random.Random) -> dict:
    return dict(voice=f"{r.choice(ACCENTS)}+{r.choice(VARIANTS)}", rate=r.randint(130, 250), pitch=r.randint(15, 85),
                gap=r.choice([0, 0, 0, 1, 2, 4]))


def synth_window(r: random.Random, text: TextGenerator, max_s: float = 29.5) -> tuple[np.ndarray, list[str]]:
    """One window of speech and the texts spoken in it."""
    target = r.uniform(22.0, max_s) if r.random() < 0.9 else r.uniform(3.0, 15.0)
    speakers = [random_voice(r) for _ in range(r.choice([1, 1, 1, 2, 2, 3]))]
    pieces = [np.zeros(int(r.uniform(0.0, 1.0) * SAMPLE_RATE), np.float32)]
    said: list[str] = []
    total = len(pieces[0])
    for _ in range(40):
        utt = text.utterance()
        v = r.choice(speakers)
        audio = speak(utt, **v) * r.uniform(0.4, 1.0)
        if (total + len(audio)) / SAMPLE_RATE > max_s:
            if said:
                break
            continue  # the first utterance is too long: draw another
        pause = np.zeros(int(r.uniform(0.15, 1.2) * SAMPLE_RATE), np.float32)
        pieces += [audio, pause]
        said.append(utt)
        total += len(audio) + len(pause)
        if total / SAMPLE_RATE >= target:
            break
    audio = np.concatenate(pieces)[: int(max_s * SAMPLE_RATE)]
    if r.random() < 0.5:  # background noise at 10-40 dB SNR
        power = float(np.mean(audio**2)) + 1e-9
        snr = r.uniform(10.0, 40.0)
        audio = audio + np.random.default_rng(r.randrange(2**32)).normal(0, np.sqrt(power / 10 ** (snr / 10)), len(audio)).astype(np.float32)
    peak = float(np.abs(audio).max()) or 1.0
    if peak > 0.99:
        audio = audio * (0.99 / peak)
    return audio, said
