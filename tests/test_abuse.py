"""A hostile but fair user, over loopback only: the HTTP server and the CLI answer every
abuse with a correct status and a one-line error, keep serving, log no traceback and leave no upload
behind. Limits are scaled down (60 s of audio, 2 MB uploads, timeouts of a second or two) so each case
takes seconds; memory and latency are measured by bench/abuse.py, never asserted here."""

from __future__ import annotations

import http.client
import io
import json
import logging
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.form_upload import FORM_OVERHEAD, MAX_CLIP_FIELD_BYTES, MAX_FIELD_BYTES, MAX_FIELDS
from specwhisper.serving.http.config import ConnectionLimits, RequestLimits
from specwhisper.serving.params import Choices
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import EndpointServer, serving
from specwhisper.serving.service import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "samples" / "jfk.wav"
MEETING = ROOT / "samples" / "meeting-dev00.wav"
MAX_AUDIO_S = 60
MAX_UPLOAD = 2 * 2**20
LIMITS = ConnectionLimits(max_connections=16, head_timeout_s=1.0, keep_alive_s=1)
REQUESTS = RequestLimits(max_upload_bytes=MAX_UPLOAD, body_timeout_s=1.5, request_timeout_s=120, retry_after_s=3)
QUEUE = 2


def _ffmpeg(*args) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *map(str, args)], check=True)


def _wav(audio: np.ndarray) -> bytes:
    buf = io.BytesIO()
    sf.write(buf, audio, 16000, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def media(tmp_path_factory) -> dict[str, Path]:
    """A silent m4a twice the limit (its container says so), an ADTS stream that understates its length
    (10 s of noise at 128 kb/s, then 600 s of silence at 8 kb/s: ffprobe estimates ~20 s), jfk.wav and
    55 s of speech."""
    d = tmp_path_factory.mktemp("media")
    _ffmpeg("-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", 2 * MAX_AUDIO_S, "-c:a", "aac", "-b:a", "8k", d / "long.m4a")
    _ffmpeg("-f", "lavfi", "-i", "anoisesrc=r=16000:a=0.5", "-t", 10, "-c:a", "aac", "-b:a", "128k", "-f", "adts", d / "a.aac")
    _ffmpeg("-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", 600, "-c:a", "aac", "-b:a", "8k", "-f", "adts", d / "b.aac")
    (d / "lying.aac").write_bytes((d / "a.aac").read_bytes() + (d / "b.aac").read_bytes())
    jfk, _ = sf.read(JFK, dtype="float32")
    (d / "jfk.wav").write_bytes(_wav(jfk))
    # 55 s of speech no window of which repeats itself (jfk.wav five times over fails the compression-ratio
    # check in every window: tiny.en then samples every temperature, 37 s of decoding against 8 s)
    meeting, _ = sf.read(MEETING, dtype="float32")
    (d / "speech55.wav").write_bytes(_wav(np.concatenate([meeting, jfk, meeting[: 14 * 16000]])))
    return {p.stem: p for p in d.iterdir()}


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = record.getMessage()
        if record.exc_info:
            text += "\n" + logging.Formatter().formatException(record.exc_info)
        self.lines.append(text)


@pytest.fixture(scope="module")
def server_log():
    handler = _Collect()
    logging.getLogger().addHandler(handler)
    yield handler
    logging.getLogger().removeHandler(handler)
    assert not [line for line in handler.lines if "Traceback" in line], handler.lines


@pytest.fixture(scope="module")
def endpoint():
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=MAX_AUDIO_S,
                               max_upload_bytes=MAX_UPLOAD)
    return Endpoint(settings)


@pytest.fixture(scope="module")
def server(endpoint, server_log, tmp_path_factory):
    config = ServerConfig(port=0, connections=LIMITS, requests=REQUESTS, max_waiting=QUEUE, access_log=False,
                          spool_dir=tmp_path_factory.mktemp("spool"))
    with serving(endpoint, config) as srv:
        yield srv
    assert srv.spool.files() == []


@pytest.fixture(autouse=True)
def still_serving(request):
    """After each server case: the health check answers and no upload is left in the spool."""
    yield
    if "server" in request.fixturenames:
        srv = request.getfixturevalue("server")
        assert _request(srv, "GET", "/health")[:2] == (200, {"status": "ok"})
        for _ in range(50):  # a request's upload goes once its answer is out
            if not srv.spool.files():
                break
            time.sleep(0.1)
        assert srv.spool.files() == []


def _address(srv: EndpointServer) -> tuple[str, int]:
    return srv.socket.getsockname()[:2]


def _request(srv: EndpointServer, method: str, path: str, body: bytes | None = None,
             headers: dict | None = None) -> tuple[int, dict, dict]:
    conn = http.client.HTTPConnection(*_address(srv), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read()), dict(resp.getheaders())
    finally:
        conn.close()


def _raw(srv: EndpointServer, data: bytes, trickled: bytes = b"", every_s: float = 0.05, wait_s: float = 10.0) -> bytes:
    """Send ``data``, then ``trickled`` a byte every ``every_s`` seconds, and read until the server closes
    (sending stops once the server has answered)."""
    with socket.create_connection(_address(srv), timeout=wait_s) as s:
        try:
            pieces = [data[i : i + 65536] for i in range(0, len(data), 65536)] + [trickled[i : i + 1] for i in range(len(trickled))]
            for piece in pieces:
                if select.select([s], [], [], 0)[0]:
                    break
                s.sendall(piece)
                if len(piece) == 1 and trickled:
                    time.sleep(every_s)
        except OSError:
            pass  # the server closed it while we were still sending
        out = b""
        while chunk := s.recv(65536):
            out += chunk
        return out


def _parse_raw(answer: bytes) -> tuple[int, dict, dict]:
    head, _, body = answer.partition(b"\r\n\r\n")
    lines = head.decode().split("\r\n")
    headers = dict(line.split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), json.loads(body), {k.lower(): v for k, v in headers.items()}


def _is_error(status: int, body: dict, expected: int, fragment: str) -> None:
    assert status == expected, (status, body)
    assert set(body) == {"error", "status"} and body["status"] == expected, body
    assert fragment in body["error"], body
    assert "\n" not in body["error"] and "Traceback" not in body["error"] and len(body["error"]) <= 300


# --- the server -------------------------------------------------------------------------------------


@pytest.mark.integration
def test_serves_audio(server, media):
    status, out, _ = _request(server, "POST", "/?formats=srt", media["jfk"].read_bytes(), {"Content-Type": "audio/wav"})
    assert status == 200 and "fellow Americans" in out["text"] and "srt" in out["outputs"], out


@pytest.mark.integration
def test_long_container_refused_before_decoding(server, media):
    status, body, _ = _request(server, "POST", "/", media["long"].read_bytes(), {"Content-Type": "audio/mp4"})
    _is_error(status, body, 400, f"{2 * MAX_AUDIO_S} s of audio is over the limit of {MAX_AUDIO_S} s")


@pytest.mark.integration
def test_lying_container_stops_at_the_limit(server, media):
    status, body, _ = _request(server, "POST", "/", media["lying"].read_bytes(), {"Content-Type": "audio/aac"})
    _is_error(status, body, 400, f"over the limit of {MAX_AUDIO_S} s")


def test_a_form_upload_to_the_plain_route_is_pointed_to_the_openai_one(server):
    body = b"--xyz\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\nRIFF\r\n--xyz--\r\n"
    status, answer, _ = _request(server, "POST", "/", body, {"Content-Type": "multipart/form-data; boundary=xyz"})
    _is_error(status, answer, 400, "a form upload (curl -F file=@FILE) goes to POST /v1/audio/transcriptions")


@pytest.mark.integration
def test_deeply_nested_json(server):
    status, body, _ = _request(server, "POST", "/", b"[" * 200_000 + b"]" * 200_000, {"Content-Type": "application/json"})
    _is_error(status, body, 400, "nested too deeply")
    nested = {"inputs": "AAAA", "parameters": {"language": json.loads("[" * 200 + "]" * 200)}}
    status, body, _ = _request(server, "POST", "/", json.dumps(nested).encode(), {"Content-Type": "application/json"})
    _is_error(status, body, 400, "parameters.language")


@pytest.mark.integration
@pytest.mark.parametrize("length", ["\u00b2".encode(), b"9" * 5000, b"-1", b"12, 13"])
def test_malformed_content_length(server, length):
    answer = _raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\nContent-Length: " + length + b"\r\n\r\n")
    _is_error(*_parse_raw(answer)[:2], 400, "malformed HTTP request")


@pytest.mark.integration
def test_bodies_over_the_limit(server):
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
    answer = _raw(server, head + f"Content-Length: {MAX_UPLOAD + 1}\r\n\r\n".encode())  # refused unread
    _is_error(*_parse_raw(answer)[:2], 413, "larger than")
    chunk = b"x" * 65536  # no length announced: counted while read
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(MAX_UPLOAD // len(chunk) + 2))
    answer = _raw(server, head + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")
    _is_error(*_parse_raw(answer)[:2], 413, "larger than")
    status, body, _ = _request(server, "POST", "/", b"x" * (MAX_UPLOAD * 4 // 3 + 2**20 + 1), {"Content-Type": "application/json"})
    _is_error(status, body, 413, "larger than")


@pytest.mark.integration
def test_trickled_body_and_head(server):
    answer = _raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\nContent-Length: 100\r\n\r\n", b"x" * 100)
    _is_error(*_parse_raw(answer)[:2], 408, "request body did not arrive")
    answer = _raw(server, b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n", b"X-Slow: " + b"y" * 100)
    _is_error(*_parse_raw(answer)[:2], 408, "request head did not arrive")


def _is_openai_error(status: int, body: dict, expected: int, fragment: str) -> None:
    """OpenAI's error body, on its routes: {"error": {"message", "type", "param", "code"}}."""
    assert status == expected and set(body) == {"error"} and set(body["error"]) == {"message", "type", "param", "code"}, body
    message = body["error"]["message"]
    assert fragment in message and "\n" not in message and "Traceback" not in message and len(message) <= 300, body


def _form_part(name: str, value: bytes, filename: str | None = None) -> bytes:
    disposition = f'form-data; name="{name}"' + (f'; filename="{filename}"' if filename else "")
    return f"--xyz\r\nContent-Disposition: {disposition}\r\n\r\n".encode() + value + b"\r\n"


OPENAI_HEAD = b"POST /v1/audio/transcriptions HTTP/1.1\r\nHost: x\r\nContent-Type: multipart/form-data; boundary=xyz\r\n"


@pytest.mark.integration
def test_openai_route_bodies_over_the_limit_and_slow(server):
    announced = OPENAI_HEAD + f"Content-Length: {MAX_UPLOAD + FORM_OVERHEAD + 1}\r\n\r\n".encode()
    _is_openai_error(*_parse_raw(_raw(server, announced))[:2], 413, "the request body is larger than")  # refused unread
    body = _form_part("model", b"whisper-1") + _form_part("file", b"x" * (MAX_UPLOAD + 1), "a.wav") + b"--xyz--\r\n"
    chunks = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (body[i : i + 65536] for i in range(0, len(body), 65536)))
    answer = _raw(server, OPENAI_HEAD + b"Transfer-Encoding: chunked\r\n\r\n" + chunks + b"0\r\n\r\n")  # counted as streamed
    _is_openai_error(*_parse_raw(answer)[:2], 413, f"file: the upload is larger than {MAX_UPLOAD} bytes")
    answer = _raw(server, OPENAI_HEAD + b"Content-Length: 300\r\n\r\n", _form_part("file", b"RIFF" * 100, "a.wav")[:300])
    _is_openai_error(*_parse_raw(answer)[:2], 408, "the request body did not arrive within 1.5 s")


@pytest.mark.integration
@pytest.mark.parametrize("body, fragment", [
    (b"--xyz\r\nno headers at all", "the multipart/form-data body is malformed"),
    (_form_part("model", b"whisper-1"), "ended before its closing boundary"),
    (b"--xyz\r\nContent-Disposition: form-data\r\n\r\nx\r\n--xyz--\r\n", "a multipart part has no name"),
    (b"".join(_form_part(f"f{i}", b"1") for i in range(MAX_FIELDS + 1)) + b"--xyz--\r\n", f"more than {MAX_FIELDS} fields"),
    (_form_part("prompt", b"x" * (MAX_FIELD_BYTES + 1)) + b"--xyz--\r\n", f"larger than {MAX_FIELD_BYTES} bytes"),
    (_form_part("known_speaker_references[]", b"x" * (MAX_CLIP_FIELD_BYTES + 1)) + b"--xyz--\r\n",
     f"larger than {MAX_CLIP_FIELD_BYTES} bytes"),  # a reference clip's data URL may be larger than a prompt, not more
    (_form_part("prompt", b"\xff\xfe") + b"--xyz--\r\n", "not UTF-8"),
])
def test_openai_route_malformed_forms(server, body, fragment):
    status, answer, _ = _request(server, "POST", "/v1/audio/transcriptions", body, {"Content-Type": "multipart/form-data; boundary=xyz"})
    _is_openai_error(status, answer, 400, fragment)


@pytest.mark.integration
def test_half_open_connections_are_capped_and_dropped(server):
    threads = threading.active_count()
    socks = [socket.create_connection(_address(server), timeout=10) for _ in range(LIMITS.max_connections + 8)]
    try:
        answers = []
        for s in socks:  # each is closed by the server: at once past the cap, after the head timeout otherwise
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            answers.append(out)
    finally:
        for s in socks:
            s.close()
    refused = [_parse_raw(a) for a in answers if a]
    assert len(refused) >= 8 and all(a == b"" for a in answers if not a)
    for status, body, headers in refused:
        _is_error(status, body, 503, "too many connections")
        assert headers["retry-after"] == "1"
    assert threading.active_count() <= threads + 1  # connections cost no threads


@pytest.mark.integration
def test_idle_connection_is_closed(server):
    with socket.create_connection(_address(server), timeout=10) as s:
        s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        out = b""
        while chunk := s.recv(65536):  # the answer, then the close of the idle connection
            out += chunk
    assert out.startswith(b"HTTP/1.1 200") and out.endswith(b'{"status":"ok"}')


@pytest.mark.integration
def test_full_queue_answers_503_with_retry_after(server, media):
    body = media["jfk"].read_bytes()

    def one(_):
        return _request(server, "POST", "/", body, {"Content-Type": "audio/wav"})

    with ThreadPoolExecutor(QUEUE + 6) as pool:
        answers = list(pool.map(one, range(QUEUE + 6)))
    done = [a for a in answers if a[0] == 200]
    busy = [a for a in answers if a[0] != 200]
    assert len(done) >= 1 + QUEUE and busy, [a[:2] for a in answers]
    assert len({a[1]["text"] for a in done}) == 1
    for status, out, headers in busy:
        _is_error(status, out, 503, "busy")
        assert headers["retry-after"] == str(REQUESTS.retry_after_s)


@pytest.mark.integration
def test_deadline_answers_504_and_frees_the_model(endpoint, server, media, tmp_path):
    config = ServerConfig(port=0, connections=LIMITS, requests=RequestLimits(max_upload_bytes=MAX_UPLOAD, request_timeout_s=1.0),
                          access_log=False, spool_dir=tmp_path / "spool")
    with serving(endpoint, config) as hurried:
        status, body, _ = _request(hurried, "POST", "/", media["speech55"].read_bytes(), {"Content-Type": "audio/wav"})
        _is_error(status, body, 504, "deadline of 1 s")
    status, out, _ = _request(server, "POST", "/", media["jfk"].read_bytes(), {"Content-Type": "audio/wav"})
    assert status == 200 and "fellow Americans" in out["text"]


@pytest.mark.integration
def test_errors_are_one_line_json(server):
    _is_error(*_request(server, "GET", "/nope")[:2], 404, "no such path")
    _is_error(*_request(server, "DELETE", "/")[:2], 405, "not allowed")
    _is_error(*_request(server, "POST", "/", b"", {"Content-Type": "audio/wav"})[:2], 400, "empty")
    _is_error(*_request(server, "POST", "/", b"\xff\xfe{", {"Content-Type": "application/json"})[:2], 400, "not valid JSON")
    _is_error(*_request(server, "POST", "/?" + "x" * 100 + "=1", b"RIFF", {"Content-Type": "audio/wav"})[:2], 400, "unknown parameter")
    huge_key = json.dumps({"inputs": "AAAA", "k" * 100_000: 1}).encode()
    _is_error(*_request(server, "POST", "/", huge_key, {"Content-Type": "application/json"})[:2], 400, "unknown field")


_KILLED_SERVER = """
import sys
from pathlib import Path
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.form_upload import FORM_OVERHEAD, MAX_FIELD_BYTES, MAX_FIELDS
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import EndpointServer
server = EndpointServer(Endpoint(preload=False), ServerConfig(port=0, spool_dir=Path(sys.argv[1]), access_log=False))
print(server.url, flush=True)
server.run()
"""


@pytest.mark.integration
def test_uploads_of_a_killed_server_are_removed_on_the_next_start(endpoint, tmp_path):
    spool = tmp_path / "spool"
    proc = subprocess.Popen([sys.executable, "-c", _KILLED_SERVER, str(spool)], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        host, port = proc.stdout.readline().strip().removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as s:
            s.sendall(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\nContent-Length: 100000\r\n\r\n" + b"x" * 1000)
            for _ in range(100):  # the upload is in flight in the spool ...
                if list(spool.glob("*.upload")):
                    break
                time.sleep(0.1)
            assert list(spool.glob("*.upload"))
            os.kill(proc.pid, signal.SIGKILL)  # ... when the server dies
            proc.wait(30)
    finally:
        proc.kill()
        proc.wait(30)
    assert list(spool.glob("*.upload"))
    with serving(endpoint, ServerConfig(port=0, spool_dir=spool, access_log=False)) as again:
        assert again.spool.files() == []
        assert _request(again, "GET", "/health")[0] == 200


# --- the CLI ----------------------------------------------------------------------------------------


def test_cli_tries_every_input(run_cli, media, tmp_path):
    code, _, err = run_cli(tmp_path / "missing.wav", media["jfk"], tmp_path / "gone.mp3", "-o", tmp_path / "out", "-f", "txt", "-q")
    assert code == 1
    errors = err.strip().splitlines()
    assert len(errors) == 2 and all(e.startswith("transcribe: error:") and "file not found" in e for e in errors), err
    assert "fellow Americans" in (tmp_path / "out" / "jfk.txt").read_text()


def test_cli_checks_the_output_folder_before_any_work(run_cli, media, tmp_path, monkeypatch, read_only_dir):
    import specwhisper.pipeline.core

    def no_models(config):
        raise AssertionError("models loaded before the output folder was checked")

    monkeypatch.setattr(specwhisper.pipeline.core, "Pipeline", no_models)
    (tmp_path / "file").write_text("x")
    for out, message in ((tmp_path / "file", "the output folder is a file"), (tmp_path / "file" / "sub", "cannot create the output folder"),
                         (read_only_dir, "cannot write to the output folder")):
        code, _, err = run_cli(media["jfk"], "-o", out, "-q")
        assert code == 2 and err.count("\n") == 1 and message in err, err


def test_cli_same_stems_get_distinct_outputs(run_cli, media, tmp_path):
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "talk.wav").write_bytes(media["jfk"].read_bytes())
    (tmp_path / "b" / "talk.wav").write_bytes(_wav(np.zeros(16000, dtype=np.float32)))
    sf.write(tmp_path / "talk.flac", np.zeros(16000, dtype=np.float32), 16000)
    code, _, err = run_cli(tmp_path / "a/talk.wav", tmp_path / "b/talk.wav", tmp_path / "talk.flac", "-o", tmp_path / "out", "-f", "txt", "-q")
    assert code == 0, err
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["talk.flac.txt", "talk.wav-2.txt", "talk.wav.txt"]
    assert "fellow Americans" in (tmp_path / "out/talk.wav.txt").read_text()
    assert (tmp_path / "out/talk.wav-2.txt").read_text() == ""


def test_cli_long_and_lying_files_are_refused_within_the_limit(run_cli, media, tmp_path):
    code, _, err = run_cli(media["long"], media["lying"], media["jfk"], "--max-duration", MAX_AUDIO_S, "-o", tmp_path, "-f", "txt", "-q")
    assert code == 1
    lines = err.strip().splitlines()
    assert len(lines) == 2 and all("over the limit of 60 s" in line for line in lines), err
    assert f"{2 * MAX_AUDIO_S} s of audio" in lines[0]
    assert (tmp_path / "jfk.txt").exists()


# --- writing outputs --------------------------------------------------------------------------------


def _transcript():
    from specwhisper.results.transcript import Segment, Transcript

    return Transcript(segments=[Segment(start=0.0, end=1.0, text=" hello")], language="en", duration=1.0)


def test_concurrent_writers_never_collide(tmp_path):
    from specwhisper.pipeline.writers import ALL_FORMATS, write_outputs

    t = _transcript()
    errors = []

    def writer(_):
        try:
            for _ in range(25):
                write_outputs(t, tmp_path, "talk", list(ALL_FORMATS))
        except OSError as exc:
            errors.append(exc)

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(writer, range(2)))
    assert not errors
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"talk.{f}" for f in ALL_FORMATS)
    assert json.loads((tmp_path / "talk.json").read_text())["text"] == "hello"


def test_a_failed_write_leaves_nothing_behind(tmp_path, monkeypatch):
    import specwhisper.pipeline.writers as writers

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(writers.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    t = _transcript()
    assert [p.name for p in writers.write_outputs(t, tmp_path, "ok", ["txt", "srt"])] == ["ok.txt", "ok.srt"]
    assert len(synced) == 3  # each file, then the folder
    (tmp_path / "talk.txt").write_text("earlier run\n")
    real_render = writers.render

    def failing(transcript, fmt, layout=writers.NO_LAYOUT):
        if fmt == "vtt":
            raise OSError(28, "No space left on device")
        return real_render(transcript, fmt, layout)

    monkeypatch.setattr(writers, "render", failing)
    with pytest.raises(OSError):
        writers.write_outputs(t, tmp_path, "talk", ["txt", "srt", "vtt", "json"])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.srt", "ok.txt", "talk.txt"]
    assert (tmp_path / "talk.txt").read_text() == "earlier run\n"


@pytest.mark.parametrize("links", [True, False])
def test_a_rename_that_fails_midway_puts_the_earlier_outputs_back(tmp_path, monkeypatch, links):
    """The second of three renames into place fails (EIO): the first format's new file had already
    replaced the earlier run's, which comes back; the earlier set is whole and nothing hidden is left
    (``links`` False: a file system without hard links, where the earlier files are copied aside)."""
    import specwhisper.pipeline.writers as writers

    earlier = {f"talk.{fmt}": f"earlier {fmt}\n" for fmt in ("txt", "srt", "json")}
    for name, text in earlier.items():
        (tmp_path / name).write_text(text)
    if not links:
        monkeypatch.setattr(writers.os, "link", lambda a, b: (_ for _ in ()).throw(OSError(1, "Operation not permitted")))
    real_replace, renames = Path.replace, []

    def failing(self, target):
        renames.append(target)
        if len(renames) == 2:
            raise OSError(5, "Input/output error")
        return real_replace(self, target)

    monkeypatch.setattr(Path, "replace", failing)
    with pytest.raises(OSError, match="Input/output error"):
        writers.write_outputs(_transcript(), tmp_path, "talk", ["txt", "srt", "json"])
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == earlier
    monkeypatch.setattr(Path, "replace", real_replace)
    writers.write_outputs(_transcript(), tmp_path, "talk", ["txt", "srt", "json"])  # and a whole new set, alone
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(earlier) and (tmp_path / "talk.txt").read_text() == "hello\n"


def test_an_output_made_read_only_is_not_replaced(run_cli, media, tmp_path):
    """A transcript someone corrected and made read-only (chmod a-w): a rerun writes none of the set (the
    writable txt neither) and says which file stopped it; the CLI says so before any model loads. Root
    may write any file: the mode is the owner's word, so the refusal holds for root too."""
    from specwhisper.pipeline.writers import write_outputs

    (tmp_path / "talk.srt").write_text("corrected by hand\n")
    (tmp_path / "talk.txt").write_text("earlier\n")
    (tmp_path / "talk.srt").chmod(0o444)
    with pytest.raises(PermissionError, match="talk.srt is read-only: make it writable or remove it"):
        write_outputs(_transcript(), tmp_path, "talk", ["txt", "srt"])
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"talk.srt": "corrected by hand\n", "talk.txt": "earlier\n"}
    talk = tmp_path / "talk.wav"
    talk.write_bytes(media["jfk"].read_bytes())
    code, out, err = run_cli(talk, "-o", tmp_path, "-f", "txt,srt")
    assert code == 2 and err == f"transcribe: error: {tmp_path / 'talk.srt'} is read-only: make it writable or remove it " \
                                "to write it again\n", err
    assert (tmp_path / "talk.srt").read_text() == "corrected by hand\n"
    assert run_cli(talk, "-o", tmp_path, "-f", "txt,vtt", "-q")[0] == 0  # the other formats are written
    assert (tmp_path / "talk.txt").read_text() != "earlier\n"


def test_in_memory_uploads_go_through_a_swept_spool(tmp_path):
    """The endpoint handler and the UI decode uploads held in memory through a file: it lives in a
    spool named after its process, so what a killed handler left is removed when the next one starts,
    and a decode (good or bad) leaves nothing behind."""
    from specwhisper.audio.loading import AudioError
    from specwhisper.serving.service import ServiceSettings, PipelinePool
    from specwhisper.serving.spool import SUFFIX

    spool = tmp_path / "spool"
    spool.mkdir()
    dead = spool / f"999999999.1-0123456789abcdef{SUFFIX}"  # no such process runs
    dead.write_bytes(b"left by a killed handler")
    service = PipelinePool(ServiceSettings(spool_dir=spool))
    wav = io.BytesIO()
    sf.write(wav, np.zeros(16000, dtype=np.float32), 16000, format="WAV")
    audio = service.load(wav.getvalue(), "one-second.wav")
    assert audio.shape == (16000,)
    assert not dead.exists() and list(spool.iterdir()) == []
    with pytest.raises(AudioError, match="^garbage.wav: "):
        service.load(b"not audio at all" * 100, "garbage.wav")
    assert list(spool.iterdir()) == []


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_outputs_get_the_mode_the_umask_gives_a_new_file(tmp_path, umask):
    """Written as openai-whisper writes them (``open(path, "w")``): a transcript others may read under
    the usual umask, and an earlier file's mode does not survive its rewrite."""
    from specwhisper.pipeline.writers import write_outputs

    (tmp_path / "talk.txt").write_text("earlier run\n")
    os.chmod(tmp_path / "talk.txt", 0o600)
    before = os.umask(umask)
    try:
        with open(tmp_path / "peer.txt", "w") as f:  # how a peer's writer opens its outputs
            f.write("x")
        write_outputs(_transcript(), tmp_path, "talk", ["txt", "srt"])
    finally:
        os.umask(before)
    peer = (tmp_path / "peer.txt").stat().st_mode & 0o777
    assert {(tmp_path / f"talk.{f}").stat().st_mode & 0o777 for f in ("txt", "srt")} == {peer}
