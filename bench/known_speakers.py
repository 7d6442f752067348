"""Known speakers: how close a reference clip's embedding is to the diarizer's centroid of the same voice in
another recording, and to other voices, and whether the speakers get the right names.

    python bench/known_speakers.py        # writes bench/results/known_speakers.json

Targets (diarized with the embedded pipeline): the AMI excerpts dev00 and dev01 (speakers MEE009 and
MEE012 in both), the pyannote sample (a phone call of two other voices), and three conversations joined
from the eval clips (their reference turns: silero-vad's speech in each clip) (LJSpeech's reader, LibriSpeech readers 61 and 2412, the MFA speaker, JFK, the AMI
headset speaker FEE041, FLEURS readers). References: clips of 2.4 to 11 s, from the other AMI excerpt, other
LJSpeech and MFA recordings, and clips of voices in none of the targets. Each (speaker centroid, reference)
pair is labelled by the voices' identities: same voice in another recording, same recording (the
reference is cut from the target's own audio; kept apart, it is not a test), or different voices. Then
each target is named with ``specwhisper.diarize.known`` at ``SAME_SPEAKER``: ``named_share`` is the share
of the reference speech (10 ms steps, overlaps left out) whose turn carries the right name, where a voice
without a reference counts as right when it keeps a SPEAKER_NN label. All of it four times: the reference
clips as they are, and as recorded over another channel than the targets (a phone line, a reverberant
room, pink noise at 10 dB SNR): a user's clip is rarely recorded where the meeting was.
"""

from __future__ import annotations

import io
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import soundfile as sf  # noqa: E402
import soxr  # noqa: E402

from bench.common import machine  # noqa: E402
from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.diarize.coverage import embedding_of  # noqa: E402
from specwhisper.diarize.known import SAME_SPEAKER, KnownSpeaker, named_turns, similarities  # noqa: E402
from specwhisper.diarize.pipeline import load_diarizer  # noqa: E402
from specwhisper.evaluation.diarization import EVAL_DIR, vad_turns, pyannote_dev_files, pyannote_sample_file  # noqa: E402
from specwhisper.evaluation.noise import in_room, with_noise  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "known_speakers.json"
SR = 16000
DEV = "pyannote-audio/tests_data/"

# name -> (voice, file, start s, end s): the reference clips
REFERENCES = {
    "MEE009@dev00": ("MEE009", DEV + "dev00.wav", 1.5, 11.5),
    "MEE012@dev00": ("MEE012", DEV + "dev00.wav", 13.2, 16.9),
    "MEE009@dev01": ("MEE009", DEV + "dev01.wav", 7.05, 11.75),
    "MEE012@dev01": ("MEE012", DEV + "dev01.wav", 4.3, 6.75),
    "LJ001-0001": ("LJ", "coqui-tts-ljspeech/LJ001-0001.wav", None, None),
    "LJ001-0004": ("LJ", "coqui-tts-ljspeech/LJ001-0004.wav", None, None),
    "jfk": ("JFK", "whisper.cpp/jfk.wav", None, None),
    "fleurs-en-000": ("FLEURS-en-000", "cuttledoc-fleurs/fleurs-en-000.ogg", None, None),
    "mfa_uhum": ("MFA", "mfa/mfa_uhum.flac", None, None),
    "mfa-acoustic": ("MFA-acoustic", "mfa/acoustic_corpus.wav", 0.0, 10.0),
    "2412": ("LS-2412", "lhotse/2412-153948-0000.flac", None, None),
}
# the joined conversations: name -> [(file, voice)]
JOINED = {
    "read: LJ, LS-61, LS-2412": [("coqui-tts-ljspeech/LJ001-0002.wav", "LJ"), ("coqui-tts-ljspeech/LJ001-0003.wav", "LJ"),
                                 ("mfa/61-70968-0000.flac", "LS-61"), ("lhotse/LJ002-0020.wav", "LJ"),
                                 ("lhotse/2412-153948-0000.flac", "LS-2412"), ("coqui-tts-ljspeech/LJ001-0004.wav", "LJ")],
    "JFK, AMI headset, FLEURS": [("whisper.cpp/jfk.wav", "JFK"), ("lhotse/ES2011a.Headset-0-40s-46s.wav", "FEE041"),
                                 ("cuttledoc-fleurs/fleurs-en-000.ogg", "FLEURS-en-000"), ("whisper.cpp/jfk.wav", "JFK")],
    "MFA, LJ, FLEURS": [("mfa/mfa_surround.flac", "MFA"), ("coqui-tts-ljspeech/LJ001-0001.wav", "LJ"),
                        ("mfa/mfa_laughter.flac", "MFA"), ("cuttledoc-fleurs/fleurs-en-001.ogg", "FLEURS-en-001")],
}


def _audio(path: str, start=None, end=None) -> np.ndarray:
    audio = load_audio(EVAL_DIR / path)
    return audio if start is None else audio[int(start * SR):int(end * SR)]


def targets() -> dict[str, tuple[np.ndarray, list[tuple[float, float, str]], set[str], tuple | None]]:
    """name -> (audio, reference turns (start, end, voice), the files it holds, scoring region)."""
    out = {}
    for f in pyannote_dev_files():
        out[f.uri] = (load_audio(f.audio), [(t.start, t.end, t.speaker) for t in f.reference], {DEV + f"{f.uri}.wav"}, f.uem)
    sample = pyannote_sample_file()
    out["pyannote sample (phone call)"] = (load_audio(sample.audio), [(t.start, t.end, "sample-" + t.speaker)
                                                                      for t in sample.reference], set(), None)
    for name, pieces in JOINED.items():
        audio, turns, t = [], [], 0.0
        for path, voice in pieces:
            x = _audio(path)
            audio += [x, np.zeros(int(0.7 * SR), np.float32)]
            turns += [(v.start, v.end, voice) for v in vad_turns(x, voice, t)]  # the speech, not the clip's pauses
            t += len(x) / SR + 0.7
        out[name] = (np.concatenate(audio), turns, {p for p, _ in pieces}, None)
    return out


def _voice_of(label: str, turns, truth) -> str | None:
    overlap: dict[str, float] = {}
    for t in turns:
        if t.speaker == label:
            for s, e, voice in truth:
                overlap[voice] = overlap.get(voice, 0.0) + max(0.0, min(e, t.end) - max(s, t.start))
    return max(overlap, key=overlap.get) if overlap else None


def named_share(turns, truth, names: dict[str, str], uem) -> float:
    """Share of single-voice reference time whose turn has the voice's reference name (a voice without
    one: any SPEAKER_NN label)."""
    lo, hi = uem if uem else (0.0, max(e for _, e, _ in truth))
    right = total = 0
    for t in np.arange(lo, hi, 0.01):
        voices = {v for s, e, v in truth if s <= t < e}
        if len(voices) != 1:
            continue
        total += 1
        voice = voices.pop()
        heard = {h.speaker for h in turns if h.start <= t < h.end}
        right += (names[voice] in heard) if voice in names else any(h.startswith("SPEAKER_") for h in heard)
    return right / total if total else 0.0


def phone_line(audio: np.ndarray) -> np.ndarray:
    """``audio`` as a phone line carries it: 8 kHz, G.711 mu-law (soundfile's codec), back at 16 kHz."""
    buf = io.BytesIO()
    sf.write(buf, soxr.resample(audio, SR, 8000), 8000, format="WAV", subtype="ULAW")
    buf.seek(0)
    return soxr.resample(sf.read(buf, dtype="float32")[0], 8000, SR).astype(np.float32)


# How the reference clips were recorded, against the targets as they are: the same channel, or another
CHANNELS = {
    "clean": lambda audio: audio,
    "phone line (8 kHz mu-law)": phone_line,
    "room (RT60 0.7 s)": lambda audio: in_room(audio, 0.7),
    "pink noise (SNR 10 dB)": lambda audio: with_noise(audio, 10.0),
}


def main() -> None:
    diarizer = load_diarizer()
    embed = embedding_of(diarizer.pipeline)
    clips = {name: (voice, path, _audio(path, a, b)) for name, (voice, path, a, b) in REFERENCES.items()}
    diarized = {}
    for name, (audio, truth, files, uem) in targets().items():
        t0 = time.perf_counter()
        turns, centroids = diarizer.diarize(audio)
        diarized[name] = (turns, centroids, truth, files, uem, time.perf_counter() - t0)
    summary, runs = [], []
    for channel, alter in CHANNELS.items():
        altered = {name: (voice, path, alter(audio)) for name, (voice, path, audio) in clips.items()}
        ref_embeddings = {name: embed(audio) for name, (_, _, audio) in altered.items()}
        pairs = {"same voice, other recording": [], "same recording": [], "different voices": []}
        for name, (turns, centroids, truth, files, uem, seconds) in diarized.items():
            voices = {label: _voice_of(label, turns, truth) for label in centroids}
            for (label, ref), sim in similarities(centroids, ref_embeddings).items():
                voice, path, _ = altered[ref]
                kind = ("same recording" if path in files else "same voice, other recording") if voices[label] == voice \
                    else "different voices"
                if kind == "different voices" and path in files and name.startswith("dev"):
                    kind = "same recording"  # the other speaker of the excerpt the clip is cut from: not independent
                pairs[kind].append(round(sim, 4))
            # name the target with the references of other recordings: one per voice (the first listed)
            usable = {}
            for ref, (voice, path, audio_ref) in altered.items():
                if path not in files and voice not in {v for v, _ in usable.values()}:
                    usable[ref] = (voice, audio_ref)
            known = [KnownSpeaker(voice, a) for voice, a in usable.values()]
            t1 = time.perf_counter()
            named, _ = named_turns(turns, centroids, known, embed)
            naming_s = time.perf_counter() - t1
            present = {v for _, _, v in truth}
            runs.append({"name": f"named: {name}; references: {channel}", "voices": sorted(present),
                         "references": len(known),
                         "references_of_absent_voices": len({v for v, _ in usable.values()} - present),
                         "named_share": round(named_share(named, truth, {v: v for v, _ in usable.values()}, uem), 4),
                         "wrong_names": sorted({t.speaker for t in named} - present - {t.speaker for t in turns}),
                         "diarization_s": round(seconds, 2), "naming_s": round(naming_s, 3)})
            print(runs[-1], flush=True)
        for kind, sims in pairs.items():
            summary.append({"name": f"similarity: {kind}; references: {channel}", "pairs": len(sims),
                            "similarity_min": min(sims), "similarity_mean": round(float(np.mean(sims)), 4),
                            "similarity_max": max(sims), "threshold": SAME_SPEAKER})
            print(summary[-1], flush=True)
    RESULTS.write_text(json.dumps({"machine": machine(1), "runs": summary + runs}, indent=1) + "\n")
    print("wrote", RESULTS)


if __name__ == "__main__":
    main()
