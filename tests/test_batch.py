"""Batch folders on real audio: cross-file batching is exact, the job database resumes, skips,
redoes changed files and retries failed ones, bad folders give one-line errors, a killed batch
resumes with every file done exactly once, and a local 2-worker Ray runs the same batch."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from specwhisper.audio.loading import load_audio
from specwhisper.asr.options import DecodeOptions
from specwhisper.evaluation.transcripts import english_set, wer
from specwhisper.batch.jobs import DB_NAME

REPO = Path(__file__).resolve().parent.parent
JFK_REF = "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."


LONG = "interview-" + "y" * 240  # a file name's stem near the file system's 255 bytes


def _rows(out: Path) -> dict[str, dict]:
    """The job database's rows by input path under the folder; {} while it does not exist yet."""
    if not (out / DB_NAME).exists():
        return {}
    con = sqlite3.connect(out / DB_NAME, timeout=30)
    con.row_factory = sqlite3.Row
    try:
        return {r["rel"]: dict(r) for r in con.execute("SELECT * FROM files")}
    except sqlite3.OperationalError:  # the table is not created yet
        return {}
    finally:
        con.close()


def _error_lines(err: str) -> list[str]:
    assert "Traceback" not in err
    return [line for line in err.splitlines() if line.startswith("transcribe: error:")]


def _copy(eval_root: Path, folder: Path, files: dict[str, str]) -> Path:
    """files: name under ``folder`` -> eval file (or raw text for a bad file, prefixed 'text:')."""
    for name, src in files.items():
        dest = folder / name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src.startswith("text:"):
            dest.write_text(src[5:])
        else:
            shutil.copy(eval_root / src, dest)
    return folder


def _assert_outputs_valid(out: Path, rows: dict[str, dict], killed: bool = False) -> None:
    """Every done file's outputs exist, parse, and agree with each other; no temp file is left
    (unless the batch was just killed: a SIGKILL may land between a temp file and its rename)."""
    for rel, row in rows.items():
        if row["state"] != "done":
            continue
        outputs = [Path(p) for p in json.loads(row["outputs"])]
        assert outputs and all(p.is_file() for p in outputs), rel
        data = json.loads(next(p for p in outputs if p.suffix == ".json").read_text())
        txt = next(p for p in outputs if p.suffix == ".txt").read_text()
        assert " ".join(txt.split()) == " ".join(data["text"].split()), rel
        assert data["source"].endswith(rel) and data["duration"] > 0
    assert killed or not list(out.rglob("*.tmp"))


def test_transcribe_many_matches_transcribe(tiny_engine, eval_root):
    """Chunks of several files decoded in shared batches give each file exactly its own transcript (tiny.en:
    what a row reads does not depend on the model)."""
    names = ["whisper.cpp/jfk.wav", "coqui-tts-ljspeech/LJ001-0002.wav", "mfa/common_voice_en_22058264.mp3"]
    audios = [load_audio(eval_root / n) for n in names] + [np.zeros(32000, dtype=np.float32)]
    opts = DecodeOptions(batch_size=4, word_timestamps=True)
    many = tiny_engine.transcribe_many(audios, opts)
    for audio, got in zip(audios, many):
        want = tiny_engine.transcribe(audio, opts)
        assert [(s.start, s.end, s.text, s.tokens) for s in got.segments] == [
            (s.start, s.end, s.text, s.tokens) for s in want.segments
        ]
        assert [(w.start, w.end, w.text) for s in got.segments for w in s.words] == [
            (w.start, w.end, w.text) for s in want.segments for w in s.words
        ]
        assert (got.language, got.stats.generated_tokens) == (want.language, want.stats.generated_tokens)
        assert got.chunks == want.chunks
    assert many[-1].segments == [] and many[0].stats.generated_tokens > 0
    assert wer([JFK_REF], [" ".join(s.text for s in many[0].segments)]) <= 0.05


def test_prefetcher_groups_files_within_limits(eval_root, tmp_path):
    """Decoded ahead on a thread, handed over in order, in groups within the file and audio limits."""
    from specwhisper.batch.engine import AudioPrefetcher, GroupLimits, load_job
    from specwhisper.batch.inputs import find_inputs, make_jobs

    src = _copy(eval_root, tmp_path / "in", {
        "1.wav": "whisper.cpp/jfk.wav", "2.wav": "coqui-tts-ljspeech/LJ001-0002.wav", "3.wav": "text:not audio",
        "4.mp3": "mfa/common_voice_en_22058264.mp3", "5.wav": "coqui-tts-ljspeech/LJ001-0003.wav",
    })
    jobs = make_jobs(src, find_inputs(src), tmp_path / "out")
    # A small read-ahead budget: the thread waits for the consumer; groups depend on timing.
    prefetch = AudioPrefetcher(jobs, lambda job: load_job(job, 3600), GroupLimits(3, 12.0, prefetch_seconds=5.0))
    groups = []
    while group := prefetch.take():
        groups.append(group)
    prefetch.close()
    assert [item.job for g in groups for item in g] == jobs
    assert all(len(g) <= 3 and (len(g) == 1 or sum(i.seconds for i in g) <= 12.0) for g in groups)

    # Everything decoded ahead (the thread has finished): groups are fixed by the limits alone.
    prefetch = AudioPrefetcher(jobs, lambda job: load_job(job, 3600), GroupLimits(3, 12.0, prefetch_seconds=3600.0))
    prefetch._thread.join(timeout=120)
    groups = []
    while group := prefetch.take():
        groups.append(group)
    prefetch.close()
    assert [[i.job.rel.name for i in g] for g in groups] == [["1.wav"], ["2.wav", "3.wav", "4.mp3"], ["5.wav"]]
    broken = groups[1][1]
    assert broken.audio is None and "3.wav" in broken.error and broken.sha256
    assert all(i.error is None and i.seconds > 1 and len(i.sha256) == 64 for g in groups for i in g if i is not broken)

    # --multichannel reads each file as channels x samples: the same seconds, the same groups.
    prefetch = AudioPrefetcher(jobs, lambda job: load_job(job, 3600, channels=True), GroupLimits(3, 12.0, prefetch_seconds=3600.0))
    prefetch._thread.join(timeout=120)
    split = []
    while group := prefetch.take():
        split.append(group)
    prefetch.close()
    assert [[(i.job.rel.name, i.seconds) for i in g] for g in split] == [[(i.job.rel.name, i.seconds) for i in g] for g in groups]


def test_folder_resume_changed_file_and_retry(run_cli, eval_root, tmp_path):
    """The job database resumes, skips, redoes changed files and retries failed ones (tiny.en)."""
    def run_tiny(*argv):
        return run_cli(*argv, "-m", "tiny.en")

    src = _copy(eval_root, tmp_path / "in", {
        "jfk.wav": "whisper.cpp/jfk.wav",
        "talk.mp3": "mfa/common_voice_en_22058264.mp3",
        "sub/lj.wav": "coqui-tts-ljspeech/LJ001-0002.wav",
        "broken.wav": "text:this is not audio",
        "notes.txt": "text:not an input",
        ".hidden.wav": "whisper.cpp/jfk.wav",
    })
    out = tmp_path / "out"
    code, stdout, err = run_tiny(src, "-o", out, "-r", "-f", "txt,json", "--summary")
    assert code == 1, err
    errors = _error_lines(err)
    assert len(errors) == 1 and "broken.wav" in errors[0]
    assert "4 files: 3 done, 0 already done, 1 failed" in err
    assert "broken.wav" in stdout and "failed" in stdout and "jfk.wav" in stdout  # --summary table
    rows = _rows(out)
    assert sorted(rows) == ["broken.wav", "jfk.wav", "sub/lj.wav", "talk.mp3"]
    assert {r: rows[r]["state"] for r in rows} == {"broken.wav": "failed", "jfk.wav": "done", "sub/lj.wav": "done", "talk.mp3": "done"}
    assert rows["broken.wav"]["error"] == errors[0].removeprefix("transcribe: error: ")
    assert all(rows[r]["completions"] == 1 and rows[r]["attempts"] == 1 for r in ("jfk.wav", "sub/lj.wav", "talk.mp3"))
    assert (out / "sub" / "lj.json").is_file() and not (out / "notes.json").exists()
    _assert_outputs_valid(out, rows)
    assert wer([JFK_REF], [(out / "jfk.txt").read_text()]) <= 0.05

    # The same run again: nothing is redone, the failed file stays failed.
    code, _, err = run_tiny(src, "-o", out, "-r", "-f", "txt,json")
    assert code == 1 and "0 done, 3 already done, 1 failed (1 in an earlier run, not tried again: --retry-failed tries them)" in err
    assert {r: (v["attempts"], v["completions"]) for r, v in _rows(out).items()} == {
        r: (v["attempts"], v["completions"]) for r, v in rows.items()}

    # A key stored by a release without an option (`clips`: absent, at its default now) holds the same settings;
    # one holding another value of it is redone.
    con = sqlite3.connect(out / DB_NAME)
    for rel, stored in con.execute("SELECT rel, settings FROM files").fetchall():
        settings = json.loads(stored)
        if rel == "talk.mp3":
            settings["decode"]["clips"] = [{"start": 0.0, "end": 2.0}]
        else:
            del settings["decode"]["clips"]
        con.execute("UPDATE files SET settings = ? WHERE rel = ?", (json.dumps(settings), rel))
    con.commit()
    con.close()
    code, _, err = run_tiny(src, "-o", out, "-r", "-f", "txt,json")
    assert code == 1 and "1 done, 2 already done, 1 failed" in err, err
    assert {r: v["attempts"] for r, v in _rows(out).items()} == {"broken.wav": 1, "jfk.wav": 1, "sub/lj.wav": 1, "talk.mp3": 1}
    assert _rows(out)["talk.mp3"]["completions"] == 1

    # Changed content under the same name is redone; --retry-failed runs the failed file again.
    shutil.copy(eval_root / "coqui-tts-ljspeech/LJ001-0003.wav", src / "jfk.wav")
    code, _, err = run_tiny(src, "-o", out, "-r", "-f", "txt,json", "--retry-failed")
    assert code == 1 and "1 done, 2 already done, 1 failed" in err and len(_error_lines(err)) == 1
    after = _rows(out)
    assert after["jfk.wav"]["sha256"] != rows["jfk.wav"]["sha256"] and after["jfk.wav"]["completions"] == 1
    assert "Chinese" in (out / "jfk.txt").read_text() and "Americans" not in (out / "jfk.txt").read_text()
    assert after["broken.wav"]["attempts"] == 2 and after["broken.wav"]["state"] == "failed"
    assert after["talk.mp3"]["attempts"] == 1 and after["sub/lj.wav"]["attempts"] == 1

    # Other settings (here: formats) are a new job; --glob picks files; without -r subfolders are skipped.
    code, _, err = run_tiny(src, "-o", out, "--glob", "*.mp3", "-f", "srt")
    assert code == 0, err
    assert "1 files: 1 done" in err and (out / "talk.srt").is_file()
    assert _rows(out)["talk.mp3"]["completions"] == 1 and not (out / "sub" / "lj.srt").exists()


def test_output_names_hold_across_runs_and_folders(run_cli, eval_root, tmp_path):
    """Two recorders' folders, each with its ZOOM0001.WAV, transcribed into one output folder: the second is
    ZOOM0001-2 and the first's transcript stays (it was overwritten while the database called both done); and a
    talk.mp3 added beside a done talk.mp3.wav does not take the name of its outputs (tiny.en)."""
    day1 = _copy(eval_root, tmp_path / "day1", {"ZOOM0001.WAV": "lhotse/LJ002-0020.wav"})
    day2 = _copy(eval_root, tmp_path / "day2", {"ZOOM0001.WAV": "coqui-tts-ljspeech/LJ001-0002.wav"})
    out = tmp_path / "out"
    for folder in (day1, day2):
        code, _, err = run_cli(folder, "-o", out, "-f", "txt", "-m", "tiny.en")
        assert code == 0, err
    first, second = (out / "ZOOM0001.txt").read_text(), (out / "ZOOM0001-2.txt").read_text()
    assert "1813" in first and "modern" in second.lower(), (first, second)
    code, _, err = run_cli(day1, "-o", out, "-f", "txt", "-m", "tiny.en")
    assert code == 0 and "1 files: 0 done, 1 already done" in err, err
    assert (out / "ZOOM0001.txt").read_text() == first

    names = _copy(eval_root, tmp_path / "names", {"talk.mp3.wav": "coqui-tts-ljspeech/LJ001-0002.wav"})
    code, _, err = run_cli(names, "-o", tmp_path / "named", "-f", "txt", "-m", "tiny.en")
    assert code == 0, err
    kept = (tmp_path / "named" / "talk.mp3.txt").read_text()
    _copy(eval_root, names, {"talk.mp3": "mfa/common_voice_en_22058264.mp3", "talk.wav": "lhotse/LJ002-0020.wav"})
    code, _, err = run_cli(names, "-o", tmp_path / "named", "-f", "txt", "-m", "tiny.en")
    assert code == 0 and "3 files: 2 done, 1 already done" in err, err
    assert (tmp_path / "named" / "talk.mp3.txt").read_text() == kept
    assert sorted(p.name for p in (tmp_path / "named").glob("*.txt")) == ["talk.mp3-2.txt", "talk.mp3.txt", "talk.wav.txt"]


def test_a_users_own_file_in_the_output_folder_is_never_replaced(run_cli, eval_root, tmp_path):
    """A folder transcribed into itself, where the user keeps notes named like a recording (interview.mp3 beside
    interview.txt): the notes stay and the transcript is interview-2; a rerun finds it done, names unchanged."""
    folder = _copy(eval_root, tmp_path / "podcast", {"interview.wav": "lhotse/LJ002-0020.wav"})
    (folder / "interview.txt").write_text("my notes\n")
    code, _, err = run_cli(folder, "-o", folder, "-f", "txt,srt", "-m", "tiny.en")
    assert code == 0, err
    assert (folder / "interview.txt").read_text() == "my notes\n"
    assert "1813" in (folder / "interview-2.txt").read_text() and (folder / "interview-2.srt").is_file()
    code, _, err = run_cli(folder, "-o", folder, "-f", "txt,srt", "-m", "tiny.en")
    assert code == 0 and "0 done, 1 already done" in err, err
    assert sorted(p.name for p in folder.iterdir() if not p.name.startswith(".")) == [
        "interview-2.srt", "interview-2.txt", "interview.txt", "interview.wav"]
    # every file of the folder as input (--glob '*'): the batch's own outputs are not taken for recordings
    code, _, err = run_cli(folder, "-o", folder, "-f", "txt,srt", "-m", "tiny.en", "--glob", "*")
    assert code == 1 and "interview.txt: not a readable audio file" in err and "interview-2" not in err, err
    assert "2 files: 0 done, 1 already done, 1 failed" in err, err


def test_a_rerun_from_another_folder_finds_its_work_done(run_cli, eval_root, tmp_path, monkeypatch):
    """The job database keeps absolute, resolved paths: a batch run as ``transcribe in -o out`` and resumed from
    elsewhere (a service with another working directory), or through links to its folders, redoes nothing
    (it redid every file: the outputs were kept relative to the first run's folder and not found)."""
    src = _copy(eval_root, tmp_path / "in", {"lj.wav": "coqui-tts-ljspeech/LJ001-0002.wav"})
    monkeypatch.chdir(tmp_path)
    code, _, err = run_cli("in", "-o", "out", "-f", "txt", "-m", "tiny.en")
    assert code == 0, err
    monkeypatch.chdir("/")
    code, _, err = run_cli(src, "-o", tmp_path / "out", "-f", "txt", "-m", "tiny.en")
    assert code == 0 and "1 files: 0 done, 1 already done" in err, err
    # through links to the same folders (a mount seen by another path): the same files, done
    (tmp_path / "in-link").symlink_to(src)
    (tmp_path / "out-link").symlink_to(tmp_path / "out")
    code, _, err = run_cli(tmp_path / "in-link", "-o", tmp_path / "out-link", "-f", "txt", "-m", "tiny.en")
    assert code == 0 and "1 files: 0 done, 1 already done" in err, err
    assert sorted(p.name for p in (tmp_path / "out").glob("*.txt")) == ["lj.txt"]


def test_a_name_of_250_bytes_is_transcribed_and_redone(run_cli, eval_root, tmp_path):
    """A valid file name near the file system's 255 bytes: its outputs' working files (temp files, the
    earlier run's kept copies, the checkpoint) fit beside them ("File name too long" failed the file)."""
    stem = LONG
    src = _copy(eval_root, tmp_path / "in", {stem + ".wav": "coqui-tts-ljspeech/LJ001-0002.wav"})
    out = tmp_path / "out"
    for extra in ((), ("--beam-size", "2")):  # the second redoes it, replacing the first's outputs
        code, _, err = run_cli(src, "-o", out, "-f", "txt", "-m", "tiny.en", *extra)
        assert code == 0 and "1 done" in err, err
        assert "modern" in (out / f"{stem}.txt").read_text().lower()
    assert sorted(p.name for p in out.iterdir() if p.name != DB_NAME and not p.name.startswith(DB_NAME)) == [f"{stem}.txt"]


def test_a_job_database_that_fails_after_it_opens_is_one_line(run_cli, eval_root, tmp_path):
    """A database page corrupted after a run (a full disk and another program's lock fail alike): the
    rerun's error is one line, exit 2, not sqlite3's traceback."""
    src = _copy(eval_root, tmp_path / "in", {"lj.wav": "coqui-tts-ljspeech/LJ001-0002.wav"})
    out = tmp_path / "out"
    code, _, err = run_cli(src, "-o", out, "-f", "txt", "-m", "tiny.en")
    assert code == 0, err
    db = out / DB_NAME
    db.write_bytes(db.read_bytes()[:4096] + b"\xff" * (db.stat().st_size - 4096))
    code, _, err = run_cli(src, "-o", out, "-f", "txt", "-m", "tiny.en")
    assert code == 2 and _error_lines(err) == [f"transcribe: error: {db}: the job database failed (database disk image "
                                               "is malformed); the files done so far are recorded"], err


def test_empty_folder_and_bad_output_dirs(run_cli, cli_run, tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "readme.txt").write_text("no audio here")
    code, _, err = run_cli(empty, "-o", tmp_path / "out")
    assert code == 2 and len(_error_lines(err)) == 1 and "no input files found" in err

    src = tmp_path / "in"
    src.mkdir()
    (src / "a.wav").write_bytes(b"RIFF")
    a_file = tmp_path / "file.txt"
    a_file.write_text("x")
    for out, message in [(a_file, "the output folder is a file"), (a_file / "sub", "cannot create the output folder")]:
        code, _, err = run_cli(src, "-o", out)
        assert code == 2 and len(_error_lines(err)) == 1 and message in err, err

    code, _, err = run_cli(src, src / "a.wav", "-o", tmp_path / "out")
    assert code == 2 and "must be the only input" in _error_lines(err)[0]
    code, _, err = run_cli(src / "a.wav", "--retry-failed")
    assert code == 2 and "--retry-failed applies to a folder input" in _error_lines(err)[0]
    code, _, err = run_cli(src, "-o", tmp_path / "out", "-l", "xx")  # the model refuses it: the batch stops, once
    assert code == 2 and "unknown language code 'xx'" in _error_lines(err)[0] and len(_error_lines(err)) == 1
    code, _, err = run_cli(src, "-o", tmp_path / "out", "--workers", "2")
    assert code == 2 and "--workers goes with --engine ray" in _error_lines(err)[0]
    code, _, err = run_cli(src, "-o", tmp_path / "out", "--engine", "ray", "--ray-address", "127.0.0.1:1")
    assert code == 2 and "cannot reach a Ray cluster at 127.0.0.1:1" in _error_lines(err)[0]
    for argv, message in [((src / "a.wav", "--watch", "5"), "--watch applies to a folder input"),
                          ((src, "--watch", "0"), "expected a positive float, got '0'"),
                          ((src, "--watch", "inf"), "--watch: seconds between looks at the folder, under a day")]:
        code, _, err = cli_run(*argv, "-o", tmp_path / "out")
        assert code == 2 and message in _error_lines(err)[0], (argv, err)


def test_unwritable_output_dir(run_cli, eval_root, tmp_path, read_only_dir):
    src = _copy(eval_root, tmp_path / "in", {"jfk.wav": "whisper.cpp/jfk.wav"})
    code, _, err = run_cli(src, "-o", read_only_dir)
    errors = _error_lines(err)
    assert code == 2 and len(errors) == 1 and "cannot write to the output folder" in errors[0], err


def test_folder_with_diarization(run_cli, eval_root, tmp_path):
    src = _copy(eval_root, tmp_path / "in", {"jfk.wav": "whisper.cpp/jfk.wav"})
    code, _, err = run_cli(src, "-o", tmp_path / "out", "--diarize", "-q")
    assert code == 0, err
    rttm = (tmp_path / "out" / "jfk.rttm").read_text().splitlines()
    assert rttm and all(line.startswith("SPEAKER jfk 1 ") for line in rttm)
    data = json.loads((tmp_path / "out" / "jfk.json").read_text())
    assert data["speakers"] and all(s["speaker"] for s in data["segments"]) and data["segments"][0]["words"]


def test_progress_bar_with_eta_on_a_terminal(eval_root, tmp_path):
    """On a terminal (a pty of size 0 x 0 here) the batch draws one overall bar: files, audio time, ETA."""
    import pty

    src = _copy(eval_root, tmp_path / "in", {"a.wav": "coqui-tts-ljspeech/LJ001-0002.wav", "b.mp3": "mfa/common_voice_en_22058264.mp3"})
    master, tty = pty.openpty()
    cmd = [sys.executable, "-m", "specwhisper.serving.cli.main", str(src), "-o", str(tmp_path / "out"), "-m", "tiny.en", "--group-files", "1"]
    proc = subprocess.Popen(cmd, cwd=REPO, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=tty)
    os.close(tty)
    screen = b""
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:  # the other end closed
            break
        if not data:
            break
        screen += data
    proc.wait(timeout=300)
    assert proc.returncode == 0
    lines = screen.decode(errors="replace").replace("\r", "\n").splitlines()
    bars = [line for line in lines if line.startswith("batch: ")]
    assert any(line.startswith("batch: 0/2 files |") for line in bars), lines
    assert any(line.startswith("batch: 2/2 files |") and "<00:00" in line and "of audio" in line for line in bars), lines
    assert any("2 files: 2 done" in line for line in lines)


def _start(src: Path, out: Path, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "specwhisper.serving.cli.main", str(src), "-o", str(out), "-f", "txt,json", "-q", *extra]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_done(proc: subprocess.Popen, out: Path, at_least: int, timeout: float = 300) -> int:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        done = sum(r["state"] == "done" for r in _rows(out).values())
        if done >= at_least:
            return done
        time.sleep(0.1)
    raise AssertionError(f"the batch ended or stalled before {at_least} files were done: {proc.poll()}")


def test_kill_and_resume(eval_root, tmp_path):
    """SIGTERM (graceful) and SIGKILL (abrupt) mid-run, then a resume: every file done exactly once (the
    6 shortest English files, a file a group: each run stops with files left)."""
    items = sorted(english_set(eval_root), key=lambda i: i.duration)[:6]
    src = _copy(eval_root, tmp_path / "in", {f"{i:02d}-{Path(it.file).name}": it.file for i, it in enumerate(items)})
    out = tmp_path / "out"
    args = ("-m", "tiny.en", "--group-files", "1")

    proc = _start(src, out, *args)
    first = _wait_done(proc, out, 1)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130 and "interrupted; run the same command again to resume" in err and "Traceback" not in err
    rows = _rows(out)
    assert not any(r["state"] == "running" for r in rows.values())
    done = [r for r in rows.values() if r["state"] == "done"]
    assert first <= len(done) < len(items)
    _assert_outputs_valid(out, rows)

    proc = _start(src, out, *args)
    _wait_done(proc, out, len(done) + 1)
    proc.kill()
    proc.communicate(timeout=60)
    _assert_outputs_valid(out, _rows(out), killed=True)

    proc = _start(src, out, *args)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    rows = _rows(out)
    assert len(rows) == len(items)
    assert all(r["state"] == "done" and r["completions"] == 1 for r in rows.values()), rows
    _assert_outputs_valid(out, rows)
    assert sum(r["attempts"] for r in rows.values()) >= len(items)
    hyps = [json.loads((out / f"{i:02d}-{Path(it.file).stem}.json").read_text())["text"] for i, it in enumerate(items)]
    assert wer([it.reference for it in items], hyps) < 0.35, wer([it.reference for it in items], hyps)


def _descendants(pid: int) -> dict[int, str]:
    """Processes below ``pid``: pid -> command line."""
    parents, cmds = {}, {}
    for d in Path("/proc").iterdir():
        try:
            stat = (d / "stat").read_text()
            cmds[int(d.name)] = (d / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except (ValueError, OSError):
            continue
        parents[int(d.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found = {}
    for p in parents:
        q = p
        while q in parents and q > 1:
            q = parents[q]
            if q == pid:
                found[p] = cmds[p]
                break
    return found


def _kill_a_ray_worker(proc: subprocess.Popen, out: Path, timeout: float = 300) -> bool:
    """SIGKILL one of this batch's Ray actors once it has files to work on."""
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if any(r["state"] == "running" for r in _rows(out).values()):
            workers = [p for p, cmd in _descendants(proc.pid).items() if cmd.startswith("ray::BatchWorker")]
            if workers:
                os.kill(workers[0], signal.SIGKILL)
                return True
        time.sleep(0.1)
    return False


@pytest.mark.integration
def test_ray_engine_two_workers(run_cli, eval_root, tmp_path):
    """A local Ray with 2 workers gives the local engine's transcripts; the driver alone writes the DB; a
    worker killed mid-run loses no file and does none twice (tiny.en: which worker decodes a file does not
    depend on the model)."""
    src = _copy(eval_root, tmp_path / "in", {
        "jfk.wav": "whisper.cpp/jfk.wav",
        "talk.mp3": "mfa/common_voice_en_22058264.mp3",
        "lj.wav": "coqui-tts-ljspeech/LJ001-0002.wav",
        "fleurs.ogg": "cuttledoc-fleurs/fleurs-en-004.ogg",
        "broken.wav": "text:this is not audio",
        LONG + ".wav": "lhotse/LJ002-0020.wav",  # a worker's copy of it was past 255 bytes: every run stopped
    })
    code, _, err = run_cli(src, "-o", tmp_path / "local", "-f", "txt,json", "-q", "-m", "tiny.en")
    assert code == 1, err

    out = tmp_path / "ray"
    proc = _start(src, out, "--engine", "ray", "--workers", "2", "-m", "tiny.en")
    killed = _kill_a_ray_worker(proc, out)  # its files go to a new actor
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    errors = _error_lines(err)
    assert len(errors) == 1 and "broken.wav" in errors[0]
    rows = _rows(out)
    assert {r: v["state"] for r, v in rows.items()} == {
        "jfk.wav": "done", "talk.mp3": "done", "lj.wav": "done", "fleurs.ogg": "done", "broken.wav": "failed", LONG + ".wav": "done"}
    assert all(v["completions"] == 1 for r, v in rows.items() if r != "broken.wav")
    assert killed and any(v["attempts"] == 2 for v in rows.values()), rows
    _assert_outputs_valid(out, rows)
    for name in ("jfk", "talk", "lj", "fleurs", LONG):
        assert (out / f"{name}.txt").read_text() == (tmp_path / "local" / f"{name}.txt").read_text()

    # Resuming on Ray: nothing left to do, nothing redone (in this process: with nothing to do no Ray starts)
    code, _, err = run_cli(src, "-o", out, "-f", "txt,json", "-q", "--engine", "ray", "-m", "tiny.en")
    assert code == 1 and len(_error_lines(err)) == 0
    assert {r: v["attempts"] for r, v in _rows(out).items()} == {r: v["attempts"] for r, v in rows.items()}

    # Watching on Ray: nothing to do at first (no Ray starts); each file copied in later is transcribed by the
    # same worker, its model loaded once; Ctrl-C while it waits ends the run (exit 1: broken.wav failed before)
    proc = _start(src, out, "--engine", "ray", "--workers", "1", "-m", "tiny.en", "--watch", "0.5")
    workers = []
    for n, name in enumerate(("jfk2.wav", "lj2.wav"), start=6):
        shutil.copy(src / name.replace("2", ""), src / name)
        _wait_done(proc, out, n)
        workers.append({p for p, cmd in _descendants(proc.pid).items() if cmd.startswith("ray::BatchWorker")})
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 1 and "interrupted" not in err, err
    assert len(workers[0]) == 1 and workers[0] == workers[1], workers
    rows = _rows(out)
    assert rows["jfk2.wav"]["attempts"] == rows["lj2.wav"]["attempts"] == 1
    assert (out / "jfk2.txt").read_text() == (tmp_path / "local" / "jfk.txt").read_text()


def test_a_watched_folder_takes_each_file_once_it_is_whole(eval_root, manifest, tmp_path):
    """``--watch 1``: the files there at the start are transcribed; one copied in slowly (a piece every 0.3 s for
    3.6 s, longer than the interval) is read once, whole; a bad file fails once, not at every look (--retry-failed
    retries at the first look only), and once replaced by audio is done, counted once: nothing failed, exit 0 (the
    run said "3 files: 3 done, 1 failed, -1 left", exit 1); Ctrl-C while the run waits ends it with nothing cut short."""
    src = _copy(eval_root, tmp_path / "in", {"jfk.flac": "openai-whisper/jfk.flac", "bad.wav": "text:not audio"})
    out = tmp_path / "out"
    proc = _start(src, out, "-m", "tiny.en", "--watch", "1", "--retry-failed")
    _wait_done(proc, out, 1)
    late = next(m for m in manifest if m.file == "lhotse/2412-153948-0000.flac")
    data, pieces = late.path.read_bytes(), 12
    with open(src / "late.flac", "wb") as f:
        for i in range(pieces):
            f.write(data[i * len(data) // pieces:(i + 1) * len(data) // pieces])
            f.flush()
            time.sleep(0.3)
    _wait_done(proc, out, 2)
    time.sleep(2.5)  # two more looks at the folder
    assert (_rows(out)["bad.wav"]["state"], _rows(out)["bad.wav"]["attempts"]) == ("failed", 1)
    shutil.copy(next(m for m in manifest if m.file == "coqui-tts-ljspeech/LJ001-0002.wav").path, src / "bad.wav")
    _wait_done(proc, out, 3)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=60)
    rows = _rows(out)
    assert proc.returncode == 0 and "interrupted" not in err, err
    assert [(r["state"], r["attempts"]) for r in (rows["jfk.flac"], rows["late.flac"], rows["bad.wav"])] == \
        [("done", 1), ("done", 1), ("done", 1)], rows  # a changed file is a new job
    assert len(_error_lines(err)) == 1 and "bad.wav" in _error_lines(err)[0]
    _assert_outputs_valid(out, rows)
    assert wer([late.reference], [(out / "late.txt").read_text()]) < 0.2


def test_a_file_moved_away_while_the_folder_is_read_is_left_out(tmp_path):
    """A watched folder's files come and go: one gone between the folder's listing and its job is no job
    (and no traceback)."""
    from specwhisper.batch.inputs import make_jobs

    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "here.wav").write_bytes(b"RIFF")
    jobs = make_jobs(tmp_path / "in", [tmp_path / "in" / "gone.wav", tmp_path / "in" / "here.wav"], tmp_path / "out")
    assert [j.rel.name for j in jobs] == ["here.wav"]
