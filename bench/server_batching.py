"""Server throughput and latency with uploads sharing a pass, against one upload per pass.

Two servers as a user runs them (``python -m specwhisper.serving.http.serve``, model base, drafter none),
one with ``--batch-requests 1`` (one upload per pass), one with the default (uploads of the same model
and options that wait together are transcribed in one pass, their chunks batched across files). Each
round sends the single-speaker English clips of the evaluation set (``english_set``, cycled to
``--requests``) through the official ``openai`` client, ``--concurrency`` at a time, to one server then
the other (alternated: this machine's speed drifts). Per setting: requests and audio seconds per
second, latency percentiles (upload to answer), WER against the references; ``speedup`` is the
throughput ratio of each round pair, averaged; ``token_identical``: every answer's segments have the
tokens and times of the same file's answer from the other server.

    .venv/bin/python bench/server_batching.py        # writes bench/results/server_batching.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.abuse import SERVER_SETUP, alternated, answer_facts, pooled_wer, timed_clip, write_server_results  # noqa: E402
from specwhisper.evaluation.transcripts import english_set  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "server_batching.json"
SETTINGS = {"one upload per pass (--batch-requests 1)": ["--batch-requests", "1"],
            "uploads waiting together share a pass (default)": []}


async def one_round(port: int, items: list, requests: int, concurrency: int) -> dict:
    import openai

    client = openai.AsyncOpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="bench", max_retries=0, timeout=600)
    turn = asyncio.Semaphore(concurrency)
    audio = {i.file: i.path.read_bytes() for i in items}

    async def send(k: int):
        item = items[k % len(items)]
        async with turn:
            return await timed_clip(client, item, audio[item.file])

    t0 = time.perf_counter()
    answers = await asyncio.gather(*(send(k) for k in range(requests)))
    wall = time.perf_counter() - t0
    await client.close()
    return {"wall": wall, "audio_s": sum(i.duration for i, _, _ in answers), **answer_facts(answers)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=32, help="requests per round (default: 32)")
    p.add_argument("--concurrency", type=int, default=8, help="requests in flight at a time (default: 8)")
    p.add_argument("--rounds", type=int, default=2, help="rounds per setting, alternated (default: 2)")
    p.add_argument("--port", type=int, default=18790)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    items = english_set()
    rounds = alternated(
        SETTINGS, args.port, args.rounds,
        warm=lambda server: asyncio.run(one_round(server.port, items, len(items), args.concurrency)),
        one_round=lambda server: asyncio.run(one_round(server.port, items, args.requests, args.concurrency)))
    base_name, shared_name = list(SETTINGS)
    runs = []
    for name, outs in rounds.items():
        lat = np.concatenate([o["latencies"] for o in outs])
        ratios = [(args.requests / o["wall"]) / (args.requests / b["wall"]) for o, b in zip(outs, rounds[base_name])]
        others = rounds[shared_name if name == base_name else base_name]
        same = all(o["tokens"][f] == other["tokens"][f] for o in outs for other in others for f in o["tokens"])
        runs.append({
            "name": name, "batch": 1 if name == base_name else 16, "requests": args.requests * len(outs),
            "concurrency": args.concurrency,
            "requests_per_s": round(float(np.mean([args.requests / o["wall"] for o in outs])), 3),
            "audio_s_per_s": round(float(np.mean([o["audio_s"] / o["wall"] for o in outs])), 2),
            "rtf": round(float(np.mean([o["wall"] / o["audio_s"] for o in outs])), 4),
            "latency_p50_s": round(float(np.percentile(lat, 50)), 2), "latency_p90_s": round(float(np.percentile(lat, 90)), 2),
            "speedup": round(float(np.mean(ratios)), 3),
            "wer": pooled_wer(outs),
            "token_identical": same,
        })
        print(json.dumps(runs[-1]), flush=True)
    write_server_results(args.out, {
        "server": SERVER_SETUP,
        "load": f"the {len(items)} single-speaker English clips of the evaluation set "
                f"({sum(i.duration for i in items):.0f} s), cycled, POST /v1/audio/transcriptions through the "
                f"openai client (verbose_json, language en), {args.concurrency} at a time, "
                f"{args.rounds} alternated rounds of {args.requests} per setting"}, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
