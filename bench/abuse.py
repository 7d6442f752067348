"""Peak memory under abuse, and latency under load, over loopback only.

The server runs as a user runs it (``python -m specwhisper.serving.http.serve``, default limits: 4 h of audio, 200 MB
uploads, base preloaded; --body-timeout/--head-timeout 5 s to keep the slow cases short). Before each
case its peak RSS (VmHWM) is reset (``/proc/PID/clear_refs``), after it the peak is read. The CLI runs
once per case in a fresh process, its peak RSS from ``os.wait4``. Then 50 requests (a 3.5 s clip),
4 and 16 at a time: every answer counted (a 503 from the full queue is retried after its Retry-After,
as a client should), latency percentiles per request including retries.

``--only openai``: the same abuse on OpenAI's route (``POST /v1/audio/transcriptions``, multipart bodies),
then the load through it and through ``POST /`` in alternated rounds.

    .venv/bin/python bench/abuse.py                # writes bench/results/abuse.json
    .venv/bin/python bench/abuse.py --only openai  # writes bench/results/abuse_openai.json
"""

from __future__ import annotations

import argparse
import base64
import http.client
import io
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import soundfile as sf

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
RESULTS = ROOT / "bench" / "results" / "abuse.json"
OPENAI_RESULTS = ROOT / "bench" / "results" / "abuse_openai.json"
HOUR = 3600
OPENAI_PATH = "/v1/audio/transcriptions"
BOUNDARY = "specwhisper-bench"
MULTIPART = f"multipart/form-data; boundary={BOUNDARY}"


def ffmpeg(*args) -> None:
    subprocess.run(["ffmpeg", "-nostdin", "-v", "error", "-y", *map(str, args)], check=True)


def silent_m4a(path: Path, seconds: float) -> Path:
    if not path.exists():
        ffmpeg("-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", seconds, "-c:a", "aac", "-b:a", "8k", path)
    return path


def lying_adts(path: Path, seconds: float) -> Path:
    """10 s of noise at 128 kb/s, then ``seconds`` of silence at 8 kb/s: ffprobe estimates the length
    from the first frames' bitrate, far below what the stream holds."""
    if not path.exists():
        head, tail = path.with_suffix(".head"), path.with_suffix(".tail")
        ffmpeg("-f", "lavfi", "-i", "anoisesrc=r=16000:a=0.5", "-t", 10, "-c:a", "aac", "-b:a", "128k", "-f", "adts", head)
        ffmpeg("-f", "lavfi", "-i", "anullsrc=r=16000:cl=mono", "-t", seconds, "-c:a", "aac", "-b:a", "8k", "-f", "adts", tail)
        path.write_bytes(head.read_bytes() + tail.read_bytes())
        head.unlink()
        tail.unlink()
    return path


def clip_wav(seconds: float) -> bytes:
    audio, rate = sf.read(ROOT / "samples" / "jfk.wav", dtype="int16")
    buf = io.BytesIO()
    sf.write(buf, audio[: int(seconds * rate)], rate, format="WAV", subtype="PCM_16")
    return buf.getvalue()


def form(audio: bytes, **fields: str) -> bytes:
    """A multipart/form-data body as OpenAI's clients send it: the text fields, then ``file``."""
    parts = [f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{v}\r\n'.encode() for k, v in fields.items()]
    parts.append(f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="file"; filename="audio"\r\n'
                 f"Content-Type: application/octet-stream\r\n\r\n".encode() + audio + b"\r\n")
    return b"".join(parts) + f"--{BOUNDARY}--\r\n".encode()


def claimed_min(path: Path) -> int:
    from specwhisper.audio.probe import probe_duration

    return round((probe_duration(path) or 0) / 60)


def status_kb(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def server_machine() -> str:
    """This machine in words for a server bench's results, with the load average at the end (other jobs on a
    small shared CPU skew absolute times)."""
    load = ", ".join(f"{x:.1f}" for x in os.getloadavg())
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, CPU only, shared with other jobs "
            f"(load average at the end {load}); python {platform.python_version()}")


# the server benches' server: base alone, no drafter (``SPECWHISPER_*`` variables set by ``alternated``)
SERVER_SETUP = "python -m specwhisper.serving.http.serve, model base, drafter none, default limits"


def alternated(settings: dict[str, list[str]], port: int, rounds: int, warm, one_round) -> dict[str, list]:
    """A server per setting (name -> extra flags; ports from ``port`` on), ``warm(server)`` once each, then
    ``one_round(server)`` ``rounds`` times per setting, the settings alternated round by round (this
    machine's speed drifts): each setting's round outcomes, in order."""
    os.environ.update({"SPECWHISPER_MODELS": "base", "SPECWHISPER_DRAFTERS": "none"})
    work = Path(tempfile.mkdtemp(prefix="server-bench-"))
    servers = {}
    try:
        for k, (name, extra) in enumerate(settings.items()):
            (work / str(k)).mkdir()
            servers[name] = Server(work / str(k), port + k, extra)
            warm(servers[name])
        outcomes: dict[str, list] = {name: [] for name in settings}
        for r in range(rounds):
            for name, server in servers.items():
                outcomes[name].append(one_round(server))
                print(f"round {r + 1} {name}: done", flush=True)
        return outcomes
    finally:
        for server in servers.values():
            server.stop()


async def timed_clip(client, item, audio: bytes) -> tuple:
    """One eval clip through OpenAI's route (the ``openai`` async client, verbose_json, English):
    (item, seconds from upload to answer, answer)."""
    t = time.perf_counter()
    answer = await client.audio.transcriptions.create(file=(item.path.name, audio), model="whisper-1",
                                                      response_format="verbose_json", language="en")
    return item, time.perf_counter() - t, answer


def answer_facts(answers: list[tuple]) -> dict:
    """What a round keeps of its ``timed_clip`` answers: latencies, each file's segments (tokens and times),
    references and hypotheses."""
    return {"latencies": [s for _, s, _ in answers],
            "tokens": {i.file: [(s.tokens, s.start, s.end) for s in a.segments] for i, _, a in answers},
            "references": [i.reference for i, _, _ in answers], "hypotheses": [a.text for _, _, a in answers]}


def pooled_wer(outs: list[dict]) -> float:
    """The WER of all the rounds' answers together (``answer_facts``)."""
    from specwhisper.evaluation.transcripts import wer

    return round(wer(sum((o["references"] for o in outs), []), sum((o["hypotheses"] for o in outs), [])), 4)


def write_server_results(out: Path, setup: dict, runs: list[dict]) -> None:
    """``{"machine", "setup", "runs"}`` to ``out`` (bench/results/)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"machine": server_machine(), "setup": setup, "runs": runs}, indent=2) + "\n")
    print(f"wrote {out}")


class Server:
    """``python -m specwhisper.serving.http.serve`` in its own process, its log in a file."""

    def __init__(self, work: Path, port: int, extra: list[str]):
        self.port = port
        self.log_path = work / "serve.log"
        self.log = self.log_path.open("w")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        self.proc = subprocess.Popen([sys.executable, "-m", "specwhisper.serving.http.serve", "--port", str(port), "--quiet",
                                      "--spool-dir", str(work / "spool"), *extra], cwd=ROOT, env=env,
                                     stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 600
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(self.log_path.read_text())
            try:
                if self.request("GET", "/health")[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)

    def request(self, method: str, path: str, body: bytes | None = None, ctype: str = "audio/wav", timeout: float = 600):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout)
        try:
            conn.request(method, path, body=body, headers={"Content-Type": ctype} if body is not None else {})
            resp = conn.getresponse()
            return resp.status, json.loads(resp.read()), dict(resp.getheaders())
        finally:
            conn.close()

    def raw(self, data: bytes, trickled: bytes = b"", every_s: float = 0.5) -> bytes:
        with socket.create_connection(("127.0.0.1", self.port), timeout=120) as s:
            try:
                s.sendall(data)
                for i in range(len(trickled)):
                    s.sendall(trickled[i : i + 1])
                    time.sleep(every_s)
            except OSError:
                pass
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            return out

    def rss_mb(self) -> float:
        return status_kb(self.proc.pid, "VmRSS") / 1024

    def threads(self) -> int:
        return len(os.listdir(f"/proc/{self.proc.pid}/task"))

    def case(self, name: str, fn) -> dict:
        """Run ``fn()`` (returns the statuses it got) with the server's peak RSS reset before it."""
        Path(f"/proc/{self.proc.pid}/clear_refs").write_text("5")
        before = self.rss_mb()
        t = time.perf_counter()
        statuses = fn()
        seconds = time.perf_counter() - t
        peak = status_kb(self.proc.pid, "VmHWM") / 1024
        alive = self.request("GET", "/health")[0] == 200
        row = {"name": f"server: {name}", "peak_rss_mb": round(peak, 1), "rss_before_mb": round(before, 1),
               "above_start_mb": round(peak - before, 1), "statuses": statuses, "seconds": round(seconds, 2),
               "threads_after": self.threads(), "serving_after": alive}
        print(json.dumps(row), flush=True)
        return row

    def stop(self) -> str:
        self.proc.terminate()
        self.proc.wait(60)
        self.log.close()
        return self.log_path.read_text()


def raw_status(answer: bytes) -> int:
    return int(answer.split(b" ", 2)[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def run_cli_peak(argv: list[str], work: Path) -> tuple[int, float, str]:
    """A CLI run in a fresh process: exit code, its own peak RSS (MB), last stderr line."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "specwhisper.serving.cli.main", *map(str, argv), "-o", str(work / "cli-out"), "-q"],
                            cwd=ROOT, env=env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL)
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, usage.ru_maxrss / 1024, (err.strip().splitlines() or [""])[-1]


def load(server: Server, body: bytes, requests: int, concurrency: int, path: str = "/", ctype: str = "audio/wav") -> dict:
    """``requests`` requests to ``path``, ``concurrency`` at a time; 503s are retried after their Retry-After."""

    def one(_):
        t = time.perf_counter()
        retries = 0
        while True:
            try:
                status, out, headers = server.request("POST", path, body, ctype)
            except OSError as exc:
                return None, time.perf_counter() - t, retries, repr(exc)
            if status != 503:
                return status, time.perf_counter() - t, retries, out.get("text", out.get("error"))
            retries += 1
            time.sleep(float(headers.get("retry-after", 1)))

    Path(f"/proc/{server.proc.pid}/clear_refs").write_text("5")
    t0 = time.perf_counter()
    with ThreadPoolExecutor(concurrency) as pool:
        results = list(pool.map(one, range(requests)))
    wall = time.perf_counter() - t0
    ok = [r for r in results if r[0] == 200]
    lat = np.array([r[1] for r in ok]) if ok else np.zeros(1)
    p50, p90, p99 = (float(x) for x in np.percentile(lat, [50, 90, 99]))
    row = {"name": f"server: load, {requests} requests, {concurrency} at a time" + (f", POST {path}" if path != "/" else ""),
           "requests": requests,
           "concurrency": concurrency, "answered_200": len(ok), "lost": sum(r[0] is None for r in results),
           "other_status": sorted({r[0] for r in results if r[0] not in (200, None)}),
           "retried_after_503": sum(r[2] for r in results), "distinct_texts": len({r[3] for r in ok}),
           "latency_p50_s": round(p50, 2), "latency_p90_s": round(p90, 2), "latency_p99_s": round(p99, 2),
           "latency_max_s": round(float(lat.max()), 2), "requests_per_s": round(requests / wall, 3), "wall_s": round(wall, 1),
           "peak_rss_mb": round(status_kb(server.proc.pid, "VmHWM") / 1024, 1)}
    print(json.dumps(row), flush=True)
    return row


def server_cases(server: Server, media: dict[str, Path]) -> list[dict]:
    five_h = media["silent-5h"].read_bytes()
    rows = [server.case("baseline: GET /health", lambda: [server.request("GET", "/health")[0]])]
    rows.append(server.case("2.2 MB m4a holding 5 h of silence (refused)",
                            lambda: [server.request("POST", "/", five_h, "audio/mp4")[0]]))
    with ThreadPoolExecutor(2) as pool:
        rows.append(server.case("two 5 h m4a at once (refused)", lambda: list(pool.map(
            lambda _: server.request("POST", "/", five_h, "audio/mp4")[0], range(2)))))
    lying = media["lying-4.2h"].read_bytes()
    rows.append(server.case(f"ADTS claiming {claimed_min(media['lying-4.2h'])} min, holding 4.2 h (refused at the 4 h limit)",
                            lambda: [server.request("POST", "/", lying, "audio/aac")[0]]))
    one_h = media["silent-1h"].read_bytes()
    rows.append(server.case("1 h of silence, m4a (accepted)", lambda: [server.request("POST", "/", one_h, "audio/mp4")[0]]))
    big = json.dumps({"inputs": base64.b64encode(os.urandom(150 * 2**20)).decode()}).encode()
    rows.append(server.case("JSON body of 200 MB (150 MB in base64, not audio)",
                            lambda: [server.request("POST", "/", big, "application/json")[0]]))
    big = None  # freed
    deep = b"[" * 500_000 + b"]" * 500_000
    rows.append(server.case("deeply nested JSON (500k levels)", lambda: [server.request("POST", "/", deep, "application/json")[0]]))
    head = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Type: audio/wav\r\n"
    rows.append(server.case("Content-Length: \u00b2 and a 5000-digit Content-Length", lambda: [
        raw_status(server.raw(head + "Content-Length: \u00b2\r\n\r\n".encode())),
        raw_status(server.raw(head + b"Content-Length: " + b"9" * 5000 + b"\r\n\r\n"))]))
    rows.append(server.case("body trickled a byte per 0.5 s (body timeout 5 s)",
                            lambda: [raw_status(server.raw(head + b"Content-Length: 1000\r\n\r\n", b"x" * 1000))]))

    def half_open() -> list[int]:
        socks = [socket.create_connection(("127.0.0.1", server.port), timeout=60) for _ in range(200)]
        time.sleep(0.5)
        threads = server.threads()
        statuses = []
        for s in socks:
            out = b""
            while chunk := s.recv(65536):
                out += chunk
            statuses.append(raw_status(out))
            s.close()
        print(f"  threads with 200 half-open connections: {threads}", flush=True)
        return sorted(set(statuses)) + [sum(1 for x in statuses if x == 503)]

    rows.append(server.case("200 half-open connections (503 past 64, closed after the 5 s head timeout)", half_open))
    return rows


def openai_cases(server: Server, media: dict[str, Path]) -> list[dict]:
    """The abuse of server_cases, as multipart bodies on OpenAI's route (default limits: 200 MB, 4 h)."""
    five_h = form(media["silent-5h"].read_bytes(), model="whisper-1")
    rows = [server.case("OpenAI route: 2.2 MB m4a holding 5 h of silence (refused)",
                        lambda: [server.request("POST", OPENAI_PATH, five_h, MULTIPART)[0]])]
    noise = form(os.urandom(190 * 2**20), model="whisper-1")
    rows.append(server.case("OpenAI route: 190 MB file part, not audio (streamed to the spool, refused)",
                            lambda: [server.request("POST", OPENAI_PATH, noise, MULTIPART)[0]]))
    head = f"POST {OPENAI_PATH} HTTP/1.1\r\nHost: x\r\nContent-Type: {MULTIPART}\r\n".encode()
    big = form(os.urandom(250 * 2**20))
    chunked = b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in (big[i : i + 2**20] for i in range(0, len(big), 2**20)))
    rows.append(server.case("OpenAI route: 250 MB file part, chunked, no length (refused at 200 MB as it streams)",
                            lambda: [raw_status(server.raw(head + b"Transfer-Encoding: chunked\r\n\r\n" + chunked + b"0\r\n\r\n"))]))
    noise = big = chunked = None  # freed
    rows.append(server.case("OpenAI route: Content-Length of 250 MB announced (refused unread)",
                            lambda: [raw_status(server.raw(head + f"Content-Length: {250 * 2**20}\r\n\r\n".encode()))]))
    rows.append(server.case("OpenAI route: multipart body trickled a byte per 0.5 s (body timeout 5 s)",
                            lambda: [raw_status(server.raw(head + b"Content-Length: 1000\r\n\r\n", form(b"x" * 900)[:1000]))]))
    return rows


def cli_cases(media: dict[str, Path], work: Path) -> list[dict]:
    rows = []
    for name, argv in [
        ("jfk.wav, 11 s (models loaded, for reference)", [ROOT / "samples" / "jfk.wav"]),
        ("5.9 MB m4a holding 13 h of silence (refused, default 12 h limit)", [media["silent-13h"]]),
        ("5 h m4a, --max-duration 14400 (refused)", [media["silent-5h"], "--max-duration", 4 * HOUR]),
        (f"ADTS claiming {claimed_min(media['lying-4.2h'])} min, holding 4.2 h, --max-duration 14400 (refused at the limit)",
         [media["lying-4.2h"], "--max-duration", 4 * HOUR]),
        ("1 h of silence, m4a (accepted)", [media["silent-1h"]]),
    ]:
        t = time.perf_counter()
        code, peak, last = run_cli_peak(argv, work)
        row = {"name": f"cli: {name}", "peak_rss_mb": round(peak, 1), "exit_code": code, "last_line": last,
               "seconds": round(time.perf_counter() - t, 2)}
        print(json.dumps(row), flush=True)
        rows.append(row)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--work", type=Path, default=Path(tempfile.gettempdir()) / "specwhisper-abuse-bench",
                   help="folder for the generated inputs (kept: they take minutes to encode)")
    p.add_argument("--port", type=int, default=18765)
    p.add_argument("--requests", type=int, default=50)
    p.add_argument("--only", choices=["openai"], help="only the cases of OpenAI's route and the load through both routes")
    p.add_argument("--out", type=Path, help=f"default: {RESULTS.relative_to(ROOT)} ({OPENAI_RESULTS.relative_to(ROOT)} with --only openai)")
    args = p.parse_args(argv)
    args.out = args.out or (OPENAI_RESULTS if args.only else RESULTS)
    args.work.mkdir(parents=True, exist_ok=True)
    print("building inputs ...", flush=True)
    media = {"silent-5h": silent_m4a(args.work / "silent-5h.m4a", 5 * HOUR)}
    if not args.only:
        media.update({
            "silent-1h": silent_m4a(args.work / "silent-1h.m4a", HOUR),
            "silent-13h": silent_m4a(args.work / "silent-13h.m4a", 13 * HOUR),
            "lying-4.2h": lying_adts(args.work / "lying-4.2h.aac", 4.2 * HOUR),
        })
    runs = [] if args.only else cli_cases(media, args.work)
    server = Server(args.work, args.port, ["--body-timeout", "5", "--head-timeout", "5"])
    try:
        clip = clip_wav(3.5)
        if args.only:
            runs += openai_cases(server, media)
            rounds = 2  # alternated, so that the load of the other jobs on this machine falls on both routes alike
            for _ in range(rounds):
                runs.append(load(server, clip, args.requests // rounds, 4))
                runs.append(load(server, form(clip, model="whisper-1"), args.requests // rounds, 4, OPENAI_PATH, MULTIPART))
        else:
            runs += server_cases(server, media)
            runs += [load(server, clip, args.requests, c) for c in (4, 16)]
    finally:
        log = server.stop()
    for row in runs:  # latency percentiles belong to the load runs; the abuse cases say null
        row.setdefault("latency_p50_s", None)
        row.setdefault("latency_p90_s", None)
    leftovers = sorted(p.name for p in (args.work / "spool").glob("*"))
    result = {
        "machine": server_machine(),
        "setup": {"server": "python -m specwhisper.serving.http.serve, default limits (4 h audio, 200 MB upload, queue 16, 64 connections), "
                            "--body-timeout 5 --head-timeout 5, model base preloaded",
                  "load": "a 3.5 s clip of samples/jfk.wav as the raw body (POST /) or the multipart file "
                          "(POST /v1/audio/transcriptions, model whisper-1 = base)"},
        "server_log_tracebacks": log.count("Traceback"),
        "server_log_errors": log.count(" ERROR "),
        "spool_leftovers": leftovers,
        "runs": runs,
    }
    if not args.only:
        result["setup"]["cli"] = "python -m specwhisper.serving.cli.main, model base, default --max-duration 12 h unless given"
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {args.out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
