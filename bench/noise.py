"""Long files under a noise floor and over a phone line: what each system writes where the audio is not clean.

    python bench/noise.py [--snr 30,20] [--no-phone] [--rooms 0.7] [--no-clean] [--kinds dense,speakers]
                          [--systems ours,openai-whisper,fw,fw batched] [--out FILE]

bench/longform.py's two 10-minute files (the talk and the conversation, built from the public clips with
their references) with pink noise added at ``--snr`` dB below the file's speech (the RMS of its samples
above -80 dBFS; seed 0), the same files over a phone line (ffmpeg: 8 kHz, mu-law; each system loads the
8 kHz file itself), the same files in a reverberant room (``--rooms``: the reverberation time RT60 in
seconds; a synthetic impulse response, ``specwhisper.evaluation.noise.room_response``: the direct sound
and a decaying tail of equal energy), and the clean files beside them. Their quiet clips (-55 to -68 dBFS, 30-45 dB
under the loud ones) sink under the noise at 30 dB: no system can read them there, and what a system
writes over them is what Whisper makes of noise. Each system transcribes each file in a process of its
own, on the same embedded base weights, greedy, English given:

- ``ours``: the ``transcribe`` CLI, its defaults (``--draft none``);
- ``openai-whisper``: the openai-whisper package's own ``transcribe()`` (its defaults: condition on
  previous text, temperature fallback);
- ``fw`` / ``fw batched``: faster-whisper's ``WhisperModel.transcribe`` (beam 1) and its
  ``BatchedInferencePipeline`` (batch 8, its silero VAD), float32.

Per file and system: WER, words written, deleted and inserted words (jiwer's alignment after the
normalizer), ``thank_you``: how often "thank you" appears where the reference has none (the phrase
Whisper writes most over noise; the references hold none), and ``misdated``: segments dated away from
the clip whose words they hold (``specwhisper.evaluation.transcripts.misdated``: a subtitle shown while
another voice speaks). Writes bench/results/noise.json.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.common import machine  # noqa: E402
from bench.longform import CACHE, measured, run_one, timed  # noqa: E402

SYSTEMS = ("ours", "openai-whisper", "fw", "fw batched")


def altered_copy(path: Path, out: Path, alter) -> Path:
    """``path`` with ``alter(audio, sample_rate)`` applied, written to ``out`` (once)."""
    import soundfile as sf

    if not out.is_file():
        audio, sr = sf.read(path, dtype="float32")
        sf.write(out, alter(audio, sr), sr)
    return out


def noisy_copy(path: Path, snr_db: float, out: Path, seed: int = 0) -> Path:
    """``path`` with pink noise ``snr_db`` below its speech's level, written to ``out`` (once)."""
    from specwhisper.evaluation.noise import with_noise

    return altered_copy(path, out, lambda audio, sr: with_noise(audio, snr_db, seed))


def room_copy(path: Path, rt60_s: float, out: Path) -> Path:
    """``path`` heard in a room of reverberation time ``rt60_s``, written to ``out`` (once)."""
    from specwhisper.evaluation.noise import in_room

    return altered_copy(path, out, lambda audio, sr: in_room(audio, rt60_s, sr))


def phone_copy(path: Path, out: Path) -> Path:
    """``path`` as a phone line carries it (8 kHz, mu-law), written to ``out`` (once)."""
    if not out.is_file():
        subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-i", str(path), "-ar", "8000", "-acodec", "pcm_mulaw",
                        str(out)], check=True)
    return out


def _openai_child(audio_path: str, out_txt: str) -> None:
    """openai-whisper's ``transcribe()`` on the embedded base weights in this (child) process."""
    import torch
    import whisper

    from bench.hallucination import openai_model
    from specwhisper.asr.weights.loader import load_whisper

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model = openai_model(load_whisper("base"))
    result = whisper.transcribe(model, whisper.load_audio(audio_path), language="en", fp16=False, verbose=None)
    Path(out_txt).write_text(result["text"])
    timed(out_txt).write_text(json.dumps([dict(start=s["start"], end=s["end"], text=s["text"]) for s in result["segments"]]))


def transcribe(system: str, audio: Path) -> tuple[str, list[SimpleNamespace]]:
    """``system``'s text of ``audio`` and its timed segments, from a process of its own."""
    if system == "ours" or system.startswith("fw"):
        name = "ours none" if system == "ours" else "fw batched fp32" if system == "fw batched" else "fw fp32"
        run = run_one(name, audio, 2)
        return run["text"], [SimpleNamespace(**s) for s in run["segments"]]
    out = Path(tempfile.mkdtemp(prefix="noise-")) / "text.txt"
    code = f"import sys; sys.path.insert(0, {str(ROOT)!r}); from bench.noise import _openai_child; _openai_child({str(audio)!r}, {str(out)!r})"
    measured([sys.executable, "-c", code], ROOT, ROOT, f"{system} on {audio.name}")
    return out.read_text(), [SimpleNamespace(**s) for s in json.loads(timed(out).read_text())]


def scored(reference: str, text: str) -> dict:
    """WER, words, deletions, insertions (jiwer after the English normalizer) and "thank you"s."""
    import jiwer

    from specwhisper.evaluation.transcripts import normalize

    m = jiwer.process_words(normalize(reference), normalize(text))
    return dict(wer=round(m.wer, 4), words=len(text.split()), deleted=m.deletions, inserted=m.insertions,
                thank_you=len(re.findall(r"(?i)\bthank you\b", text)) - len(re.findall(r"(?i)\bthank you\b", reference)))


def main(argv: list[str] | None = None) -> int:
    from specwhisper.evaluation.transcripts import build_long_file, misdated

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--snr", default="30,20", help="noise levels, dB below the speech (default: 30,20)")
    ap.add_argument("--no-phone", action="store_true", help="leave out the phone-line copies")
    ap.add_argument("--rooms", default="0.7", help="reverberation times of the room copies, seconds (default: 0.7)")
    ap.add_argument("--no-clean", action="store_true", help="leave out the clean files")
    ap.add_argument("--kinds", default="dense,speakers", help="files: dense, speakers (default: both)")
    ap.add_argument("--systems", default=",".join(SYSTEMS), help=f"comma-separated, of: {', '.join(SYSTEMS)}")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "noise.json")
    args = ap.parse_args(argv)
    systems = [s.strip() for s in args.systems.split(",")]
    if unknown := [s for s in systems if s not in SYSTEMS]:
        ap.error(f"unknown system '{unknown[0]}'")
    runs = []
    for kind in args.kinds.split(","):
        f = build_long_file(kind, CACHE)
        conditions = [] if args.no_clean else [("clean", None, f.path)]
        conditions += [(f"pink noise {snr:g} dB", snr, noisy_copy(f.path, snr, CACHE / f"{f.path.stem}-pink{snr:g}.wav"))
                       for snr in (float(x) for x in args.snr.split(",") if x)]
        conditions += [] if args.no_phone else [("phone line", None, phone_copy(f.path, CACHE / f"{f.path.stem}-phone.wav"))]
        conditions += [(f"room RT60 {rt:g} s", None, room_copy(f.path, rt, CACHE / f"{f.path.stem}-room{rt:g}.wav"))
                       for rt in (float(x) for x in args.rooms.split(",") if x)]
        for condition, snr, audio in conditions:
            for system in systems:
                text, segments = transcribe(system, audio)
                row = dict(name=f"{system}, {kind}, {condition}", system=system, file=kind, condition=condition,
                           snr_db=snr, **scored(f.reference, text), misdated=len(misdated(segments, f.clips)))
                runs.append(row)
                print(f"{kind:8s} {condition:18s} {system:15s} WER {row['wer']:.3f}  words {row['words']:5d}  "
                      f"deleted {row['deleted']:4d}  inserted {row['inserted']:3d}  thank you {row['thank_you']}  "
                      f"misdated {row['misdated']}", flush=True)
                args.out.write_text(json.dumps({"machine": machine(2), "runs": runs}, indent=1) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
