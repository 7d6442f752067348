"""handler.EndpointHandler (the Inference Endpoints contract), called directly and over loopback HTTP,
with a bounded load test; and `python -m specwhisper.serving.http.serve`, the Docker image's command."""

from __future__ import annotations

import base64
import http.client
import io
import json
import os
import re
import shutil
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
from specwhisper.asr.options import DecodeOptions
from specwhisper.asr.decoding.language import normalize_language
from specwhisper.asr.weights.loader import load_whisper, resolve_model_path, write_ct2_folder
from specwhisper.evaluation.transcripts import load_manifest, wer
from specwhisper.serving.params import Choices, RequestError
from specwhisper.serving.http.config import RequestLimits, ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.endpoint.repository import RepositoryModels, find_models, whisper_folder, with_repository
from specwhisper.serving.service import ServiceSettings
from tests.hf_toolkit import toolkit_app

ROOT = Path(__file__).resolve().parents[1]
JFK = ROOT / "samples" / "jfk.wav"
JFK_REF = "And so my fellow Americans ask not what your country can do for you, ask what you can do for your country."
LOAD_REQUESTS, LOAD_CONCURRENCY = 12, 4  # three rounds of four waiting together


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


def _raises(handler, data, status: int, fragment: str) -> None:
    """The Endpoint's error dict (our HTTP server's contract) and the same failure raised by the
    handler (the inference toolkit's: an exception becomes HTTP 400)."""
    _is_error(handler.endpoint(data), status, fragment)
    with pytest.raises(RequestError) as info:
        handler(data)
    assert info.value.status == status and fragment in str(info.value) and "\n" not in str(info.value)


def test_bytes_and_base64(handler, jfk_bytes, jfk_head):
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

    # the other ways to send the audio, and the formats, on the clip's first 3.5 s with tiny.en
    tiny, head_b64 = {"model": "tiny.en"}, base64.b64encode(jfk_head).decode()
    plain = handler({"inputs": jfk_head, "parameters": tiny})
    assert "fellow americans" in plain["text"].lower(), plain
    b64 = handler({"inputs": head_b64, "parameters": {**tiny, "formats": ["srt", "vtt"]}})
    assert b64["text"] == plain["text"]
    assert re.match(r"1\n00:00:\d\d,\d{3} --> 00:00:\d\d,\d{3}\n\S", b64["outputs"]["srt"])
    assert b64["outputs"]["vtt"].startswith("WEBVTT\n\n")
    every = handler({"inputs": jfk_head, "parameters": {**tiny, "formats": "all"}})  # the CLI's and the API's word
    assert set(every["outputs"]) == {"txt", "srt", "vtt", "json", "tsv", "rttm"} and every["outputs"]["srt"] == b64["outputs"]["srt"]
    data_url = handler({"inputs": "data:audio/wav;base64," + head_b64, "parameters": tiny})
    assert data_url["text"] == plain["text"]


def test_drafter_is_exact(handler, jfk_bytes):
    plain = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "draft": "none"}})
    ngram = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "draft": "ngram"}})
    assert ngram["text"] == plain["text"]
    assert [(s["start"], s["end"]) for s in ngram["segments"]] == [(s["start"], s["end"]) for s in plain["segments"]]
    assert ngram["model"]["draft"] == "ngram" and ngram["speculative"]["drafted_tokens"] > 0
    assert plain["speculative"]["drafted_tokens"] == 0
    assert {("tiny.en", "none"), ("tiny.en", "ngram")} <= set(handler.endpoint.transcriber.loaded())


def test_diarized_segments_carry_speakers(handler, jfk_bytes):
    """Diarized: every segment and word carries the one speaker (tiny.en: the speakers do not depend on the model)."""
    out = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "diarize": True, "formats": ["rttm"]}})
    assert "error" not in out, out
    assert out["speakers"] == ["SPEAKER_00"]
    assert out["segments"] and all(s["speaker"] == "SPEAKER_00" for s in out["segments"])
    assert all(w["speaker"] == "SPEAKER_00" for s in out["segments"] for w in s["words"])  # word timestamps on with diarize
    assert sum(len(s["words"]) for s in out["segments"]) >= 20
    assert "diarization" in out["timings"]
    assert out["outputs"]["rttm"].startswith("SPEAKER ")


def test_an_aligned_text_carries_speakers(handler, jfk_bytes):
    """A script aligned and diarized in one request (WhisperX's align-then-assign): the words are the
    script's, each with a time and the speaker (tiny.en: neither depends on the model)."""
    said = "And so, my fellow Americans: ask not what your country can do for you; ask what you can do for your country."
    out = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "align_text": said, "diarize": True}})
    assert "error" not in out, out
    words = [w for s in out["segments"] for w in s["words"]]
    assert [w["word"].strip() for w in words] == said.split()
    assert all(0 <= w["start"] <= w["end"] <= 11.0 and w["speaker"] == "SPEAKER_00" for w in words)
    assert out["model"]["aligned_text"] == {"text_words": 22, "matched_words": 22, "matched_share": 1.0}


def test_known_speakers_name_the_speakers(handler, jfk_bytes, eval_root):
    """A known speaker's clip names the speaker (tiny.en: the name does not depend on the model)."""
    clip = "data:audio/flac;base64," + base64.b64encode((eval_root / "openai-whisper/jfk.flac").read_bytes()).decode()
    out = handler({"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "known_speakers": {"president": clip}, "formats": ["rttm"],
                                                       "speaker_embeddings": True}})
    assert "error" not in out, out
    assert out["speakers"] == ["president"] and {s["speaker"] for s in out["segments"]} == {"president"}
    assert out["outputs"]["rttm"].split()[7] == "president"
    assert list(out["speaker_embeddings"]) == ["president"] and len(out["speaker_embeddings"]["president"]) == 192


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
        ({"inputs": b"RIFF", "parameters": {"beam_width": 5}}, 400, "unknown parameter 'beam_width'"),
        ({"inputs": b"RIFF", "parameters": {"num_beams": 5, "beam_size": 2}}, 400, "beam_size is 2 but num_beams is 5"),
        ({"inputs": b"RIFF", "parameters": {"stride_length_s": [1, -2]}}, 400, "parameters.stride_length_s: seconds of overlap"),
        ({"inputs": b"RIFF", "parameters": {"generate_kwargs": {"do_sample": "x"}}}, 400,
         "generate_kwargs.do_sample: must be true or false"),
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
        ({"inputs": b"RIFF", "parameters": {"known_speakers": {"ann": "/etc/passwd"}}}, 400,
         "parameters.known_speakers: 'ann': send the clip itself as a data URL"),  # never a server's file
        ({"inputs": "not base64!"}, 400, "not valid base64"),
        ({"inputs": b""}, 400, "empty"),
        ({"inputs": 42}, 400, "expected audio bytes, a base64 string or"),
        ({"inputs": []}, 400, "inputs: an empty list"),
        ({"inputs": [b"RIFF", 42]}, 400, "inputs[1]: expected audio bytes"),
        ({"inputs": {"raw": [0.1, 0.2], "rate": 16000}}, 400, "samples come as"),
        ({"inputs": {"raw": [0.1, 0.2], "sampling_rate": 16000.5}}, 400, "inputs.sampling_rate: a whole number of Hz"),
        ({"inputs": {"raw": "abc", "sampling_rate": 16000}}, 400, "inputs.raw: expected a list of numbers"),
        ({"inputs": {"array": [0.1, float("nan")], "sampling_rate": 16000}}, 400, "inputs.array: the samples must be finite"),
        ({"inputs": {"raw": [], "sampling_rate": 16000}}, 400, "inputs: the audio is empty (0 samples)"),
        ({"parameters": {}}, 400, "inputs: missing"),
        ({"inputs": b"x", "options": {}}, 400, "unknown field 'options'"),
        (["not", "a", "dict"], 400, "must be an object"),
        ({"inputs": b"this is a text file, not audio"}, 400, "inputs: not a readable audio file"),
        ({"inputs": b"x" * (2 * 2**20 + 1)}, 413, "larger than"),
    ],
)
def test_bad_requests_are_one_line_errors(handler, data, status, fragment):
    _raises(handler, data, status, fragment)


def test_what_transformers_pipeline_takes(handler, jfk_head):
    """transformers' ASR pipeline's own parameters and input shapes, as a client written for it sends them:
    generate kwargs among the parameters, ``return_language``, its chunking settings (no effect here), a list
    of inputs (one pass, an answer each) and ``{"raw": samples, "sampling_rate": Hz}``."""
    tiny = {"model": "tiny.en"}
    plain = handler({"inputs": jfk_head, "parameters": tiny})
    assert "fellow americans" in plain["text"].lower() and "chunks" not in plain
    beams = handler({"inputs": jfk_head, "parameters": {**tiny, "generate_kwargs": {"num_beams": 2}}})
    assert handler({"inputs": jfk_head, "parameters": {**tiny, "num_beams": 2}})["segments"] == beams["segments"]
    taken = {**tiny, "return_timestamps": None, "stride_length_s": [4, 2], "chunk_length_s": 30, "ignore_warning": True,
             "decoder_kwargs": {}, "generate_kwargs": {"do_sample": False, "use_cache": True}}
    same = handler({"inputs": jfk_head, "parameters": taken})
    assert same["segments"] == plain["segments"] and "chunks" not in same
    named = handler({"inputs": jfk_head, "parameters": {**tiny, "return_language": True}})["chunks"]
    assert named == [{"text": s["text"], "language": "english"} for s in plain["segments"]]
    words = handler({"inputs": jfk_head, "parameters": {**tiny, "return_language": True, "return_timestamps": "word"}})["chunks"]
    assert len(words) >= 4 and all(set(w) == {"text", "timestamp", "language"} and w["language"] == "english" for w in words)

    samples, rate = sf.read(io.BytesIO(jfk_head), dtype="float32")
    batch = handler({"inputs": [jfk_head, base64.b64encode(jfk_head).decode(), {"raw": samples.tolist(), "sampling_rate": rate}],
                     "parameters": tiny})
    assert isinstance(batch, list) and [b["segments"] for b in batch] == [plain["segments"]] * 3
    stereo = {"array": np.stack([samples, samples]), "sampling_rate": rate, "path": "jfk.wav"}  # a datasets row
    assert handler({"inputs": stereo, "parameters": tiny})["segments"] == plain["segments"]
    _raises(handler, {"inputs": [jfk_head, b"this is a text file, not audio"], "parameters": tiny}, 400,
            "inputs[1]: not a readable audio file")


def test_options_the_model_refuses(handler, jfk_bytes):
    _raises(handler, {"inputs": jfk_bytes, "parameters": {"language": "xx"}}, 400, "unknown language code 'xx'")
    _raises(handler, {"inputs": jfk_bytes, "parameters": {"model": "tiny.en", "task": "translate"}}, 400, "English-only")


def test_audio_over_the_limit(handler):
    buf = io.BytesIO()
    sf.write(buf, np.zeros(61 * 16000, dtype=np.float32), 16000, format="WAV")
    _raises(handler, {"inputs": buf.getvalue()}, 400, "over the limit of 60 s")


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
    """`python -m specwhisper.serving.http.serve`, as the Docker image runs it, configured by SPECWHISPER_* variables."""
    port = _free_port()
    env = {**os.environ, "SPECWHISPER_MODELS": "tiny.en", "SPECWHISPER_DRAFTERS": "none", "SPECWHISPER_MAX_AUDIO_S": "30"}
    log = (tmp_path / "serve.log").open("w")
    proc = subprocess.Popen([sys.executable, "-m", "specwhisper.serving.http.serve", "--port", str(port), "--quiet"], cwd=ROOT, env=env,
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


# --- The Hugging Face Inference Endpoints contract: the toolkit's request handling (tests/hf_toolkit.py,
# a copy of huggingface-inference-toolkit 0.5.6's, checked byte for byte against the real one on 8 request
# kinds x 2 HF_TASK values), the ASR pipeline's parameters, and models brought by the repository.

@pytest.fixture(scope="module")
def jfk_flac(eval_root) -> tuple[bytes, str]:
    """openai-whisper's tests/jfk.flac (44.1 kHz stereo 24-bit) and its reference transcript."""
    item = next(i for i in load_manifest(eval_root) if i.file == "openai-whisper/jfk.flac")
    return item.path.read_bytes(), item.reference


@pytest.fixture(scope="module")
def toolkit(handler):
    from starlette.testclient import TestClient

    with TestClient(toolkit_app(handler)) as client:
        yield client


def _toolkit_error(resp, fragment: str) -> None:
    assert resp.status_code == 400 and resp.headers["content-type"] == "application/json", (resp.status_code, resp.text)
    body = resp.json()
    assert set(body) == {"error"} and fragment in body["error"] and "\n" not in body["error"], body


def test_toolkit_raw_audio_with_query_parameters(toolkit, jfk_flac):
    """A raw FLAC body with ``?formats=srt&return_timestamps=true&language=english``: the toolkit puts
    the query into ``parameters`` as text ("true" -> True), and the answer has ``text`` and
    transformers-style segment ``chunks``."""
    flac, reference = jfk_flac
    resp = toolkit.post("/?formats=srt&return_timestamps=true&language=english", content=flac,
                        headers={"Content-Type": "audio/flac"})
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json", resp.text
    out = resp.json()
    assert wer([reference], [out["text"]]) <= 0.05, out["text"]
    assert out["language"] == "en" and set(out["outputs"]) == {"srt"}
    assert re.match(r"1\n00:00:\d\d,\d{3} --> 00:00:\d\d,\d{3}\n\S", out["outputs"]["srt"])
    chunks = out["chunks"]
    assert len(chunks) == len(out["segments"]) >= 1
    assert [c["timestamp"] for c in chunks] == [[s["start"], s["end"]] for s in out["segments"]]
    assert wer([out["text"]], [" ".join(c["text"] for c in chunks)]) == 0.0


def test_toolkit_json_with_generate_kwargs(handler, jfk_flac):
    """JSON ``{"inputs": base64, "parameters": {...}}`` with HF_TASK=automatic-speech-recognition (the
    toolkit base64-decodes ``inputs`` itself then): ``generate_kwargs`` as transformers' ASR pipeline
    takes them, a language name, and word-level ``chunks``."""
    from starlette.testclient import TestClient

    flac, reference = jfk_flac
    params = {"return_timestamps": "word", "chunk_length_s": 30, "batch_size": 4,
              "generate_kwargs": {"language": "English", "task": "transcribe", "num_beams": 1, "temperature": [0.0, 0.5, 1.0]}}
    with TestClient(toolkit_app(handler, task="automatic-speech-recognition")) as client:
        resp = client.post("/", json={"inputs": base64.b64encode(flac).decode(), "parameters": params})
    assert resp.status_code == 200, resp.text
    out = resp.json()
    assert wer([reference], [out["text"]]) <= 0.05 and out["language"] == "en"
    words = out["chunks"]
    assert len(words) >= 20 and wer([out["text"]], [" ".join(w["text"] for w in words)]) == 0.0
    starts = [w["timestamp"][0] for w in words]
    assert starts == sorted(starts) and all(0 <= s <= e <= 11.0 for s, e in (w["timestamp"] for w in words))
    direct = handler({"inputs": flac, "parameters": {"return_timestamps": True, "language": "en"}})
    assert wer([reference], [direct["text"]]) <= 0.05 and isinstance(direct["chunks"][0]["timestamp"], tuple)


@pytest.mark.parametrize(
    "query, body, fragment",
    [
        ("", b"this is a text file, not audio", "inputs: not a readable audio file"),
        ("?beam_size=0", None, "parameters.beam_size"),
        ("?language=klingon", None, "parameters.language: unknown language 'klingon'"),
        ("?formats=srt,docx", None, "parameters.formats.1"),
        ("?return_timestamps=char", None, "parameters.return_timestamps: must be true, false or 'word'"),
        ("?chunk_length_s=60", None, "parameters.chunk_length_s"),
        ("?num_beam=5", None, "unknown parameter 'num_beam'"),
    ],
)
def test_toolkit_bad_requests_are_400(toolkit, jfk_head, query, body, fragment):
    """The toolkit answers a handler's exception with 400 and ``{"error": str(exc)}``: our one line."""
    _toolkit_error(toolkit.post("/" + query, content=body or jfk_head, headers={"Content-Type": "audio/wav"}), fragment)


def test_toolkit_bad_generate_kwargs_are_400(toolkit, jfk_head):
    def post(parameters):
        return toolkit.post("/", json={"inputs": base64.b64encode(jfk_head).decode(), "parameters": parameters})

    _toolkit_error(post({"generate_kwargs": {"max_length": 5}}), "generate_kwargs: unknown key 'max_length'")
    _toolkit_error(post({"generate_kwargs": {"temperature": [0.0, 0.3, 0.4]}}), "rise in equal steps")
    _toolkit_error(post({"language": "de", "generate_kwargs": {"language": "english"}}), "language is 'de' but")
    _toolkit_error(post({"generate_kwargs": "fast"}), "generate_kwargs must be an object")


def test_language_names_everywhere():
    """Names and codes as users write them become codes in DecodeOptions.validate (CLI, server, endpoint)."""
    assert [normalize_language(x) for x in ("en", "EN", "english", "English", "German", "mandarin", "<|fr|>", "auto", "", None)] == \
        ["en", "en", "en", "en", "de", "zh", "fr", None, None, None]
    opts = DecodeOptions(language="German")
    opts.validate()
    assert opts.language == "de"
    with pytest.raises(ValueError, match=r"^unknown language 'Klingon' \(give a code"):
        DecodeOptions(language="Klingon").validate()


def _save_whisper(name: str, folder: Path) -> Path:
    """An embedded model as ``save_pretrained`` / ``push_to_hub`` lay out a repository (its converted
    folder is one: written by transformers' ``save_pretrained``)."""
    shutil.copytree(resolve_model_path(name), folder, dirs_exist_ok=True)
    return folder


def test_models_from_the_repository(tmp_path_factory, jfk_bytes, jfk_head):
    """A repository holding a Whisper model (tiny.en here) at its root and a drafter in ``drafter/``:
    the handler serves them by default, not the embedded base (which it still offers: asked for by name,
    on the clip's first 3.5 s)."""
    repo = tmp_path_factory.mktemp("repository")
    (repo / "handler.py").write_text((ROOT / "handler.py").read_text())
    _save_whisper("tiny.en", repo)
    _save_whisper("tiny.en", repo / "drafter")
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= {p.name for p in repo.iterdir()}
    settings = ServiceSettings(choices=Choices(models=("base",), drafters=("none", "ngram")), max_audio_s=60)
    h = EndpointHandler(str(repo), settings=settings)
    assert h.models == RepositoryModels(whisper=str(repo), drafter=str(repo / "drafter"))
    out = h({"inputs": jfk_bytes})
    assert out["model"]["asr"] == str(repo) and out["model"]["draft"] == str(repo / "drafter")
    assert wer([JFK_REF], [out["text"]]) <= 0.1
    spec = out["speculative"]
    assert spec["drafted_tokens"] > 0 and spec["acceptance_rate"] >= 0.9  # the drafter is the target's own weights
    with pytest.raises(RequestError, match="English-only"):  # tiny.en serves, not the multilingual base
        h({"inputs": jfk_bytes, "parameters": {"generate_kwargs": {"language": "german"}}})
    named = h({"inputs": jfk_head, "parameters": {"model": "base", "draft": "none"}})
    assert named["model"]["asr"] == "base" and "fellow americans" in named["text"].lower(), named


def test_repository_without_models_falls_back(handler, tmp_path):
    """The usual repository (handler.py, requirements.txt): the embedded models; "" as well."""
    (tmp_path / "handler.py").write_text("")
    (tmp_path / "requirements.txt").write_text("")
    assert find_models(tmp_path) == find_models("") == RepositoryModels()
    settings = ServiceSettings()
    assert with_repository(settings, RepositoryModels()) == settings
    assert handler.models == RepositoryModels() and handler.endpoint.transcriber.settings.base.model == "base"


def test_ctranslate2_repository_is_converted_once(tmp_path):
    """faster-whisper's format (model.bin, config.json, tokenizer.json) is converted into the cache, once."""
    ct2 = write_ct2_folder("tiny.en", tmp_path)
    first = whisper_folder(ct2, cache_dir=tmp_path / "cache")
    assert first and Path(first).is_relative_to(tmp_path / "cache")
    assert json.loads((Path(first) / "config.json").read_text())["model_type"] == "whisper"
    t = time.perf_counter()
    assert whisper_folder(ct2, cache_dir=tmp_path / "cache") == first and time.perf_counter() - t < 1.0
    bundle = load_whisper(first)
    assert bundle.model.config.vocab_size == load_whisper("tiny.en").model.config.vocab_size


@pytest.mark.parametrize("argv, env, expected", [
    (["-m", "specwhisper.serving.http.serve", "--port", "0"], {"SPECWHISPER_MODELS": "base,nope"},
     "serve: error: SPECWHISPER_MODELS: model 'nope' is not an embedded model"),
    (["app.py", "--drafters", "auto,bogus", "--no-preload"], {}, "app: error: --drafters: model 'bogus' is not an embedded model"),
])
def test_a_server_that_cannot_start_says_why_in_one_line(argv, env, expected):
    """A bad model name at start, the default's or any other offered (those started a server that
    failed every request picking them): one line naming the setting and exit 2, not a traceback, from
    a fresh process of each entry point."""
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1", **env},
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith(expected), proc.stderr


@pytest.mark.parametrize("entry, port, expected", [
    ("serve", "-5", "0 to 65535 (0: any free port)"), ("serve", "65536", "0 to 65535 (0: any free port)"),
    ("serve", "http", "0 to 65535 (0: any free port)"),
    ("app", "0", "1 to 65535"), ("app", "65536", "1 to 65535"),  # Gradio cannot pick a free port itself
])
def test_a_port_out_of_range_is_one_line(entry, port, expected, capsys):
    """--port outside what the server binds, or not a number: one line and exit 2 from the HTTP server's and
    the web UI's parsers, before anything loads (bound as given, it was a traceback)."""
    import app
    from specwhisper.serving.http import serve

    with pytest.raises(SystemExit) as exc:
        {"serve": serve.main, "app": app.main}[entry](["--port", port])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and err.count("\n") == 1, err
    assert f"--port: expected a port number, {expected}, got '{port}'" in err, err


def test_the_servers_options_are_answered_before_torch_is_imported():
    """--help and a bad option of the HTTP server and of the web UI: answered in a fresh process that never
    imports torch, transformers or the web stack (seconds to import here), in one line each."""
    code = """
import contextlib, io, sys
sys.path.insert(0, ".")
import app
from specwhisper.serving.http import serve
def run(main, *argv):
    try:
        return main(list(argv))
    except SystemExit as exc:  # the parsers' answers
        return exc.code
with contextlib.redirect_stderr(io.StringIO()) as err, contextlib.redirect_stdout(io.StringIO()) as out:
    codes = [run(serve.main, "--help"), run(serve.main, "--threads", "-1"), run(serve.main, "--api-key", ""),
             run(serve.main, "--queue", "0"), run(app.main, "--help"), run(app.main, "--threads", "-1"),
             run(app.main, "--live-streams", "0"), run(app.main, "--dtype", "float8")]
print(codes, [m for m in ("torch", "transformers", "fastapi", "uvicorn", "gradio") if m in sys.modules])
print(err.getvalue(), end="")
print(out.getvalue().count("usage:"))
"""
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    first, *errors, usages = proc.stdout.splitlines()
    assert first == "[0, 2, 2, 2, 0, 2, 2, 2] []" and usages == "2", proc.stdout
    assert errors == [
        "python -m specwhisper.serving.http.serve: error: argument --threads: must be >= 0, got -1 (see --help)",
        "serve: error: --api-key: the API key must be non-empty printable ASCII without spaces",
        "python -m specwhisper.serving.http.serve: error: argument --queue: expected a positive int, got '0' (see --help)",
        "python app.py: error: argument --threads: must be >= 0, got -1 (see --help)",
        "python app.py: error: argument --live-streams: expected a positive int, got '0' (see --help)",
        "python app.py: error: argument --dtype: must be one of auto, float32, float16, bfloat16, got 'float8' (see --help)",
    ], errors


def test_the_web_uis_output_folder_is_checked_before_models_load(tmp_path, capsys):
    """--output-dir naming a file: one line and exit 2 at once (it was a traceback after the models loaded)."""
    import app

    (tmp_path / "a-file").write_text("")
    assert app.main(["--output-dir", str(tmp_path / "a-file")]) == 2
    assert capsys.readouterr().err == f"app: error: --output-dir: {tmp_path / 'a-file'}: the output folder is a file\n"


@pytest.mark.parametrize("env, expected", [
    ({"SPECWHISPER_MAX_AUDIO_S": "-1"}, "serve: error: SPECWHISPER_MAX_AUDIO_S must be more than 0, got -1"),
    ({"SPECWHISPER_MODEL_ALIASES": "gpt-4o-transcribe=large-v3"},
     "serve: error: SPECWHISPER_MODEL_ALIASES: the alias 'gpt-4o-transcribe' names 'large-v3', which is not offered"),
    ({"SPECWHISPER_MODEL_ALIASES": "gpt-4o-transcribe"}, "serve: error: SPECWHISPER_MODEL_ALIASES: each item is NAME=MODEL"),
])
def test_a_bad_server_setting_is_one_line(env, expected, monkeypatch, capsys):
    """A bad SPECWHISPER_* setting at start: one line and exit 2 (in this process: the entry point's own
    process is the test above's)."""
    from specwhisper.serving.http import serve

    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert serve.main(["--port", "0"]) == 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(expected), lines
