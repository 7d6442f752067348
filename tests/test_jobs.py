"""Transcription jobs over HTTP (POST /v1/jobs, GET and DELETE /v1/jobs/ID, GET /v1/jobs): a server as the
Docker image runs it, with the embedded Whisper tiny.en and real audio. A job's result is the answer POST /
gives for the same upload; a job can be deleted queued or running; a server started on the folder a stopped
one left takes its jobs up (finished ones readable, interrupted ones run again); bad requests are one line."""

from __future__ import annotations

import time

import httpx
import pytest

from specwhisper.evaluation.transcripts import build_long_file, load_manifest, wer
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.config import JobLimits, ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.params import Choices
from specwhisper.serving.service import ServiceSettings
from tests.test_abuse import server_log  # noqa: F401 - a fixture: no traceback in the server's log

SETTINGS = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=120)
MAX_WER = 0.05


@pytest.fixture(scope="module")
def clips(eval_root, tmp_path_factory):
    jfk = next(i for i in load_manifest(eval_root) if i.file == "whisper.cpp/jfk.wav")
    long = build_long_file("dense", tmp_path_factory.mktemp("long"), 42, seed=0)
    return {"jfk": (jfk.path.read_bytes(), jfk.reference), "long": (long.path.read_bytes(), long.reference)}


def _server(folder, **limits):
    config = ServerConfig(port=0, access_log=False, spool_dir=folder / "spool", jobs_dir=folder / "jobs",
                          jobs=JobLimits(**limits))
    return serving(Endpoint(SETTINGS), config)


def _submit(url: str, audio: bytes, query: str = "") -> httpx.Response:
    return httpx.post(f"{url}/v1/jobs{query}", content=audio, headers={"Content-Type": "audio/wav"}, timeout=60)


def _until(url: str, job_id: str, states: tuple[str, ...], within_s: float = 240) -> dict:
    end = time.monotonic() + within_s
    while True:
        state = httpx.get(f"{url}/v1/jobs/{job_id}", timeout=30).json()
        if state.get("status") in states or time.monotonic() > end:
            return state
        time.sleep(0.2)


def test_a_jobs_result_is_the_answer_of_post(clips, tmp_path, server_log):  # noqa: F811
    audio, reference = clips["jfk"]
    with _server(tmp_path) as srv:
        submitted = _submit(srv.url, audio, "?language=en&formats=srt")
        assert submitted.status_code == 202, submitted.text
        job = submitted.json()
        assert job["status"] in ("queued", "running") and submitted.headers["location"] == f"/v1/jobs/{job['id']}"
        done = _until(srv.url, job["id"], ("done", "failed"))
        assert done["status"] == "done", done
        direct = httpx.post(f"{srv.url}/?language=en&formats=srt", content=audio, headers={"Content-Type": "audio/wav"},
                            timeout=120).json()
        result = done["result"]
        assert wer([reference], [result["text"]]) <= MAX_WER, result["text"]
        assert result["segments"] == direct["segments"] and result["outputs"]["srt"] == direct["outputs"]["srt"]
        assert result["timings"]["request"] >= result["timings"]["asr"]  # from the upload's arrival to the answer
        assert done["created"] <= done["started"] <= done["finished"]
        listed = httpx.get(f"{srv.url}/v1/jobs", timeout=30).json()["jobs"]
        assert [(j["id"], j["status"]) for j in listed] == [(job["id"], "done")] and "result" not in listed[0]
        # formats the submission did not ask for, written from the stored result: what POST / gives for them
        again = httpx.get(f"{srv.url}/v1/jobs/{job['id']}?formats=vtt,tsv,textgrid", timeout=30).json()
        more = httpx.post(f"{srv.url}/?language=en&formats=vtt,tsv,textgrid", content=audio,
                          headers={"Content-Type": "audio/wav"}, timeout=120).json()
        assert set(again["result"]["outputs"]) == {"vtt", "tsv", "textgrid"} and again["result"]["outputs"] == more["outputs"]
        other = httpx.get(f"{srv.url}/v1/jobs/{job['id']}?formats=srt&diarize=true", timeout=30)
        assert other.status_code == 400 and "diarize: GET /v1/jobs/ID writes the finished transcript again" in other.json()["error"]
        (tmp_path / "jobs" / f"{job['id']}.json").write_text("{")  # spoilt behind the server's back
        spoilt = httpx.get(f"{srv.url}/v1/jobs/{job['id']}", timeout=30)
        assert spoilt.status_code == 500 and spoilt.json()["error"].startswith(f"the result of job '{job['id']}' cannot be read")
        deleted = httpx.delete(f"{srv.url}/v1/jobs/{job['id']}", timeout=30)
        assert deleted.status_code == 200 and deleted.json()["deleted"] is True
        gone = httpx.get(f"{srv.url}/v1/jobs/{job['id']}", timeout=30)
        assert gone.status_code == 404 and gone.json()["error"].startswith(f"no job '{job['id']}' here")
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == [".lock"]


def test_jobs_deleted_queued_or_running_leave_nothing(clips, tmp_path):
    with _server(tmp_path) as srv:
        first = _submit(srv.url, clips["long"][0], "?language=en").json()["id"]
        second = _submit(srv.url, clips["jfk"][0], "?language=en").json()["id"]
        assert _until(srv.url, first, ("running",))["status"] == "running"
        assert httpx.get(f"{srv.url}/v1/jobs/{second}", timeout=30).json()["status"] == "queued"
        assert httpx.delete(f"{srv.url}/v1/jobs/{second}", timeout=30).json()["status"] == "queued"
        running = httpx.delete(f"{srv.url}/v1/jobs/{first}", timeout=30).json()
        assert running["status"] == "running" and running["deleted"]
        third = _submit(srv.url, clips["jfk"][0], "?language=en").json()["id"]  # runs once the deleted one stopped
        assert _until(srv.url, third, ("done", "failed"))["status"] == "done"
        assert [j["id"] for j in httpx.get(f"{srv.url}/v1/jobs", timeout=30).json()["jobs"]] == [third]
    assert sorted(p.name for p in (tmp_path / "jobs").iterdir()) == [".lock", f"{third}.json"]


def test_a_server_takes_up_the_jobs_a_stopped_one_left(clips, tmp_path):
    """Stopped with one job done, one running and one queued: the next server on the folder answers the
    first, and runs the other two to the transcripts a single server gives."""
    with _server(tmp_path) as srv:
        done = _submit(srv.url, clips["jfk"][0], "?language=en").json()["id"]
        assert _until(srv.url, done, ("done",))["status"] == "done"
        interrupted = _submit(srv.url, clips["long"][0], "?language=en").json()["id"]
        queued = _submit(srv.url, clips["jfk"][0], "?language=en&formats=txt").json()["id"]
        assert _until(srv.url, interrupted, ("running",))["status"] == "running"
    with _server(tmp_path) as srv:
        states = {j["id"]: j["status"] for j in httpx.get(f"{srv.url}/v1/jobs", timeout=30).json()["jobs"]}
        assert states[done] == "done" and {states[interrupted], states[queued]} <= {"queued", "running", "done"}
        again = {job_id: _until(srv.url, job_id, ("done", "failed")) for job_id in (interrupted, queued)}
        assert all(state["status"] == "done" for state in again.values()), again
        assert wer([clips["long"][1]], [again[interrupted]["result"]["text"]]) <= 0.35
        result = again[queued]["result"]
        assert result["outputs"]["txt"].split() == result["text"].split()  # its parameters came through the restart
        assert httpx.get(f"{srv.url}/v1/jobs/{done}", timeout=30).json()["result"]["text"]


def test_bad_job_requests_are_one_line(clips, tmp_path):
    with _server(tmp_path, max_jobs=1, ttl_s=1.0) as srv:
        empty = _submit(srv.url, b"")
        assert (empty.status_code, empty.json()["error"]) == (400, "inputs: the upload is empty (0 bytes)")
        bad = _submit(srv.url, clips["jfk"][0], "?beam_size=0")
        assert bad.status_code == 400 and "beam_size" in bad.json()["error"]
        corrupt = _submit(srv.url, b"RIFF" + b"\x00" * 4000)
        assert corrupt.status_code in (202, 400), corrupt.text
        if corrupt.status_code == 202:  # refused when it runs: the job fails with the reason
            failed = _until(srv.url, corrupt.json()["id"], ("done", "failed"))
            assert failed["status"] == "failed" and failed["error_status"] == 400 and "\n" not in failed["error"]
            time.sleep(1.2)  # past the TTL: gone
            assert httpx.get(f"{srv.url}/v1/jobs/{corrupt.json()['id']}", timeout=30).status_code == 404
        held = _submit(srv.url, clips["long"][0])
        assert held.status_code == 202
        full = _submit(srv.url, clips["jfk"][0])
        assert full.status_code == 429 and full.json()["error"].startswith("1 jobs are held already")
        assert httpx.get(f"{srv.url}/v1/jobs/job_nothing", timeout=30).status_code == 404
        assert httpx.delete(f"{srv.url}/v1/jobs/job_nothing", timeout=30).status_code == 404
    with _server(tmp_path) as first, _server(tmp_path) as second:
        off = _submit(second.url, clips["jfk"][0])
        assert off.status_code == 503 and "in use by another server" in off.json()["error"]
        assert _submit(first.url, clips["jfk"][0]).status_code == 202
