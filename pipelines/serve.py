"""A small HTTP server around the endpoint handler (what the Docker image runs).

* ``POST /`` (or ``/predict``) with ``Content-Type: application/json``:
  ``{"inputs": "<base64 audio>", "parameters": {...}}``, as Inference Endpoints send it;
* ``POST /`` with any other content type: the body is the audio file, parameters come from the
  query string (``/?language=en&diarize=true&formats=srt,vtt``);
* ``GET /health``: ``{"status": "ok"}`` once the models are loaded.

Answers are JSON; an error answer carries the handler's status code. Requests are served on
threads and queue for the model inside the handler.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

Handle = Callable[[dict], dict]
POST_PATHS = ("/", "/predict")
JSON_OVERHEAD = 1 << 20  # room for the JSON around a base64 upload


def query_parameters(query: str) -> dict:
    """``a=1&formats=srt,vtt`` -> {"a": "1", "formats": ["srt", "vtt"]} (pydantic converts the strings)."""
    params: dict = {}
    for key, values in parse_qs(query, keep_blank_values=True).items():
        params[key] = [f for v in values for f in v.split(",") if f] if key == "formats" else values[-1]
    return params


class EndpointServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], handle: Handle, max_upload_bytes: int, quiet: bool = False):
        self.handle = handle
        self.max_body_bytes = max_upload_bytes * 4 // 3 + JSON_OVERHEAD
        self.quiet = quiet
        super().__init__(address, RequestHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"


class RequestHandler(BaseHTTPRequestHandler):
    server: EndpointServer
    protocol_version = "HTTP/1.1"
    timeout = 120  # seconds a client may take to send its request

    def _send(self, status: int, body: dict) -> None:
        data = json.dumps(body, ensure_ascii=False).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _refuse(self, status: int, message: str) -> None:
        self.close_connection = True
        self._send(status, {"error": message, "status": status})

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        if urlsplit(self.path).path == "/health":
            self._send(200, {"status": "ok"})
        else:
            self._refuse(404, f"no such path '{urlsplit(self.path).path}' (POST / with audio, GET /health)")

    def do_POST(self) -> None:  # noqa: N802
        url = urlsplit(self.path)
        if url.path not in POST_PATHS:
            return self._refuse(404, f"no such path '{url.path}' (POST / with audio, GET /health)")
        length = self.headers.get("Content-Length")
        if length is None or not length.isdigit():
            return self._refuse(411, "a Content-Length header is required")
        if int(length) > self.server.max_body_bytes:
            return self._refuse(413, f"the request body is larger than {self.server.max_body_bytes} bytes")
        body = self.rfile.read(int(length))
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if ctype == "application/json":
            try:
                data = json.loads(body)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                return self._send(400, {"error": f"the body is not valid JSON ({exc})", "status": 400})
        else:
            data = {"inputs": body}
            if url.query:
                data["parameters"] = query_parameters(url.query)
        result = self.server.handle(data)
        self._send(int(result.get("status", 400)) if "error" in result else 200, result)

    def log_message(self, format: str, *args) -> None:  # noqa: A002 - http.server's signature
        if not self.server.quiet:
            super().log_message(format, *args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m pipelines.serve", description="Serve the transcription endpoint over HTTP.")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: 127.0.0.1; 0.0.0.0 in a container)")
    p.add_argument("--port", type=int, default=8080, help="port (default: 8080)")
    p.add_argument("-q", "--quiet", action="store_true", help="no access log")
    p.add_argument("--threads", type=int, help="CPU threads for torch (default: SPECWHISPER_THREADS, else one per core)")
    return p


def main(argv: list[str] | None = None) -> int:
    """Settings come from SPECWHISPER_* variables, as for handler.EndpointHandler."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    from asr.threads import check_threads
    from pipelines.endpoint import Endpoint, settings_from_env

    try:
        settings = settings_from_env(os.environ)
        if args.threads is not None:
            check_threads(args.threads)
            settings.base.threads = args.threads
        endpoint = Endpoint(settings)
        server = EndpointServer((args.host, args.port), endpoint, settings.max_upload_bytes, quiet=args.quiet)
    except (ValueError, OSError) as exc:
        print(f"serve: error: {exc}", file=sys.stderr)
        return 2
    print(f"serving on {server.url}", file=sys.stderr, flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
