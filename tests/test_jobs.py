"""Transcription jobs over HTTP (POST /v1/jobs, GET and DELETE /v1/jobs/ID, GET /v1/jobs): a server as the
Docker image runs it, with the embedded Whisper tiny.en and real audio. A job's result is the answer POST /
gives for the same upload; a job can be deleted queued or running; a server started on the folder a stopped
one left takes its jobs up (finished ones readable, interrupted ones run again); bad requests are one line."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

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
    long = build_long_file("dense", tmp_path_factory.mktemp("long"), 25, seed=0)  # long enough to be seen running
    return {"jfk": (jfk.path.read_bytes(), jfk.reference), "long": (long.path.read_bytes(), long.reference)}


def _server(folder, api_key: str | None = None, **limits):
    config = ServerConfig(port=0, access_log=False, spool_dir=folder / "spool", jobs_dir=folder / "jobs",
                          jobs=JobLimits(**limits), api_key=api_key)
    return serving(Endpoint(SETTINGS), config)


class _Receiver:
    """A client's web hook: a local HTTP server that keeps what is POSTed to it, answering the statuses of
    ``answers`` in turn (then 200)."""

    def __init__(self, answers: tuple[int, ...] = ()):
        self.calls: list[tuple[str, dict, bytes]] = []
        answers_left = list(answers)
        calls = self.calls

        class Hook(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers["Content-Length"]))
                calls.append((self.path, dict(self.headers), body))
                self.send_response(answers_left.pop(0) if answers_left else 200)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Hook)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def wait(self, count: int, within_s: float = 240) -> None:
        end = time.monotonic() + within_s
        while len(self.calls) < count and time.monotonic() < end:
            time.sleep(0.1)

    def close(self) -> None:
        self.server.shutdown()


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
        # the jobs' routes answer with our error body, though under OpenAI's /v1/
        for answer, status in [(httpx.put(f"{srv.url}/v1/jobs", timeout=30), 405),
                               (httpx.get(f"{srv.url}/v1/jobs/job_x/result", timeout=30), 404)]:
            assert answer.status_code == status and set(answer.json()) == {"error", "status"}, answer.text
            assert "\n" not in answer.json()["error"]
    with _server(tmp_path) as first, _server(tmp_path) as second:
        off = _submit(second.url, clips["jfk"][0])
        assert off.status_code == 503 and "in use by another server" in off.json()["error"]
        assert _submit(first.url, clips["jfk"][0]).status_code == 202


def test_a_job_calls_back_when_it_ends(clips, tmp_path, server_log):  # noqa: F811
    """With --job-callbacks the server POSTs a job's answer, what GET /v1/jobs/ID gives, to the job's
    callback_url once it ends, signed with the API key (HMAC-SHA256 of the body); a receiver that answers 500 is
    tried again; a URL outside the allowed prefixes, or any on a server that makes no callbacks, is refused in one
    line before the upload is read."""
    audio, reference = clips["jfk"]
    hook = _Receiver(answers=(500,))
    key = "k3y-for-tests"
    auth = {"Authorization": f"Bearer {key}"}
    dead = _Receiver()
    dead.close()  # nothing answers on its port
    dead.server.server_close()
    try:
        with _server(tmp_path, api_key=key, callbacks=(f"{hook.url}/hooks/", f"{dead.url}/"), callback_retry_s=(0.2, 0.2)) as srv:
            keyless = httpx.get(f"{srv.url}/v1/jobs", timeout=30)
            assert keyless.status_code == 401 and keyless.json() == {"error": keyless.json()["error"], "status": 401}, keyless.text
            submitted = httpx.post(f"{srv.url}/v1/jobs?language=en&callback_url={hook.url}/hooks/jfk%3Fuser%3D7",
                                   content=audio, headers={"Content-Type": "audio/wav", **auth}, timeout=60)
            assert submitted.status_code == 202, submitted.text
            job = submitted.json()
            assert job["callback"] == {"status": "pending", "attempts": 0, "error": None} and "callback_url" not in job
            hook.wait(2)
            assert [(path, json.loads(body)["id"]) for path, _, body in hook.calls] == [("/hooks/jfk?user=7", job["id"])] * 2
            _, headers, body = hook.calls[1]
            assert headers["X-Specwhisper-Signature"] == "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()
            called = json.loads(body)
            assert called["status"] == "done" and "callback" not in called
            assert wer([reference], [called["result"]["text"]]) <= MAX_WER, called["result"]["text"]
            state = _until_called(srv.url, job["id"], auth)
            assert state["callback"] == {"status": "delivered", "attempts": 2, "error": None}, state
            assert {k: v for k, v in state.items() if k != "callback"} == called  # the answer GET gives
            unheard = httpx.post(f"{srv.url}/v1/jobs?language=en&callback_url={dead.url}/x", content=audio,
                                 headers={"Content-Type": "audio/wav", **auth}, timeout=60).json()
            failed = _until_called(srv.url, unheard["id"], auth)["callback"]
            assert failed["status"] == "failed" and failed["attempts"] == 3 and failed["error"].startswith("no answer ("), failed
            for url, why in [(f"{hook.url}/other/1", "not a URL this server may call"),
                             (f"{hook.url}.evil.net/hooks/1", "not a URL"),
                             (f"http://user:pw@127.0.0.1:{hook.url.rsplit(':', 1)[1]}/hooks/1", "a user name or password"),
                             (f"{hook.url}/hooks/../admin", "has . or .. in it")]:
                refused = httpx.post(f"{srv.url}/v1/jobs", params={"callback_url": url}, content=audio,
                                     headers={"Content-Type": "audio/wav", **auth}, timeout=60)
                assert refused.status_code == 400 and refused.json()["error"].startswith("callback_url: ") and why in \
                    refused.json()["error"], (url, refused.text)
    finally:
        hook.close()
    with _server(tmp_path / "plain") as srv:  # no --job-callbacks: none made
        off = _submit(srv.url, audio, f"?callback_url={hook.url}/hooks/1")
        assert off.status_code == 400 and off.json()["error"].startswith("callback_url: this server makes no job callbacks")


def test_a_callback_not_delivered_before_a_stop_is_made_by_the_next_server(clips, tmp_path):
    """The receiver answers 503 and the server stops before its next try: the jobs' callbacks stay pending in the
    folder, with the try counted; the next server started on it delivers the one its prefixes still take and
    fails the other."""
    hook = _Receiver(answers=(503, 503))
    try:
        with _server(tmp_path, callbacks=(f"{hook.url}/",), callback_retry_s=(60.0,)) as srv:
            jobs = [_submit(srv.url, clips["jfk"][0], f"?language=en&callback_url={hook.url}/{path}").json()["id"]
                    for path in ("done", "other")]
            hook.wait(2)
            end = time.monotonic() + 30
            while (told := [httpx.get(f"{srv.url}/v1/jobs/{job}", timeout=30).json()["callback"] for job in jobs]) \
                    and any(t["attempts"] < 1 for t in told) and time.monotonic() < end:  # their tries recorded
                time.sleep(0.1)
            assert told == [{"status": "pending", "attempts": 1, "error": "answered 503"}] * 2, told
        with _server(tmp_path, callbacks=(f"{hook.url}/done",)) as srv:
            hook.wait(3)
            assert [(path, json.loads(body)["id"]) for path, _, body in hook.calls[2:]] == [("/done", jobs[0])]
            assert "X-Specwhisper-Signature" not in hook.calls[2][1]  # a server without an API key signs nothing
            assert _until_called(srv.url, jobs[0], {})["callback"] == {"status": "delivered", "attempts": 2, "error": None}
            assert _until_called(srv.url, jobs[1], {})["callback"] == {
                "status": "failed", "attempts": 1, "error": "its URL is not under this server's --job-callbacks"}
    finally:
        hook.close()


def _until_called(url: str, job_id: str, headers: dict, within_s: float = 30) -> dict:
    end = time.monotonic() + within_s
    while True:
        state = httpx.get(f"{url}/v1/jobs/{job_id}", headers=headers, timeout=30).json()
        if state.get("callback", {}).get("status") != "pending" or time.monotonic() > end:
            return state
        time.sleep(0.1)
