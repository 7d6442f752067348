"""What unloading idle models gives back and costs: the server as a user runs it
(``python -m specwhisper.serving.http.serve``, SPECWHISPER_MODELS=base,tiny.en, drafter none,
SPECWHISPER_MODEL_TTL), over loopback.

The server's resident memory (VmRSS) with base (and its post-edit LLM, the embedded SmolLM2-135M) and
tiny.en loaded, then once the TTL unloaded them (``GET /api/ps`` lists none); then a request's latency on a
loaded model against the first request after an unload (the model loads again), alternated round by round,
for base alone and for base with the post-edit, and whether both answers have the same text.

    .venv/bin/python bench/model_ttl.py              # writes bench/results/model_ttl.json
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.abuse import Server, write_server_results  # noqa: E402
from specwhisper.evaluation.transcripts import english_set, wer  # noqa: E402

RESULTS = ROOT / "bench" / "results" / "model_ttl.json"
REQUESTS = {"base": "/?language=en&model=base", "base with post-edit": "/?language=en&model=base&postedit=true"}


def unloaded(server: Server, within_s: float) -> float:
    """Seconds until ``/api/ps`` lists no model (raises past ``within_s``)."""
    t0 = time.monotonic()
    while server.request("GET", "/api/ps")[1]["models"]:
        if time.monotonic() - t0 > within_s:
            raise RuntimeError(f"the models were still loaded {within_s:g} s later")
        time.sleep(0.2)
    return time.monotonic() - t0


def timed(server: Server, path: str, audio: bytes) -> tuple[float, str]:
    t0 = time.perf_counter()
    status, answer, _ = server.request("POST", path, audio)
    if status != 200:
        raise RuntimeError(f"{path}: {status} {answer}")
    return time.perf_counter() - t0, answer["text"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ttl", type=float, default=3.0, help="SPECWHISPER_MODEL_TTL of the server (default: 3 s)")
    p.add_argument("--rounds", type=int, default=3, help="cold and warm requests per kind, alternated (default: 3)")
    p.add_argument("--port", type=int, default=18830)
    p.add_argument("--out", type=Path, default=RESULTS)
    args = p.parse_args(argv)
    item = next(i for i in english_set() if i.file.endswith("jfk.wav"))
    audio = item.path.read_bytes()
    os.environ.update({"SPECWHISPER_MODELS": "base,tiny.en", "SPECWHISPER_DRAFTERS": "none",
                       "SPECWHISPER_MODEL_TTL": f"{args.ttl:g}"})
    server = Server(Path(tempfile.mkdtemp(prefix="model-ttl-")), args.port, [])
    try:
        started = server.rss_mb()
        for path in (*REQUESTS.values(), "/?model=tiny.en"):
            timed(server, path, audio)
        loaded = server.rss_mb()
        listed = server.request("GET", "/api/ps")[1]["loaded"]
        waited = unloaded(server, args.ttl + 30)
        after = server.rss_mb()
        latencies: dict[str, dict[str, list[float]]] = {kind: {"cold": [], "warm": []} for kind in REQUESTS}
        texts: dict[str, set[str]] = {kind: set() for kind in REQUESTS}
        for r in range(args.rounds):
            for kind, path in REQUESTS.items():
                unloaded(server, args.ttl + 30)
                for state in ("cold", "warm"):
                    seconds, text = timed(server, path, audio)
                    latencies[kind][state].append(seconds)
                    texts[kind].add(text)
                print(f"round {r + 1} {kind}: cold {latencies[kind]['cold'][-1]:.2f} s, warm {latencies[kind]['warm'][-1]:.2f} s", flush=True)
    finally:
        server.stop()
    runs = [
        {"name": "server started (base loaded)", "rss_mb": round(started)},
        {"name": "base, base with post-edit, tiny.en loaded", "rss_mb": round(loaded),
         "pipelines": [f"{e['model']} ({e['drafter']})" for e in listed]},
        {"name": f"after the TTL ({args.ttl:g} s) unloaded them", "rss_mb": round(after), "unloaded_after_s": round(waited, 1),
         "rss_given_back_mb": round(loaded - after)},
    ]
    for kind in REQUESTS:
        warm, cold = (np.array(latencies[kind][s]) for s in ("warm", "cold"))
        for state, values in (("loaded", warm), ("first after an unload", cold)):
            runs.append({"name": f"{kind}: request, model {state}", "requests": len(values),
                         "latency_p50_s": round(float(np.percentile(values, 50)), 2),
                         "latency_p90_s": round(float(np.percentile(values, 90)), 2)})
        runs[-1]["speedup"] = round(float(np.median(warm / cold)), 3)  # < 1: what loading again costs
        runs[-1]["same_text"] = len(texts[kind]) == 1
        runs[-1]["wer"] = round(wer([item.reference], [texts[kind].pop()]), 4)
    for run in runs:
        print(json.dumps(run), flush=True)
    write_server_results(args.out, {
        "server": "python -m specwhisper.serving.http.serve, SPECWHISPER_MODELS=base,tiny.en, drafter none, "
                  f"SPECWHISPER_MODEL_TTL={args.ttl:g}",
        "load": f"{item.file} ({item.duration:.0f} s) through POST /, language en; {args.rounds} alternated rounds of "
                "a request after the unload then one on the loaded model, per kind"}, runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
