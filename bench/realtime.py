"""Live speech through the server's two live routes, played at real time as a microphone sends it:
OpenAI's Realtime API transcription session (``/v1/realtime``, server VAD at OpenAI's defaults and
semantic VAD at eagerness auto, through the official ``openai`` client) and our ``/v1/live`` WebSocket, on the same recording, against the same
server's offline transcript of it.

The server as a user runs it (``python -m specwhisper.serving.http.serve``, model base, drafter none,
default limits); the recording is bench/longform.py's dense talk cut to ``--seconds`` (public clips back to
back, 0.3-0.8 s pauses), sent in 0.1 s pieces on the wall clock. Figures:

* ``/v1/realtime``: ``latency_p50_s`` / ``latency_p90_s``, seconds from the moment the last audio of a turn
  (the pause that ended it included) was sent to its ``completed`` transcript; ``first_words_p50_s``,
  from the turn's first speech sent to its first delta; the turns; WER of the turns' transcripts joined;
* ``/v1/live``: word latency, seconds from a word's end in the audio (as sent) to its ``confirmed``
  message; WER of the final;
* the offline transcript (``POST /v1/audio/transcriptions``): WER.

    .venv/bin/python bench/realtime.py [--seconds 120]     # writes bench/results/realtime.json
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.abuse import SERVER_SETUP, Server, write_server_results  # noqa: E402
from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.evaluation.transcripts import build_long_file, wer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "realtime.json"
PIECE_S = 0.1


def _p(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 3) if values else None


def realtime(port: int, audio: np.ndarray, detection: dict | None = None) -> dict:
    import soxr
    from openai import OpenAI

    pcm = (np.clip(soxr.resample(audio, 16000, 24000, quality="HQ"), -1, 1) * 32767).astype("<i2").tobytes()
    step = int(PIECE_S * 24000) * 2
    client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="unused")
    with client.realtime.connect(extra_query={"intent": "transcription"}) as connection:
        connection.recv()  # session.created
        if detection is not None:
            connection.session.update(session={"type": "transcription", "audio": {"input": {"turn_detection": detection}}})
            connection.recv()  # session.updated
        t0 = time.perf_counter()

        def send() -> None:
            for k, i in enumerate(range(0, len(pcm), step)):
                time.sleep(max(0.0, t0 + k * PIECE_S - time.perf_counter()))
                connection.input_audio_buffer.append(audio=base64.b64encode(pcm[i : i + step]).decode())
            time.sleep(1.0)  # a last pause, so that the last turn ends
            connection.input_audio_buffer.append(audio=base64.b64encode(bytes(int(24000 * 1.0) * 2)).decode())
            for n in range(2):  # commits of nothing: their error events come after the last turn's events
                time.sleep(1.0)
                connection.input_audio_buffer.commit(event_id=f"end-{n}")

        sender = threading.Thread(target=send)
        sender.start()
        starts, ends, first, done, texts = {}, {}, {}, {}, {}
        for event in connection:
            now = time.perf_counter()
            if event.type == "input_audio_buffer.speech_started":
                starts[event.item_id] = event.audio_start_ms / 1000
            elif event.type == "input_audio_buffer.speech_stopped":
                ends[event.item_id] = event.audio_end_ms / 1000
            elif event.type == "conversation.item.input_audio_transcription.delta":
                first.setdefault(event.item_id, now - t0)
            elif event.type == "conversation.item.input_audio_transcription.completed":
                done[event.item_id], texts[event.item_id] = now - t0, event.transcript
            elif event.type == "error" and (event.error.event_id or "").startswith("end-") and set(done) >= set(starts):
                break
        sender.join()
    latencies = [done[i] - ends[i] for i in done if i in ends]
    first_words = [first[i] - starts[i] for i in first if i in starts]
    return {"latencies": latencies, "first_words": first_words, "turns": len(done),
            "text": " ".join(texts[i] for i in done)}


def live(port: int, audio: np.ndarray) -> dict:
    from websockets.asyncio.client import connect

    data = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    step = int(PIECE_S * 16000) * 2

    async def session() -> dict:
        async with connect(f"ws://127.0.0.1:{port}/v1/live", max_size=None) as ws:
            t0 = time.perf_counter()

            async def send() -> None:
                for k, i in enumerate(range(0, len(data), step)):
                    await asyncio.sleep(max(0.0, t0 + k * PIECE_S - time.perf_counter()))
                    await ws.send(data[i : i + step])
                await ws.send(json.dumps({"type": "end"}))

            sender = asyncio.create_task(send())
            latencies, final = [], None
            async for raw in ws:
                message, now = json.loads(raw), time.perf_counter() - t0
                if message["type"] == "confirmed":
                    latencies += [now - w["end"] for w in message["words"]]
                elif message["type"] == "final":
                    final = message
            await sender
            return {"latencies": latencies, "text": final["text"]}

    return asyncio.run(session())


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=120.0)
    ap.add_argument("--port", type=int, default=8097)
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args()
    long = build_long_file("dense", ROOT / "bench" / ".cache", min_seconds=args.seconds)
    audio = load_audio(long.path)
    reference = long.reference
    os.environ.update({"SPECWHISPER_MODELS": "base", "SPECWHISPER_DRAFTERS": "none"})
    work = Path(tempfile.mkdtemp(prefix="realtime-bench-"))
    server = Server(work, args.port, [])
    try:
        status, offline, _ = server.request("POST", "/", long.path.read_bytes())
        assert status == 200, offline
        rt = realtime(args.port, audio)
        semantic = realtime(args.port, audio, {"type": "semantic_vad", "eagerness": "auto"})
        lv = live(args.port, audio)
    finally:
        server.stop()
    seconds = round(len(audio) / 16000, 1)
    runs = [
        {"name": "/v1/realtime (OpenAI Realtime API, server_vad defaults): a turn's transcript after its last audio",
         "latency_p50_s": _p(rt["latencies"], 50), "latency_p90_s": _p(rt["latencies"], 90),
         "first_words_p50_s": _p(rt["first_words"], 50), "turns": rt["turns"],
         "wer": round(wer([reference], [rt["text"]]), 4), "audio_s": seconds},
        {"name": "/v1/realtime, semantic_vad (eagerness auto): a turn's transcript after its last audio",
         "latency_p50_s": _p(semantic["latencies"], 50), "latency_p90_s": _p(semantic["latencies"], 90),
         "first_words_p50_s": _p(semantic["first_words"], 50), "turns": semantic["turns"],
         "wer": round(wer([reference], [semantic["text"]]), 4), "audio_s": seconds},
        {"name": "/v1/live: a word's confirmation after its end in the audio",
         "latency_p50_s": _p(lv["latencies"], 50), "latency_p90_s": _p(lv["latencies"], 90),
         "wer": round(wer([reference], [lv["text"]]), 4), "audio_s": seconds},
        {"name": "offline transcript of the same recording (POST /)", "wer": round(wer([reference], [offline["text"]]), 4),
         "audio_s": seconds},
    ]
    for run in runs:
        print(json.dumps(run))
    write_server_results(args.out, {"server": SERVER_SETUP, "audio": f"{long.path.name}: {seconds} s sent in {PIECE_S} s "
                                    "pieces at real time"}, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
