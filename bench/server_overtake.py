"""Short requests behind a long upload: answered inside its pass (the default) against after it.

Two servers as a user runs them (``python -m specwhisper.serving.http.serve``, model base, drafter none),
one with ``--overtake-audio 0`` (a request waits for the pass in front of it), one with the default (an
upload of at most 60 s is transcribed inside a longer one's pass, at its next report between batches).
Each round sends one long upload (a conversation built from the evaluation clips, ``--long-s``) to
``POST /``, and while it is in flight ``--clients`` clients send the single-speaker English clips of the
evaluation set one after another through the official ``openai`` client, and a live stream
(``/v1/live``) sends those clips at the pace of speech; rounds alternate between the
servers (this machine's speed drifts). Per setting: the short uploads' latency percentiles (upload to
answer; those sent while the long one was in flight), the long one's latency, the live stream's
updates and the longest time between two of them while the long one ran, WER of each kind;
``speedup``: the short uploads' median latency without overtaking over this setting's (round pairs,
averaged); ``token_identical``: every answer has the tokens and times of the same file's answer from the
other server.

    .venv/bin/python bench/server_overtake.py        # writes bench/results/server_overtake.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.abuse import SERVER_SETUP, alternated, answer_facts, pooled_wer, timed_clip, write_server_results  # noqa: E402
from specwhisper.audio.loading import load_audio  # noqa: E402
from specwhisper.evaluation.transcripts import build_long_file, english_set, wer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "server_overtake.json"
SETTINGS = {"short uploads wait for the long one (--overtake-audio 0)": ["--overtake-audio", "0"],
            "short uploads run inside its pass (default)": []}


async def live_gaps(port: int, audio: np.ndarray, until: asyncio.Future) -> list[float]:
    """A live stream over ``/v1/live`` at the pace of speech (0.5 s pieces) while ``until`` runs: the seconds
    from its first piece to its first update and between one update and the next, up to the first update
    after ``until`` is done (its audio keeps arriving meanwhile; each update takes what came)."""
    from websockets.asyncio.client import connect

    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2").tobytes()
    piece = 16000  # bytes: 0.5 s of s16le
    t0, arrivals, done_at = time.perf_counter(), [], []
    until.add_done_callback(lambda _: done_at.append(time.perf_counter()))
    async with connect(f"ws://127.0.0.1:{port}/v1/live?language=en", max_size=None, open_timeout=600) as ws:
        async def send() -> None:
            for i in range(0, len(pcm), piece):
                if until.done():
                    break
                await ws.send(pcm[i : i + piece])
                await asyncio.sleep(0.5)
            await ws.send(json.dumps({"type": "end"}))

        sender = asyncio.ensure_future(send())
        async for raw in ws:
            if json.loads(raw)["type"] in ("partial", "final"):
                arrivals.append(time.perf_counter())
        await sender
    if not arrivals:
        raise RuntimeError("the live stream got no update")
    last = next(k for k, t in enumerate(arrivals) if t >= done_at[0]) if arrivals[-1] >= done_at[0] else len(arrivals) - 1
    return list(np.diff([t0] + arrivals[: last + 1]))


async def one_round(port: int, long_audio: bytes, items: list, clients: int, live_audio: np.ndarray) -> dict:
    import httpx
    import openai

    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0, timeout=1800)
    audio = {i.file: i.path.read_bytes() for i in items}
    shorts: list[tuple] = []  # (item, latency, answer)

    async with httpx.AsyncClient(timeout=1800) as http:
        t0 = time.perf_counter()
        long_task = asyncio.ensure_future(http.post(f"http://127.0.0.1:{port}/?language=en", content=long_audio))
        await asyncio.sleep(2.0)  # the long upload is in its pass

        async def sender(c: int) -> None:
            k = c
            while not long_task.done():
                item = items[k % len(items)]
                k += clients
                shorts.append(await timed_clip(client, item, audio[item.file]))

        gaps = asyncio.ensure_future(live_gaps(port, live_audio, long_task))
        await asyncio.gather(*(sender(c) for c in range(clients)))
        answer = (await long_task).json()
        waits = await gaps
        long_s = time.perf_counter() - t0  # answered before the senders' last uploads
    await client.close()
    return {"long_s": answer["timings"]["request"], "long_wall_s": long_s, "long_text": answer["text"],
            "long_segments": [(s["text"], s["start"], s["end"]) for s in answer["segments"]],
            "live_gaps": waits, **answer_facts(shorts)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--long-s", type=float, default=600.0, help="seconds of the long upload (default: 600)")
    p.add_argument("--clients", type=int, default=4, help="clients sending short uploads (default: 4)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per setting, alternated (default: 2)")
    p.add_argument("--port", type=int, default=18800)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    items = english_set()
    long = build_long_file("speakers", Path(tempfile.mkdtemp(prefix="server-overtake-")), args.long_s, seed=0)
    long_audio = long.path.read_bytes()
    live_audio = np.concatenate([load_audio(i.path) for i in items])  # the clips, spoken back to back
    rounds = alternated(SETTINGS, args.port, args.rounds,
                        warm=lambda server: server.request("POST", "/?language=en", items[0].path.read_bytes()),
                        one_round=lambda server: asyncio.run(one_round(server.port, long_audio, items, args.clients, live_audio)))
    waiting_name, overtaking_name = list(SETTINGS)
    runs = []
    for name, outs in rounds.items():
        lat = np.concatenate([o["latencies"] for o in outs])
        ratios = [np.percentile(b["latencies"], 50) / np.percentile(o["latencies"], 50)
                  for o, b in zip(outs, rounds[waiting_name])]
        others = rounds[overtaking_name if name == waiting_name else waiting_name]
        same = all(o["tokens"][f] == other["tokens"][f] for o in outs for other in others for f in o["tokens"]
                   if f in other["tokens"]) and all(o["long_segments"] == other["long_segments"] for o in outs for other in others)
        runs.append({
            "name": name, "short_requests": int(len(lat)), "clients": args.clients,
            "latency_p50_s": round(float(np.percentile(lat, 50)), 2), "latency_p90_s": round(float(np.percentile(lat, 90)), 2),
            "long_latency_s": round(float(np.mean([o["long_s"] for o in outs])), 1),
            # a live stream's updates while the long upload runs: the most time between two of them
            "live_updates": int(sum(len(o["live_gaps"]) for o in outs)),
            "live_gap_max_s": round(float(max((g for o in outs for g in o["live_gaps"]), default=math.nan)), 1),
            "speedup": round(float(np.mean(ratios)), 3),
            "wer": pooled_wer(outs),
            "long_wer": round(wer([long.reference] * len(outs), [o["long_text"] for o in outs]), 4),
            "token_identical": same,
        })
        print(json.dumps(runs[-1]), flush=True)
    write_server_results(args.out, {
        "server": SERVER_SETUP,
        "load": f"a {long.duration:.0f} s conversation built from the evaluation clips, POST / (language en), "
                f"while {args.clients} clients send the {len(items)} single-speaker English clips "
                f"({sum(i.duration for i in items):.0f} s) one after another through the openai client "
                f"(verbose_json, language en); {args.rounds} alternated rounds per setting"}, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
