"""Short requests overtake a long one on the HTTP server (the model worker's overtaking,
specwhisper.serving.worker), with the embedded Whisper tiny.en on real audio (overtaking does not depend
on the model; base takes 1.7 times as long): while a 54 s upload decodes a 10 s chunk per batch (its six
or so batches as many chances to overtake as the 30 s windows of twice the audio), an 11 s upload
through the `openai` client and a live stream of another clip sent after it get their answers before it
ends; the short upload's answer has the tokens and times it
gets alone, the long one's is the one it gets alone, and the time others ran inside its pass is not in
its timings."""

from __future__ import annotations

import asyncio
import json
import time

import httpx
import openai
import pytest

from specwhisper.evaluation.transcripts import build_long_file, english_set, load_manifest, wer
from specwhisper.audio.loading import load_audio
from specwhisper.serving.endpoint.contract import Endpoint
from specwhisper.serving.http.config import ServerConfig
from specwhisper.serving.http.server import serving
from specwhisper.serving.params import Choices
from specwhisper.serving.service import ServiceSettings
from tests.test_abuse import server_log  # noqa: F401 - a fixture: no traceback in the server's log
from tests.test_live_ws import _pcm, _session, _url

OVERTAKE_S = 30.0
LONG_QUERY = "/?batch_size=1&chunk_length=10&language=en"  # a batch, so a chance to overtake, every 10 s of audio


@pytest.fixture(scope="module")
def server(server_log, tmp_path_factory):  # noqa: F811
    settings = ServiceSettings(choices=Choices(models=("tiny.en",), drafters=("auto", "none")), max_audio_s=300)
    config = ServerConfig(port=0, access_log=False, spool_dir=tmp_path_factory.mktemp("spool"), overtake_s=OVERTAKE_S)
    with serving(Endpoint(settings), config) as srv:
        yield srv


def _segments(answer: dict) -> list[tuple]:
    return [(s["text"], s["start"], s["end"]) for s in answer["segments"]]


def test_short_requests_are_answered_inside_a_long_one(server, eval_root, tmp_path, caplog):
    caplog.set_level("INFO", logger="specwhisper.serving")
    long = build_long_file("dense", tmp_path, 45, seed=1)  # 54 s of the public clips
    long_bytes = long.path.read_bytes()
    short = next(i for i in load_manifest(eval_root) if i.file == "whisper.cpp/jfk.wav")
    spoken = next(i for i in english_set(eval_root) if i.category == "single" and 8 <= i.duration <= 15 and "jfk" not in i.file)
    client = openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=300)

    def create(c):
        return c.audio.transcriptions.create(file=("jfk.wav", short.path.read_bytes()), model="whisper-1",
                                             response_format="verbose_json", language="en")

    short_alone = create(client)
    long_alone = httpx.post(server.url + LONG_QUERY, content=long_bytes, timeout=600).json()
    assert wer([long.reference], [long_alone["text"]]) <= 0.15, long_alone["text"]

    async def together():
        done: dict[str, float] = {}
        t0 = time.monotonic()

        async def timed(name, work):
            out = await work
            done[name] = time.monotonic() - t0
            return out

        async with httpx.AsyncClient(timeout=600) as http:
            first = asyncio.ensure_future(timed("long", http.post(server.url + LONG_QUERY, content=long_bytes)))
            while not server.worker.busy:
                await asyncio.sleep(0.02)
            await asyncio.sleep(1.0)  # the long pass is under way
            c = openai.AsyncOpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=600)
            asleep = server.worker.submit(lambda token: time.sleep(3.0), seconds=0.0)[0]  # 3 s of others' work in its pass
            others = await asyncio.gather(
                timed("short", create(c)),
                timed("live", _session(_url(server, "?language=en"), _pcm(load_audio(spoken.path)) + [json.dumps({"type": "end"})])))
            asleep.result(0)
            return (await first).json(), others, done

    long_shared, (short_shared, (messages, code)), done = asyncio.run(together())
    assert done["short"] < done["long"] and done["live"] < done["long"], done
    assert any(f"short jobs run inside a pass of {long.duration:.0f} s" in r.getMessage() for r in caplog.records)
    # the short upload and the long one answer as they do alone
    assert [(s.tokens, s.start, s.end) for s in short_shared.segments] == [(s.tokens, s.start, s.end) for s in short_alone.segments]
    assert _segments(long_shared) == _segments(long_alone) and long_shared["text"] == long_alone["text"]
    assert long_shared["timings"]["asr"] <= long_shared["timings"]["request"] - 3.0, long_shared["timings"]
    assert code == 1000 and messages[-1]["type"] == "final", messages[-1]
    assert wer([spoken.reference], [messages[-1]["text"]]) <= 0.15, messages[-1]["text"]
