"""A long file over OpenAI's route with ``stream=true`` against the same request without it: when the
first text arrives, when the whole text has, and whether the two texts are the same.

The server as a user runs it (``python -m specwhisper.serving.http.serve``, model base, drafter none, the
default batch size); the file is bench/longform.py's 10-minute conversation (``build_long_file("speakers")``),
sent through the official ``openai`` client, alternated round by round (this machine's speed drifts).

    .venv/bin/python bench/http_stream.py        # writes bench/results/http_stream.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.abuse import SERVER_SETUP, Server, write_server_results  # noqa: E402
from specwhisper.evaluation.transcripts import build_long_file, wer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "http_stream.json"


def one(client, audio: bytes, stream: bool) -> dict:
    t = time.perf_counter()
    if not stream:
        text = client.audio.transcriptions.create(file=("talk.wav", audio), model="whisper-1", language="en").text
        whole = time.perf_counter() - t
        return {"first_text_s": whole, "whole_s": whole, "text": text, "deltas": 0}
    first, deltas, text = None, 0, ""
    for event in client.audio.transcriptions.create(file=("talk.wav", audio), model="whisper-1", language="en", stream=True):
        if event.type == "transcript.text.delta":
            first = first if first is not None else time.perf_counter() - t
            deltas += 1
        else:
            text = event.text
    return {"first_text_s": first, "whole_s": time.perf_counter() - t, "text": text, "deltas": deltas}


def main(argv: list[str] | None = None) -> int:
    import openai

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--minutes", type=float, default=10.0)
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--port", type=int, default=18795)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="http-stream-"))
    long = build_long_file("speakers", work, args.minutes * 60, seed=0)
    audio = long.path.read_bytes()
    os.environ.update({"SPECWHISPER_MODELS": "base", "SPECWHISPER_DRAFTERS": "none"})
    (work / "server").mkdir()
    server = Server(work / "server", args.port, [])
    rows: dict[bool, list[dict]] = {False: [], True: []}
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{args.port}/v1", api_key="bench", max_retries=0, timeout=3600)
        for r in range(args.rounds):
            for stream in (False, True):
                rows[stream].append(one(client, audio, stream))
                print(f"round {r + 1} stream={stream}: first text {rows[stream][-1]['first_text_s']:.1f} s, "
                      f"whole {rows[stream][-1]['whole_s']:.1f} s", flush=True)
    finally:
        server.stop()
    runs = []
    for stream, outs in rows.items():
        first = sum(o["first_text_s"] for o in outs) / len(outs)
        whole = sum(o["whole_s"] for o in outs) / len(outs)
        plain_first = sum(o["first_text_s"] for o in rows[False]) / len(rows[False])
        runs.append({"name": "stream=true: text events as segments become final" if stream else "stream=false: one answer",
                     "first_text_s": round(first, 2), "whole_s": round(whole, 2), "deltas": outs[0]["deltas"],
                     "rtf": round(whole / long.duration, 4), "speedup": round(plain_first / first, 2),
                     "wer": round(wer([long.reference], [outs[0]["text"]]), 4),
                     "token_identical": all(o["text"] == rows[False][0]["text"] for o in outs)})
        print(json.dumps(runs[-1]), flush=True)
    write_server_results(args.out, {
        "server": SERVER_SETUP,
        "file": f"build_long_file('speakers', seed 0): {long.duration:.0f} s, the public clips as a conversation",
        "load": f"POST /v1/audio/transcriptions through the openai client (language en), with and without "
                f"stream, {args.rounds} alternated rounds; speedup: time to the first text, stream=false's "
                f"over this row's; token_identical: the same text as stream=false's"}, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
