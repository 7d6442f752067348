"""``GET /metrics`` read by Prometheus's own parser (prometheus_client's): requests counted by their route's
template and status (a refused API key and an unknown path included), the audio transcribed and what the
decoder did, the worker's and the live routes' gauges; behind the API key as every route but /health."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from specwhisper.evaluation.transcripts import load_manifest, wer
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.config import RequestLimits, ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.params import Choices
from specwhisper.serving.service import ServiceSettings
from tests.test_abuse import server_log  # noqa: F401 - a fixture: no traceback in the server's log

KEY = "sk-metrics-0123456789"


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("none",)), max_audio_s=60)
    config = ServerConfig(port=0, requests=RequestLimits(), access_log=False, spool_dir=tmp_path_factory.mktemp("spool"),
                          api_key=KEY)
    with serving(Endpoint(settings), config) as srv:
        yield srv


def _samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, its labels sorted) -> value, as Prometheus reads the page."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def test_the_page_counts_requests_audio_and_decoding(server, eval_root):
    jfk = next(i for i in load_manifest(eval_root) if i.file == "whisper.cpp/jfk.wav")
    auth = {"authorization": f"Bearer {KEY}"}
    with httpx.Client(base_url=server.url, timeout=120) as http:
        assert http.get("/metrics").status_code == 401  # the key, as on every route but /health
        answer = http.post("/v1/audio/transcriptions", headers=auth, files={"file": ("jfk.wav", jfk.path.read_bytes())},
                           data={"model": "tiny.en"})
        assert answer.status_code == 200 and wer([jfk.reference], [answer.json()["text"]]) < 0.1
        assert http.post("/", headers=auth, params={"beam_size": "0"}, content=b"RIFF").status_code == 400
        http.get("/v1/jobs/abc", headers=auth)
        assert http.get("/no/such/path", headers=auth).status_code == 404
        page = http.get("/metrics", headers=auth)
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/plain")
    got = _samples(page.text)

    def requests(route: str, method: str, status: int) -> float:
        return got.get(("specwhisper_http_requests_total", (("method", method), ("route", route), ("status", str(status)))), 0)

    assert requests("/metrics", "GET", 401) == 1
    assert requests("/v1/audio/transcriptions", "POST", 200) == 1
    assert requests("/", "POST", 400) == 1
    assert requests("unmatched", "GET", 404) == 1
    assert any(name == "specwhisper_http_requests_total" and dict(labels)["route"] == "/v1/jobs/{job_id}"
               for name, labels in got), "a job's path is counted under its route's template"
    assert got[("specwhisper_http_request_duration_seconds_count", (("route", "/v1/audio/transcriptions"),))] == 1
    assert got[("specwhisper_transcriptions_total", ())] == 1
    assert got[("specwhisper_audio_seconds_total", ())] == pytest.approx(jfk.duration, abs=0.01)
    assert got[("specwhisper_decoder_tokens_total", ())] >= 20  # JFK's 22 words
    assert got[("specwhisper_decoder_target_passes_total", ())] >= 1
    assert 0 < got[("specwhisper_transcription_seconds_total", ())] < 60
    assert got[("specwhisper_worker_waiting", ())] == 0 and got[("specwhisper_live_streams", ())] == 0
    assert got[("specwhisper_models_loaded", ())] == 1


def test_live_sockets_count_their_audio_as_it_arrives(server, eval_root):
    """A /v1/live stream of JFK's clip: one socket started, its 11 s of audio counted."""
    import asyncio
    import json

    import numpy as np
    from websockets.asyncio.client import connect

    from specwhisper.audio.loading import load_audio

    jfk = next(i for i in load_manifest(eval_root) if i.file == "whisper.cpp/jfk.wav")
    pcm = (np.clip(load_audio(jfk.path), -1, 1) * 32767).astype("<i2").tobytes()
    auth = {"authorization": f"Bearer {KEY}"}

    def read() -> dict:
        page = httpx.get(server.url + "/metrics", headers=auth, timeout=60)
        got = _samples(page.text)
        return {k: got[(f"specwhisper_{k}", ())] for k in ("live_streams_started_total", "live_audio_seconds_total")}

    async def stream() -> dict:
        async with connect(server.url.replace("http://", "ws://") + "/v1/live", additional_headers=auth,
                           max_size=None, open_timeout=60) as ws:
            for i in range(0, len(pcm), 8000):
                await ws.send(pcm[i : i + 8000])
            await ws.send(json.dumps({"type": "end"}))
            return [json.loads(m) async for m in ws][-1]

    before = read()
    final = asyncio.run(stream())
    after = read()
    assert final["type"] == "final" and "country" in final["text"]
    assert after["live_streams_started_total"] - before["live_streams_started_total"] == 1
    assert after["live_audio_seconds_total"] - before["live_audio_seconds_total"] == pytest.approx(jfk.duration, abs=0.01)
