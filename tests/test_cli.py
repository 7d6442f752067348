"""The transcribe CLI: output formats, containers via ffmpeg, and one-line errors on bad input."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import wave
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import soxr

from specwhisper.evaluation.transcripts import wer

REPO = Path(__file__).resolve().parents[1]

JFK_REF = "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."


def _one_line_error(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if line.strip()]
    assert len(lines) == 1, f"expected one error line, got: {err!r}"
    assert "Traceback" not in err
    assert lines[0].startswith("transcribe: error:")
    return lines[0]


def test_all_formats_written_and_valid(run_cli, eval_root, tmp_path):
    code, out, err = run_cli(eval_root / "whisper.cpp/jfk.wav", "-o", tmp_path, "-f", "all", "-q")
    assert code == 0, err
    names = sorted(p.name for p in tmp_path.iterdir())
    assert names == sorted(f"jfk.{f}" for f in ("txt", "srt", "vtt", "json", "tsv"))  # rttm: only with --diarize
    data = json.loads((tmp_path / "jfk.json").read_text())
    assert wer([JFK_REF], [data["text"]]) <= 0.05
    assert data["language"] == "en" and data["model"]["asr"] == "base"
    assert {"rtf", "total"} <= set(data["timings"]) and "acceptance_rate" in data["speculative"]
    seg = data["segments"][0]
    assert {"id", "seek", "start", "end", "text", "tokens", "temperature", "avg_logprob", "compression_ratio",
            "no_speech_prob"} <= set(seg)
    assert "words" not in seg and "speaker" not in seg  # no word timestamps asked, not diarized
    srt = (tmp_path / "jfk.srt").read_text()
    assert re.match(r"1\n\d\d:\d\d:\d\d,\d{3} --> \d\d:\d\d:\d\d,\d{3}\n\S", srt)
    vtt = (tmp_path / "jfk.vtt").read_text()
    assert vtt.startswith("WEBVTT\n\n") and re.search(r"^\d\d:\d\d\.\d{3} --> \d\d:\d\d\.\d{3}$", vtt, re.M)
    tsv = (tmp_path / "jfk.tsv").read_text().splitlines()
    assert tsv[0] == "start\tend\ttext" and all(re.fullmatch(r"\d+\t\d+\t[^\t]+", r) for r in tsv[1:])
    assert wer([JFK_REF], [(tmp_path / "jfk.txt").read_text()]) <= 0.05


def test_word_timestamps_do_what_the_help_says(run_cli, eval_root, tmp_path):
    """--word-timestamps: per-word times and probabilities in the json, a 'words' list in each segment."""
    code, out, err = run_cli(eval_root / "whisper.cpp/jfk.wav", "-o", tmp_path, "-f", "json", "--word-timestamps", "-q")
    assert code == 0, err
    segs = json.loads((tmp_path / "jfk.json").read_text())["segments"]
    words = [w for s in segs for w in s["words"]]
    assert len(words) == 22 and all(set(w) == {"word", "start", "end", "probability", "overlap"} for w in words)
    assert all(0 < w["probability"] <= 1 and w["start"] <= w["end"] for w in words)


def test_several_inputs_and_stdout(run_cli, eval_root, tmp_path):
    first, second = eval_root / "whisper.cpp/jfk.wav", eval_root / "mfa/common_voice_en_22058264.mp3"
    code, out, err = run_cli(first, second, "-o", tmp_path, "-f", "srt,json")
    assert code == 0, err
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["jfk.srt", "jfk.json", "common_voice_en_22058264.srt", "common_voice_en_22058264.json"]
    )
    assert "RTF" in err
    # each transcript under a `tail`-style header naming its file, in input order
    head1, head2 = f"==> {first} <==\n", f"\n==> {second} <==\n"
    assert out.startswith(head1) and head2 in out, out
    assert "fellow Americans" in out[: out.index(head2)] and "fellow Americans" not in out[out.index(head2):]


def _whisper_clock(seconds: float) -> str:
    """openai-whisper's format_timestamp (no hours under an hour), written out here."""
    ms = round(seconds * 1000)
    return f"{ms // 60000:02d}:{ms // 1000 % 60:02d}.{ms % 1000:03d}"


def test_verbose_prints_segments_as_they_become_final(run_cli, eval_root, tmp_path, monkeypatch):
    """--verbose (openai-whisper's --verbose True): each segment with its times on stdout while the file
    is still being transcribed (its outputs not yet written), the same transcript as without it (tiny.en:
    what is printed when does not depend on the model); with
    --diarize, once the file is done, with its speakers; a folder refuses it."""
    import specwhisper.serving.cli.main as cli
    from specwhisper.evaluation.transcripts import build_long_file

    talk = build_long_file("dense", tmp_path / "in", 30, seed=0)  # two chunks, printed as they are decoded
    printed, print_timed = [], cli._print_timed
    json_out = tmp_path / "v" / f"{talk.path.stem}.json"
    monkeypatch.setattr(cli, "_print_timed", lambda segs: (printed.append((len(segs), json_out.exists())), print_timed(segs)))
    code, out, err = run_cli(talk.path, "-o", tmp_path / "v", "-f", "json", "--batch-size", "1", "--verbose", "-m", "tiny.en")
    assert code == 0, err
    data = json.loads(json_out.read_text())
    segments = data["segments"]
    assert data["model"]["asr"] == "tiny.en"
    # openai-whisper's line (transcribe.py: f"[{start} --> {end}] {text}", its text starting with a space)
    assert out.splitlines() == [f"[{_whisper_clock(s['start'])} --> {_whisper_clock(s['end'])}]  {s['text'].strip()}"
                                for s in segments]
    assert len(printed) >= 2 and not any(written for _, written in printed), printed  # in runs, before the end
    code, _, err = run_cli(talk.path, "-o", tmp_path / "q", "-f", "json", "--batch-size", "1", "-q", "-m", "tiny.en")
    assert code == 0 and json.loads((tmp_path / "q" / json_out.name).read_text())["segments"] == segments

    code, out, err = run_cli(eval_root / "whisper.cpp/jfk.wav", "-o", tmp_path / "d", "-f", "txt", "--diarize",
                             "--verbose", "True")
    assert code == 0, err
    assert re.fullmatch(r"(\[00:\d\d\.\d{3} --> 00:\d\d\.\d{3}\] \[SPEAKER_00\]: \S.*\n)+", out), out
    code, out, err = run_cli(tmp_path / "in", "-o", tmp_path / "f", "--verbose")
    assert code == 2 and "--verbose prints files' segments" in _one_line_error(err)


def test_no_drafter_is_said_so(run_cli, eval_root, tmp_path):
    """Plain decoding (the session pipeline drafts nothing): 'no drafter', not 'acceptance 0%'."""
    code, out, err = run_cli(eval_root / "whisper.cpp/jfk.wav", "-o", tmp_path, "-f", "json", "--draft", "none")
    assert code == 0, err
    spec = json.loads((tmp_path / "jfk.json").read_text())["speculative"]
    assert spec["drafted_tokens"] == 0 and spec["drafter_ran"] is False
    assert spec["acceptance_rate"] is None and spec["tokens_per_target_pass"] is None
    assert "no drafter" in err and "acceptance" not in err and "tokens/target pass" not in err


def _ffmpeg(*args):
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *map(str, args)], check=True)


@pytest.mark.parametrize("container", ["m4a", "mp4"])
def test_ffmpeg_containers(run_cli, eval_root, tmp_path, container):
    src = eval_root / "whisper.cpp/jfk.wav"
    dst = tmp_path / f"jfk.{container}"
    if container == "mp4":  # a video file: a colour video stream plus the speech
        _ffmpeg("-f", "lavfi", "-i", "color=c=blue:s=64x64:d=11", "-i", src, "-shortest", "-c:v", "libx264", "-c:a", "aac", dst)
    else:
        _ffmpeg("-i", src, "-c:a", "aac", dst)
    code, out, err = run_cli(dst, "-o", tmp_path / "out", "-f", "json", "-q")
    assert code == 0, err
    assert wer([JFK_REF], [json.loads((tmp_path / "out/jfk.json").read_text())["text"]]) <= 0.1


def test_stereo_44k_and_8k_inputs(run_cli, eval_root, tmp_path):
    audio, rate = sf.read(eval_root / "openai-whisper/jfk.flac")  # 44.1 kHz stereo
    assert rate == 44100 and audio.ndim == 2
    code, out, err = run_cli(eval_root / "openai-whisper/jfk.flac", "-o", tmp_path, "-f", "txt", "-q")
    assert code == 0 and wer([JFK_REF], [(tmp_path / "jfk.txt").read_text()]) <= 0.05
    mono = audio.mean(axis=1)

    sf.write(tmp_path / "jfk8k.wav", soxr.resample(mono, 44100, 8000), 8000)
    code, out, err = run_cli(tmp_path / "jfk8k.wav", "-o", tmp_path, "-f", "txt", "-q")
    assert code == 0 and wer([JFK_REF], [(tmp_path / "jfk8k.txt").read_text()]) <= 0.15


@pytest.mark.parametrize("live", [False, True])
def test_silence_is_an_empty_transcript_not_an_error(run_cli, tmp_path, live):
    sf.write(tmp_path / "silence.wav", np.zeros(16000 * 5, dtype=np.float32), 16000)
    code, out, err = run_cli(tmp_path / "silence.wav", "-o", tmp_path, "-f", "json,txt", *(["--live"] if live else []))
    assert code == 0, err
    assert json.loads((tmp_path / "silence.json").read_text())["segments"] == []  # live read "you" without the no-speech rule
    assert (tmp_path / "silence.txt").read_text().strip() == ""
    assert live or "no speech" in out


def _bad_inputs(tmp_path):
    (tmp_path / "empty.wav").write_bytes(b"")
    (tmp_path / "notes.wav").write_text("this is not audio at all\n" * 20)
    (tmp_path / "random.mp3").write_bytes(np.random.default_rng(0).integers(0, 256, 5000, dtype=np.uint8).tobytes())
    with wave.open(str(tmp_path / "zero.wav"), "wb") as w:  # a valid header with no samples
        w.setnchannels(1), w.setsampwidth(2), w.setframerate(16000)
    sf.write(tmp_path / "good.wav", np.zeros(16000, dtype=np.float32), 16000)
    sf.write(tmp_path / "short.wav", np.random.default_rng(0).normal(0, 0.1, 8000).astype(np.float32), 16000)
    data = (tmp_path / "good.wav").read_bytes()
    (tmp_path / "truncated.flac").write_bytes(b"fLaC" + data[4:200])
    sf.write(tmp_path / "lowrate.wav", np.zeros(400, dtype=np.int16), 400, subtype="PCM_16")
    (tmp_path / "no-audio").mkdir(exist_ok=True)  # a folder is a batch input (tests/test_batch.py)
    for a, b in (("loop-a.wav", "loop-b.wav"), ("loop-b.wav", "loop-a.wav")):
        if not (tmp_path / a).is_symlink():
            (tmp_path / a).symlink_to(tmp_path / b)
    subprocess.run(["ffmpeg", "-loglevel", "error", "-y", "-f", "lavfi", "-i", "testsrc=duration=1:size=32x32:rate=5",
                    "-pix_fmt", "yuv420p", str(tmp_path / "silent-video.mp4")], check=True)
    return {
        "missing": ([tmp_path / "nope.wav"], "file not found"),
        "device_file": (["/dev/null"], "/dev/null: not a regular file (a device, pipe or socket)"),
        "video_without_sound": ([tmp_path / "silent-video.mp4"], "silent-video.mp4: the file has no audio stream"),
        "directory": ([tmp_path / "no-audio"], "no input files found"),
        "empty": ([tmp_path / "empty.wav"], "empty"),
        "text": ([tmp_path / "notes.wav"], "not a readable audio file"),
        "random": ([tmp_path / "random.mp3"], "not a readable audio file"),
        "zero_samples": ([tmp_path / "zero.wav"], "empty"),
        "truncated": ([tmp_path / "truncated.flac"], "audio"),
        "low_rate": ([tmp_path / "lowrate.wav"], "sample rate"),
        "too_long": ([tmp_path / "good.wav", "--max-duration", "0.5"], "over the limit"),
        "bad_format": ([tmp_path / "good.wav", "-f", "docx"], "unknown output format"),
        "bad_batch": ([tmp_path / "good.wav", "--batch-size", "0"], "--batch-size: must be between 1 and 64, got 0"),
        "bad_language": ([tmp_path / "good.wav", "--language", "xx"], "unknown language"),
        "bad_speakers": ([tmp_path / "good.wav", "--min-speakers", "3", "--max-speakers", "2"], "min-speakers"),
        "bad_max_change": ([tmp_path / "good.wav", "--postedit-max-change", "2"], "between 0 and 1"),
        "not_a_number": ([tmp_path / "good.wav", "--batch-size", "many"], "--batch-size: must be a whole number"),
        "unknown_option": ([tmp_path / "good.wav", "--frobnicate"], "unrecognized arguments"),
        "bad_threads": ([tmp_path / "good.wav", "--threads", "-1"], "--threads: must be >= 0, got -1"),  # 0: the peers' default
        "bad_device": ([tmp_path / "good.wav", "--device", "tpu"], "unknown device 'tpu'"),
        "missing_gpu": ([tmp_path / "good.wav", "--device", "cuda:99"], "device 'cuda:99'"),  # no GPU, or not 100
        "bad_dtype": ([tmp_path / "good.wav", "--dtype", "float64"], "--dtype: must be one of auto, float32, float16, bfloat16, got 'float64'"),
        "half_on_cpu": ([tmp_path / "good.wav", "--device", "cpu", "--dtype", "float16"], "float16 needs a gpu"),
        "int8_in_bfloat16": ([tmp_path / "good.wav", "-m", "base:int8", "--dtype", "bfloat16"], "int8 weights take float32"),
        "rttm_without_diarize": ([tmp_path / "good.wav", "-f", "srt,rttm"], "-f rttm needs --diarize"),
        "peer_unsupported": ([tmp_path / "good.wav", "--return_char_alignments"], "--return_char_alignments (openai-whisper/whisperx) is not supported"),
        "peer_bad_bool": ([tmp_path / "good.wav", "--word_timestamps", "yes"], "must be true or false"),
        "code_the_model_lacks": ([tmp_path / "good.wav", "-l", "xx"], "unknown language code 'xx'"),
        "bad_clips": ([tmp_path / "good.wav", "--clip-timestamps", "5,3"], "--clip-timestamps: each clip must end after it starts, got 5,3"),
        "peer_bad_clips": ([tmp_path / "good.wav", "--clip_timestamps", "0,10,5,20"], "clips must be in order and not overlap: 5 starts before 10"),
        "speakers_outside_range": ([tmp_path / "good.wav", "--diarize", "--num-speakers", "2", "--min-speakers", "3"], "outside"),
        "known_speaker_missing": ([tmp_path / "good.wav", "--known-speakers", f"ann={tmp_path / 'nope.wav'}"],
                                  "known speaker 'ann'"),
        "known_speaker_too_short": ([tmp_path / "good.wav", "--known-speakers", f"ann={tmp_path / 'short.wav'}"],
                                    "the reference clip is 0.5 s (give 2 to 30 s of the voice alone)"),
        "known_speaker_no_file": ([tmp_path / "good.wav", "--known-speakers", "ann"], "give name=file,name=file"),
        "link_loop": ([tmp_path / "loop-a.wav"], "loop-a.wav: a link to nothing (or a loop of links)"),
        "cache_dir_a_file": ([tmp_path / "good.wav", "--cache-dir", tmp_path / "good.wav"],
                             f"--cache-dir: must be a folder, and {tmp_path / 'good.wav'} is a file"),
    }


CASES = ["missing", "directory", "empty", "text", "random", "zero_samples", "truncated", "low_rate", "too_long",
         "bad_format", "bad_batch", "bad_language", "bad_speakers", "bad_max_change", "not_a_number", "unknown_option",
         "bad_threads", "bad_device", "missing_gpu", "bad_dtype", "half_on_cpu", "int8_in_bfloat16",
         "rttm_without_diarize", "peer_unsupported", "peer_bad_bool", "code_the_model_lacks", "speakers_outside_range",
         "bad_clips", "peer_bad_clips", "known_speaker_missing", "known_speaker_too_short", "known_speaker_no_file",
         "link_loop", "cache_dir_a_file"]
FAILED_FILES = {"missing", "empty", "text", "random", "zero_samples", "truncated", "low_rate", "too_long",
                "link_loop"}  # exit 1; the rest are options


@pytest.mark.parametrize("case", CASES)
def test_bad_input_one_line_error(cli_run, tmp_path, case):
    argv, expected = _bad_inputs(tmp_path)[case]
    code, out, err = cli_run(*argv, "-o", tmp_path / "out", "-q")
    assert code == (1 if case in FAILED_FILES else 2), (code, err)  # docs/transcription.md: 2 for bad options
    assert "Traceback" not in out, out  # the error goes to stderr alone
    line = _one_line_error(err)
    assert expected in line.lower(), line


def test_bad_file_among_good_ones_keeps_the_good_results(run_cli, eval_root, tmp_path):
    (tmp_path / "broken.wav").write_text("garbage")
    code, out, err = run_cli(tmp_path / "broken.wav", eval_root / "whisper.cpp/jfk.wav", "-o", tmp_path / "out", "-f", "txt", "-q")
    assert code == 1
    assert "broken.wav" in _one_line_error(err)
    assert wer([JFK_REF], [(tmp_path / "out/jfk.txt").read_text()]) <= 0.05


def test_a_file_name_with_a_newline_is_shown_escaped_on_one_line(run_cli, eval_root, tmp_path):
    """The name a message shows keeps its newline as \\n: the error says the whole name and the reason, the
    status line stays one line; the outputs keep the real name."""
    named = tmp_path / "jf\nk.wav"
    shutil.copy(eval_root / "whisper.cpp/jfk.wav", named)
    code, _, err = run_cli(tmp_path / "miss\ning.wav", named, "-o", tmp_path / "out", "-f", "txt")
    assert code == 1 and f"transcribe: error: {tmp_path}/miss\\ning.wav: file not found\n" in err, err
    status = [line for line in err.splitlines() if "jf" in line and "error" not in line]
    assert len(status) == 1 and status[0].startswith(f"transcribe: {tmp_path}/jf\\nk.wav: 11.0 s audio") and \
        status[0].endswith("wrote jf\\nk.txt"), err
    assert wer([JFK_REF], [(tmp_path / "out" / "jf\nk.txt").read_text()]) <= 0.05
    (tmp_path / "ba\nd.json").write_text("{")  # a transcript to render again: its errors name it the same way
    code, _, err = run_cli(tmp_path / "ba\nd.json", "-o", tmp_path / "out", "-f", "txt")
    assert code == 1 and err == f"transcribe: error: {tmp_path}/ba\\nd.json: not a readable json file (JSONDecodeError)\n", err


def test_a_wav_cut_short_is_transcribed_with_a_warning(run_cli, eval_root, tmp_path):
    """A WAV whose download stopped a third of the way: its header still says 11 s (libsndfile and ffprobe
    both say 3.7): what is there is transcribed, and one warning line says the file is shorter than its header."""
    data = (eval_root / "whisper.cpp/jfk.wav").read_bytes()
    (tmp_path / "cut.wav").write_bytes(data[: len(data) // 3])
    code, out, err = run_cli(tmp_path / "cut.wav", "-o", "-", "-f", "txt", "-q")
    assert code == 0 and out.lower().startswith("and so my fellow americans"), out
    assert err == f"transcribe: warning: {tmp_path / 'cut.wav'}: its header says 11.0 s of audio, the file holds 3.7 s (cut " \
                  "short?): transcribing what is there\n", err
    from specwhisper.audio.probe import wav_header_seconds

    for whole in sorted(eval_root.rglob("*.wav")):  # every whole WAV's header says what libsndfile reads: no warning
        assert wav_header_seconds(whole) == pytest.approx(sf.info(str(whole)).duration, abs=1e-3), whole


def test_a_flac_or_mp3_cut_short_or_a_flac_written_to_a_pipe_is_read(eval_root, tmp_path, caplog):
    """A FLAC download stopped a third of the way: libsndfile loses sync in its first block (all 11 s of it);
    what is there is read (ffmpeg's decode of it), with the cut-short warning. A FLAC ffmpeg wrote to a pipe
    has no length in its header (libsndfile says 2**63 - 1 frames, then fails to seek): read whole."""
    from specwhisper.audio.loading import check_length, load_audio

    jfk = eval_root / "whisper.cpp/jfk.wav"
    whole, _ = sf.read(str(jfk), dtype="float32")
    sf.write(str(tmp_path / "whole.flac"), whole, 16000, subtype="PCM_16")
    data = (tmp_path / "whole.flac").read_bytes()
    (tmp_path / "cut.flac").write_bytes(data[: len(data) // 3])
    with caplog.at_level("WARNING", logger="specwhisper.audio.loading"):
        cut = load_audio(tmp_path / "cut.flac")
    assert 3.0 < len(cut) / 16000 < 4.0 and np.array_equal(cut, whole[: len(cut)])  # lossless up to the cut
    assert [r.getMessage() for r in caplog.records] == [
        f"{tmp_path / 'cut.flac'}: its header says 11.0 s of audio, the file holds {len(cut) / 16000:.1f} s (cut short?): "
        "transcribing what is there"]
    piped = subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", str(jfk), "-f", "flac", "-"], capture_output=True,
                           check=True).stdout
    (tmp_path / "piped.flac").write_bytes(piped)
    assert check_length(tmp_path / "piped.flac", 60.0) is None  # its length is unknown until decoded
    assert np.array_equal(load_audio(tmp_path / "piped.flac"), whole)
    for xing in (1, 0):  # an MP3 cut short: warned where its Xing header counts the frames; without one,
        # libsndfile's length is an estimate from the file's size, of what is there
        subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(jfk), "-write_xing", str(xing), str(tmp_path / "t.mp3")],
                       check=True)
        data = (tmp_path / "t.mp3").read_bytes()
        (tmp_path / "t.mp3").write_bytes(data[: len(data) // 3])
        caplog.clear()
        with caplog.at_level("WARNING", logger="specwhisper.audio.loading"):
            held = len(load_audio(tmp_path / "t.mp3")) / 16000
        assert 3.0 < held < 4.0 and [r.getMessage() for r in caplog.records] == ([
            f"{tmp_path / 't.mp3'}: its header says 11.0 s of audio, the file holds {held:.1f} s (cut short?): "
            "transcribing what is there"] if xing else []), xing
    # a VBR MP3 without a frame count, whole: libsndfile's estimate (96.7 s of 11) is neither a limit's claim nor a header's
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", "-i", str(jfk), "-q:a", "0", "-write_xing", "0", str(tmp_path / "vbr.mp3")],
                   check=True)
    assert sf.info(str(tmp_path / "vbr.mp3")).duration > 60
    caplog.clear()
    with caplog.at_level("WARNING", logger="specwhisper.audio.loading"):
        assert abs(len(load_audio(tmp_path / "vbr.mp3", max_seconds=30.0)) / 16000 - 11.0) < 0.2
    assert check_length(tmp_path / "vbr.mp3", 30.0) < 30.0 and not caplog.records  # ffprobe's estimate, 10.4 s


def test_console_script_errors_without_traceback(eval_root, tmp_path):
    """The installed entry point, in a fresh process: a bad model and a missing file."""
    jfk = str(eval_root / "whisper.cpp/jfk.wav")
    for argv, expected in (([str(tmp_path / "missing.wav")], "file not found"), ([jfk, "--model", "./no/such/model", "-o", str(tmp_path)], "model")):
        proc = subprocess.run([sys.executable, "-m", "specwhisper.serving.cli.main", *argv], capture_output=True, text=True, timeout=300)
        assert proc.returncode != 0
        assert expected in _one_line_error(proc.stderr).lower()
    with open("/dev/full", "w") as full:  # standard output that takes nothing
        proc = subprocess.run([sys.executable, "-m", "specwhisper.serving.cli.main", jfk, "-m", "tiny.en", "-o", "-", "-f", "txt"],
                              stdout=full, stderr=subprocess.PIPE, text=True, timeout=300)
    assert proc.returncode == 1 and _one_line_error(proc.stderr) == \
        f"transcribe: error: {jfk}: cannot write outputs to standard output (No space left on device)", proc.stderr


def test_mistakes_are_told_before_torch_is_imported(eval_root, tmp_path):
    """--help, a missing file, an empty file, a bad option value, an unknown format and a transcript
    written again in other formats: all answered in a fresh process that never imports torch or
    transformers (they take five seconds to import here)."""
    jfk, transcript = eval_root / "whisper.cpp/jfk.wav", REPO / "tests/data/subtitles/english.json"
    (tmp_path / "empty.wav").write_bytes(b"")
    code = f"""
import contextlib, io, sys
from specwhisper.serving.cli.main import main
def run(*argv):
    try:
        return main(list(argv))
    except SystemExit as exc:  # the parser's answers: --help, a value out of range
        return exc.code
with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()):
    codes = [run("--help"), run({str(tmp_path / "missing.wav")!r}), run({str(tmp_path / "empty.wav")!r}),
             run({str(jfk)!r}, "--batch-size", "0"),
             run({str(jfk)!r}, "-f", "docx"), run({str(transcript)!r}, "-f", "srt", "-o", {str(tmp_path)!r})]
print(codes, [m for m in ("torch", "transformers") if m in sys.modules], err.getvalue().count("error:"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["[0,", "1,", "1,", "2,", "2,", "0]", "[]", "4"], proc.stdout
    assert (tmp_path / "english.srt").read_text().startswith("1\n00:00:00,000 --> ")


def test_progress_bars_draw_on_a_terminal_without_a_size(eval_root, tmp_path):
    """On a terminal (here a pty that reports 0 x 0, where tqdm alone draws nothing) each stage gets a bar
    (tiny.en: the stages are those of every model)."""
    import os
    import pty
    import threading

    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def drain():
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    proc = subprocess.run(
        [sys.executable, "-m", "specwhisper.serving.cli.main", str(eval_root / "whisper.cpp/jfk.wav"), "-o", str(tmp_path), "-f", "txt",
         "-m", "tiny.en"],
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=slave, timeout=600,
    )
    os.close(slave)
    reader.join(timeout=10)
    os.close(master)
    err = b"".join(chunks).decode("utf-8", "replace")
    assert proc.returncode == 0, err
    assert re.search(r"jfk\.wav vad: +\d+%\|", err) and re.search(r"jfk\.wav transcribe: +100%\|", err), err[-2000:]
    assert "Traceback" not in err


def test_print_progress_into_a_log_writes_lines(eval_root, tmp_path):
    """WhisperX's ``--print_progress True`` where stderr is a file (a log, ``docker logs``): plain lines per
    stage and tenth, no bar and no carriage returns."""
    proc = subprocess.run(
        [sys.executable, "-m", "specwhisper.serving.cli.main", str(eval_root / "whisper.cpp/jfk.wav"), "-o", str(tmp_path), "-f", "txt",
         "-m", "tiny.en", "--print_progress", "True"],
        stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stderr.splitlines()
    assert "jfk.wav vad: 100%" in lines and lines.count("jfk.wav transcribe: 100%") == 1, proc.stderr
    assert "\r" not in proc.stderr and "|" not in proc.stderr


# -- --help, the README and the peers' spellings ---------------------------------------------------

def _visible_actions():
    import argparse

    from specwhisper.serving.cli.args import build_parser

    return [a for a in build_parser()._actions if a.help is not argparse.SUPPRESS]


def test_every_option_has_help():
    missing = [a.option_strings or a.dest for a in _visible_actions() if not (a.help or "").strip()]
    assert not missing, missing


def test_draft_help_lists_every_drafter_form():
    from specwhisper.serving.cli.args import build_parser

    text = " ".join(build_parser().format_help().split()).replace("- ", "-")  # a wrap at a hyphen
    for form in ("auto", "none", "ngram", "early-exit[:k]", "early-exit:k:raw", "MODEL", "MODEL:int8"):
        assert form in text, form


def test_peer_spellings_are_documented_and_parsed(monkeypatch, capsys, caplog):
    """Every peer spelling the parser takes or refuses is in the CLI reference (docs/cli.md, generated;
    tests/test_options.py checks it is current and names every flag --help shows), and they parse to our
    options."""
    from pathlib import Path

    from specwhisper.pipeline.options import OPTIONS, REFUSED
    from specwhisper.serving.cli.args import PEER_MEANINGS, parse_args

    reference = (Path(__file__).resolve().parents[1] / "docs" / "cli.md").read_text()
    peers = [f for o in OPTIONS for f in o.peer_flags] + [f for f, *_ in PEER_MEANINGS] + list(REFUSED)
    assert len(peers) >= 20  # and --verbose, one of ours (three refused ones are options now, spelled below)
    for option in peers:
        assert f"`{option}`" in reference, option
    a = parse_args(["x.wav", "--output_format", "srt", "--output_dir", "o", "--word_timestamps", "False",
                    "--initial_prompt", "Hi.", "--condition_on_previous_text", "True", "--beam_size", "5",
                    "--no_speech_threshold", "None", "--verbose", "False", "--language", "German", "--fp16", "False"])
    assert (a.formats, str(a.output_dir), a.word_timestamps, a.initial_prompt, a.condition_on_previous_text) == (
        "srt", "o", False, "Hi.", True)
    assert (a.beam_size, a.no_speech_threshold, a.quiet, a.language, a.dtype) == (5, None, True, "de", "float32")
    x = parse_args(["x.wav", "--diarize", "--min_speakers", "2", "--max_speakers", "4", "--hf_token", "t",
                    "--compute_type", "int8", "--batch_size", "4", "--vad_onset", "0.4", "--no_align", "--speaker_embeddings"])
    assert (x.diarize, x.min_speakers, x.max_speakers, x.hf_token, x.model, x.batch_size, x.vad_threshold,
            x.word_timestamps, x.speaker_embeddings) == (True, 2, 4, "t", "base:int8", 4, 0.4, False, True)
    w = parse_args(["x.wav", "--suppress_numerals", "--segment_resolution", "sentence", "--suppress_tokens=-1,5"])
    assert (w.suppress_numerals, w.segment_resolution, w.suppress_tokens) == (True, "sentence", "-1,5")
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    y = parse_args(["x.wav", "--print_progress", "True", "--log-level", "info", "--model_cache_only", "True",
                    "--vad_method", "silero"])  # WhisperX's
    assert (y.log_level, y.quiet, os.environ["HF_HUB_OFFLINE"]) == ("info", False, "1")
    with pytest.raises(SystemExit):
        parse_args(["x.wav", "--vad_method", "pyannote"])
    assert "the VAD here is silero-vad ('silero'), not 'pyannote'" in _one_line_error(capsys.readouterr().err)
    d = parse_args(["x.wav"])  # the hidden spellings change no default
    assert (d.formats, d.word_timestamps, d.quiet, d.dtype, d.model, d.vad_threshold) == ("all", None, False, "auto", "base", 0.5)
    assert d.verbose is None and parse_args(["x.wav", "--verbose"]).verbose is True
    assert parse_args(["x.wav", "--verbose", "True"]).verbose is True
    # the peers' spelled-out defaults: --device_index 0 is auto's own GPU (a CPU machine stays on the CPU), --threads 0
    # torch's count, --best_of None one sample (openai's DecodingOptions)
    z = parse_args(["x.wav", "--device_index", "0", "--threads", "0", "--best_of", "None"])
    assert (z.device, z.threads, z.best_of) == ("auto", None, None)
    assert parse_args(["x.wav", "--device_index", "1"]).device == "cuda:1"
    from specwhisper.pipeline.options import run_options

    assert run_options({"best_of": None}).decode.quality.best_of == 1
    with pytest.raises(ValueError, match="they need the word timestamps that were turned off"):  # as WhisperX refuses
        run_options({"word_timestamps": False, "highlight_words": True})
    import specwhisper.hardware.device as device
    import specwhisper.serving.cli.main as cli

    # WhisperX's --compute_type int8 on a GPU: float16 weights there, one warning (no GPU needed to check the choice)
    monkeypatch.setattr(device, "resolve_device", lambda name: "cuda")
    g = parse_args(["x.wav", "--compute_type", "int8"])
    with caplog.at_level("WARNING", logger="specwhisper"):
        cli._check_device(g)
    assert (g.model, g.dtype) == ("base", "float16")
    assert [r.getMessage() for r in caplog.records] == ["--compute_type int8: int8 weights run on the CPU only here; "
                                                        "float16 weights on the GPU"]


def test_version(capsys):
    from specwhisper.serving.cli.args import build_parser

    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--version"])
    assert exc.value.code == 0 and re.fullmatch(r"transcribe \d+\.\d+\.\d+\n", capsys.readouterr().out)


def test_rttm_without_diarize_is_refused_before_models_load(monkeypatch, capsys, tmp_path):
    import specwhisper.pipeline.core
    import specwhisper.serving.cli.main as cli

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", lambda config: pytest.fail("a model was loaded"))
    sf.write(tmp_path / "a.wav", np.zeros(16000, dtype=np.float32), 16000)
    assert cli.main([str(tmp_path / "a.wav"), "-o", str(tmp_path / "out"), "-f", "rttm"]) == 2
    assert "rttm needs --diarize" in _one_line_error(capsys.readouterr().err)
    assert not (tmp_path / "out").exists()


def test_contradictions_failed_files_and_warnings_say_so(run_cli, eval_root, tmp_path):
    jfk = eval_root / "whisper.cpp/jfk.wav"
    for argv, fragment in [(["--verbose", "-q"], "--verbose prints every segment and --quiet prints nothing"),
                           (["--verbose", "--live"], "--live prints the confirmed text as it comes"),
                           (["--num-speakers", "2"], "--num-speakers needs --diarize")]:
        code, out, err = run_cli(jfk, "-o", tmp_path, *argv)
        assert code == 2 and fragment in _one_line_error(err), err
    (tmp_path / "empty.wav").write_bytes(b"")  # passes the check before the model loads, fails to decode
    code, out, err = run_cli(jfk, tmp_path / "empty.wav", "-o", tmp_path / "o", "--verbose")
    assert code == 1 and out.startswith(f"==> {jfk} <==\n[00:") and "empty.wav" not in out, out  # no header for it
    assert "empty.wav: the file is empty" in err
    code, out, err = run_cli(jfk, "--clip-timestamps", "60,90", "-o", tmp_path / "c", "-f", "txt")
    lines = err.strip().splitlines()
    assert lines[0] == "transcribe: warning: clip_timestamps: no clip is within the 11.0 s of audio: nothing to transcribe"
    assert "language not detected" in lines[-1] and "(auto: )" not in lines[-1], lines
    code, out, err = run_cli(jfk, "--clip-timestamps", "60,90", "-o", tmp_path / "e", "-f", "txt", "--log-level", "error")
    assert code == 0 and "warning" not in err, err  # WhisperX's --log-level: warnings hidden at error


def test_detect_language_prints_each_files_language_and_writes_nothing(run_cli, eval_root, tmp_path):
    """whisper.cpp's --detect-language: a line per file (a tab between the file, the code and the probability),
    the language transcription finds; a missing file is one line on stderr and the others still print."""
    german, jfk = eval_root / "cuttledoc-fleurs/fleurs-de-000.ogg", eval_root / "whisper.cpp/jfk.wav"
    code, out, err = run_cli("--detect-language", german, jfk, tmp_path / "missing.wav", "-o", tmp_path)
    rows = [line.split("\t") for line in out.splitlines()]
    assert code == 1 and [(r[0], r[1]) for r in rows] == [(str(german), "de"), (str(jfk), "en")], out
    assert all(0.5 <= float(r[2]) <= 1 and len(r) == 3 for r in rows), out
    assert err.count("\n") == 1 and "missing.wav" in err and list(tmp_path.iterdir()) == []
    for clash in (["--live"], ["-l", "en"], ["--diarize"]):
        code, out, err = run_cli("--detect-language", jfk, *clash)
        assert code == 2 and err.count("\n") == 1 and "does not go with it" in err and out == "", err


class _Stdin:
    """Standard input holding ``data`` (a pipe, or a terminal when ``tty``)."""

    def __init__(self, data: bytes = b"", tty: bool = False):
        import io

        self.buffer, self.tty = io.BytesIO(data), tty

    def isatty(self) -> bool:
        return self.tty


def test_audio_piped_in_and_subtitles_piped_out(run_cli, eval_root, tmp_path, monkeypatch):
    """``ffmpeg ... | transcribe - -f srt -o - > talk.srt``: mp3 bytes on standard input, the srt alone on
    standard output, the same bytes as the srt written from the file itself; nothing left in the folder."""
    mp3 = tmp_path / "jfk.mp3"
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-i", eval_root / "whisper.cpp/jfk.wav", mp3], check=True)
    code, _, err = run_cli(mp3, "-m", "tiny.en", "-f", "srt", "-o", tmp_path / "from-file", "-q")
    assert code == 0, err
    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setattr(sys, "stdin", _Stdin(mp3.read_bytes()))
    code, out, err = run_cli("-", "-m", "tiny.en", "-f", "srt", "-o", "-")
    assert code == 0, err
    said = " ".join(line for line in out.splitlines() if line and not line.isdigit() and "-->" not in line)
    assert out == (tmp_path / "from-file/jfk.srt").read_text() and wer([JFK_REF], [said]) < 0.1, out
    assert "<stdin>" in err and "wrote srt to standard output" in err and not list(work.iterdir()), (err, list(work.iterdir()))
    monkeypatch.setattr(sys, "stdin", _Stdin(mp3.read_bytes()))  # into a folder: named stdin, its source <stdin>
    code, _, err = run_cli("-", "-m", "tiny.en", "-f", "txt,json", "-o", tmp_path / "out", "-q")
    assert code == 0 and sorted(p.name for p in (tmp_path / "out").iterdir()) == ["stdin.json", "stdin.txt"], err
    assert json.loads((tmp_path / "out/stdin.json").read_text())["source"] == "<stdin>"


@pytest.mark.parametrize(("stdin", "argv", "code", "fragment"), [
    (_Stdin(b""), ["-", "-f", "txt", "-o", "-"], 1, "<stdin>: the file is empty"),
    (_Stdin(b"garbage"), ["-", "-f", "txt", "-o", "-"], 1, "<stdin>: not a readable audio file"),
    (_Stdin(b"", tty=True), ["-", "-f", "txt"], 2, "pipe the audio in"),
    (_Stdin(b"x"), ["-", "JFK"], 2, "must be the only input"),
    (_Stdin(b"x"), ["-", "--live", "-o", "-"], 2, "where --live prints too"),
    (_Stdin(b"", tty=True), ["-", "--live"], 2, "pipe the audio in"),
    (_Stdin(b"x"), ["-", "--align-text", "-"], 2, "not both"),
    (None, ["JFK", "-o", "-"], 2, "one format to standard output, got txt, srt, vtt, json, tsv"),
    (None, ["JFK", "JFK2", "-f", "srt", "-o", "-"], 2, "give one input"),
    (None, ["JFK", "-f", "srt", "-o", "-", "--verbose"], 2, "where --verbose prints too"),
])
def test_standard_input_and_output_mistakes(run_cli, eval_root, tmp_path, monkeypatch, stdin, argv, code, fragment):
    """One line each, before any model runs (the empty and unreadable input: as a file's, named <stdin>)."""
    jfk = str(eval_root / "whisper.cpp/jfk.wav")
    monkeypatch.chdir(tmp_path)
    if stdin is not None:
        monkeypatch.setattr(sys, "stdin", stdin)
    got, out, err = run_cli(*[{"JFK": jfk, "JFK2": str(eval_root / "openai-whisper/jfk.flac")}.get(a, a) for a in argv], "-m", "tiny.en")
    assert got == code and out == "" and fragment in _one_line_error(err), (got, out, err)
    assert not list(tmp_path.iterdir())  # no folder named -, no file


def test_a_json_rendered_to_standard_output(run_cli, tmp_path, monkeypatch):
    """``transcribe talk.json -f srt -o -``: the srt a folder would get, on standard output, no model run."""
    transcript = REPO / "tests/data/subtitles/english.json"
    assert run_cli(transcript, "-f", "srt", "-o", tmp_path, "-q")[0] == 0
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(transcript, "-f", "srt", "-o", "-")
    assert code == 0 and out == (tmp_path / "english.srt").read_text() and "standard output" in err, err
