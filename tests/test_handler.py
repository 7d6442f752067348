"""handler.EndpointHandler (the Inference Endpoints contract), called directly and over loopback HTTP,
with a bounded load test; and `python -m specwhisper.serving.serve`, the Docker image's command."""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from handler import EndpointHandler
from specwhisper.evaluation.transcripts import wer
from specwhisper.serving.params import Choices
from specwhisper.serving.http_app import RequestLimits
from specwhisper.serving.serve import ServerConfig, serving
from specwhisper.serving.service import ServiceSettings

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "samples" / "jfk.wav"
JFK_REF = "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."
LOAD_REQUESTS, LOAD_CONCURRENCY = 50, 4


@pytest.fixture(scope="module")
def handler():
    settings = ServiceSettings(choices=Choices(models=("base", "tiny.en"), drafters=("auto", "none", "ngram")),
                               max_audio_s=60, max_upload_bytes=2 * 2**20)
    return EndpointHandler("", settings=settings)


@pytest.fixture(scope="module")
def jfk_bytes():
    return JFK.read_bytes()


@pytest.fixture(scope="module")
def jfk_head():
    """The first 3.5 s of jfk.wav ("And so my fellow Americans"), as wav bytes: short requests for the load test."""
    audio, rate = sf.read(JFK, dtype="int16")
    buf = io.BytesIO()
    sf.write(buf, audio[: int(3.5 * rate)], rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


@pytest.fixture(scope="module")
def server(handler, tmp_path_factory):
    config = ServerConfig(port=0, requests=RequestLimits(max_upload_bytes=2 * 2**20), access_log=False,
                          spool_dir=tmp_path_factory.mktemp("spool"))
    with serving(handler.endpoint, config) as srv:
        yield srv


def _is_error(result: dict, status: int, fragment: str) -> None:
    assert set(result) == {"error", "status"}, result
    assert result["status"] == status, result
    assert fragment in result["error"], result
    assert "\n" not in result["error"] and "Traceback" not in result["error"]


def test_bytes_and_base64(handler, jfk_bytes):
    raw = handler({"inputs": jfk_bytes})
    assert "error" not in raw, raw
    assert wer([JFK_REF], [raw["text"]]) <= 0.05
    assert raw["language"] == "en" and raw["duration"] == pytest.approx(11.0, abs=0.01)
    segs = raw["segments"]
    assert segs and all(0 <= s["start"] < s["end"] <= 11.0 for s in segs)
    assert [s["start"] for s in segs] == sorted(s["start"] for s in segs)
    # not diarized, no word timestamps: no speaker or words key (openai-whisper's and WhisperX's readers test for them)
    assert all({"id", "start", "end", "text", "overlap"} <= set(s) and not {"tokens", "speaker", "words"} & set(s) for s in segs)
    assert {"rtf", "total", "asr", "load_audio", "request"} <= set(raw["timings"]) and raw["timings"]["rtf"] > 0
    assert {"acceptance_rate", "tokens_per_target_pass"} <= set(raw["speculative"])
    assert raw["model"]["asr"] == "base"

    b64 = handler({"inputs": base64.b64encode(jfk_bytes).decode(), "parameters": {"formats": ["srt", "vtt"]}})
    assert b64["text"] == raw["text"]
    assert re.match(r"1\n00:00:\d\d,\d{3} --> 00:00:\d\d,\d{3}\n\S", b64["outputs"]["srt"])
    assert b64["outputs"]["vtt"].startswith("WEBVTT\n\n")
    data_url = handler({"inputs": "data:audio/wav;base64," + base64.b64encode(jfk_bytes).decode()})
    assert data_url["text"] == raw["text"]


def test_drafter_is_exact(handler, jfk_bytes):
    plain = handler({"inputs": jfk_bytes, "parameters": {"draft": "none"}})
    ngram = handler({"inputs": jfk_bytes, "parameters": {"draft": "ngram"}})
    assert ngram["text"] == plain["text"]
    assert [(s["start"], s["end"]) for s in ngram["segments"]] == [(s["start"], s["end"]) for s in plain["segments"]]
    assert ngram["model"]["draft"] == "ngram" and ngram["speculative"]["drafted_tokens"] > 0
    assert plain["speculative"]["drafted_tokens"] == 0
    assert {("base", "none"), ("base", "ngram")} <= set(handler.endpoint.transcriber.loaded())


def test_diarized_segments_carry_speakers(handler, jfk_bytes):
    out = handler({"inputs": jfk_bytes, "parameters": {"diarize": True, "formats": ["rttm"]}})
    assert "error" not in out, out
    assert out["speakers"] == ["SPEAKER_00"]
    assert out["segments"] and all(s["speaker"] == "SPEAKER_00" for s in out["segments"])
    assert all(w["speaker"] == "SPEAKER_00" for s in out["segments"] for w in s["words"])  # word timestamps on with diarize
    assert sum(len(s["words"]) for s in out["segments"]) >= 20
    assert "diarization" in out["timings"]
    assert out["outputs"]["rttm"].startswith("SPEAKER ")


def test_postedit_reports_its_decode(handler, jfk_bytes):
    out = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "postedit": True}})
    assert "error" not in out, out
    assert wer([JFK_REF], [out["text"]]) <= 0.15
    assert out["timings"]["postedit"] > 0
    report = out["model"]["postedit"]
    assert report["accepted"] + report["rejected"] >= 1 and report["tokens_per_target_pass"] >= 1.0


@pytest.mark.parametrize(
    "data, status, fragment",
    [
        ({"inputs": b"RIFF", "parameters": {"num_beams": 5}}, 400, "unknown parameter 'num_beams'"),
        ({"inputs": b"RIFF", "parameters": {"beam_size": 0}}, 400, "parameters.beam_size"),
        ({"inputs": b"RIFF", "parameters": {"temperature": 1.5}}, 400, "parameters.temperature"),
        ({"inputs": b"RIFF", "parameters": {"model": "openai/whisper-large-v3"}}, 400, "parameters.model: 'openai/whisper-large-v3' is not offered"),
        ({"inputs": b"RIFF", "parameters": {"draft": "/etc"}}, 400, "parameters.draft"),
        ({"inputs": b"RIFF", "parameters": {"num_speakers": 0}}, 400, "parameters.num_speakers"),
        ({"inputs": b"RIFF", "parameters": {"batch_size": "many"}}, 400, "parameters.batch_size"),
        ({"inputs": b"RIFF", "parameters": {"task": "summarize"}}, 400, "parameters.task"),
        ({"inputs": b"RIFF", "parameters": {"formats": ["docx"]}}, 400, "parameters.formats.0"),
        ({"inputs": b"RIFF", "parameters": {"min_speakers": 3, "max_speakers": 2}}, 400, "min-speakers (3) is larger than max-speakers (2)"),
        ({"inputs": b"RIFF", "parameters": "fast"}, 400, "parameters must be an object"),
        ({"inputs": "not base64!"}, 400, "not valid base64"),
        ({"inputs": b""}, 400, "empty"),
        ({"inputs": 42}, 400, "expected audio bytes or a base64 string"),
        ({"parameters": {}}, 400, "inputs: missing"),
        ({"inputs": b"x", "options": {}}, 400, "unknown field 'options'"),
        (["not", "a", "dict"], 400, "must be an object"),
        ({"inputs": b"this is a text file, not audio"}, 400, "inputs: not a readable audio file"),
        ({"inputs": b"x" * (2 * 2**20 + 1)}, 413, "larger than"),
    ],
)
def test_bad_requests_are_one_line_errors(handler, data, status, fragment):
    _is_error(handler(data), status, fragment)


def test_options_the_model_refuses(handler, jfk_bytes):
    _is_error(handler({"inputs": jfk_bytes, "parameters": {"language": "xx"}}), 400, "unknown language code 'xx'")
    _is_error(handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "task": "translate"}}), 400, "English-only")


def test_audio_over_the_limit(handler):
    buf = io.BytesIO()
    sf.write(buf, np.zeros(61 * 16000, dtype=np.float32), 16000, format="WAV")
    _is_error(handler({"inputs": buf.getvalue()}), 400, "over the limit of 60 s")


def _post(url: str, body: bytes, content_type: str) -> tuple[int, dict]:
    req = urllib.request.Request(url, data=body, headers={"Content-Type": content_type}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=120) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_http_server(server, jfk_head):
    with urllib.request.urlopen(server.url + "/health", timeout=10) as resp:
        assert resp.status == 200 and json.loads(resp.read()) == {"status": "ok"}
    body = json.dumps({"inputs": base64.b64encode(jfk_head).decode(), "parameters": {"model": "tiny.en"}}).encode()
    status, out = _post(server.url + "/", body, "application/json")
    assert status == 200 and "fellow Americans" in out["text"], out
    status, raw = _post(server.url + "/predict?model=tiny.en&formats=srt,tsv", jfk_head, "audio/wav")
    assert status == 200 and raw["text"] == out["text"] and set(raw["outputs"]) == {"srt", "tsv"}
    status, err = _post(server.url + "/?model=tiny.en&diarize=maybe", jfk_head, "audio/wav")
    assert status == 400 and "parameters.diarize" in err["error"]
    status, err = _post(server.url + "/", b"{not json", "application/json")
    assert status == 400 and "not valid JSON" in err["error"]
    status, err = _post(server.url + "/", b"plain text", "text/plain")
    assert status == 400 and "not a readable audio file" in err["error"]
    status, err = _post(server.url + "/transcribe", jfk_head, "audio/wav")
    assert status == 404
    conn = http.client.HTTPConnection(*server.socket.getsockname()[:2], timeout=30)
    conn.putrequest("POST", "/")  # announce a body over the limit: refused before any of it is read
    conn.putheader("Content-Type", "audio/wav")
    conn.putheader("Content-Length", str(server.config.requests.max_upload_bytes + 1))
    conn.endheaders()
    resp = conn.getresponse()
    assert resp.status == 413 and "larger than" in json.loads(resp.read())["error"]
    conn.close()


def test_load_loses_nothing(server, jfk_head):
    """LOAD_REQUESTS requests, LOAD_CONCURRENCY at a time: every one answered, all the same; latencies printed."""
    body = json.dumps({"inputs": base64.b64encode(jfk_head).decode(), "parameters": {"model": "tiny.en"}}).encode()

    def one(i: int) -> tuple[int, float, str]:
        t = time.perf_counter()
        status, out = _post(server.url + "/", body, "application/json")
        return status, time.perf_counter() - t, out.get("text", out.get("error", ""))

    t0 = time.perf_counter()
    with ThreadPoolExecutor(LOAD_CONCURRENCY) as pool:
        results = list(pool.map(one, range(LOAD_REQUESTS)))
    wall = time.perf_counter() - t0
    assert len(results) == LOAD_REQUESTS
    assert [s for s, _, _ in results] == [200] * LOAD_REQUESTS, [r for r in results if r[0] != 200][:3]
    assert len({text for _, _, text in results}) == 1 and "fellow Americans" in results[0][2]
    lat = np.array([dt for _, dt, _ in results])
    p50, p90, p99 = np.percentile(lat, [50, 90, 99])
    print(f"\nload test: {LOAD_REQUESTS} requests, {LOAD_CONCURRENCY} concurrent, 3.5 s clip, tiny.en: "
          f"p50 {p50:.2f} s, p90 {p90:.2f} s, p99 {p99:.2f} s, max {lat.max():.2f} s; "
          f"{LOAD_REQUESTS / wall:.2f} req/s over {wall:.1f} s")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command(jfk_head, tmp_path):
    """`python -m specwhisper.serving.serve`, as the Docker image runs it, configured by SPECWHISPER_* variables."""
    port = _free_port()
    env = {**os.environ, "SPECWHISPER_MODELS": "tiny.en", "SPECWHISPER_DRAFTERS": "none", "SPECWHISPER_MAX_AUDIO_S": "30"}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "specwhisper.serving.serve", "--port", str(port), "--quiet"], cwd=ROOT, env=env,
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert proc.poll() is None, (tmp_path / "serve.log").read_text()
            try:
                with urllib.request.urlopen(url + "/health", timeout=5):
                    break
            except OSError:
                assert time.monotonic() < deadline, "server did not come up in 180 s"
                time.sleep(0.5)
        status, out = _post(url + "/", jfk_head, "audio/wav")
        assert status == 200 and out["model"]["asr"] == "tiny.en" and "fellow Americans" in out["text"]
        status, err = _post(url + "/?model=base", jfk_head, "audio/wav")
        assert status == 400 and "choose from tiny.en" in err["error"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()
