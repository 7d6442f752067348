"""``python -m specwhisper.serving.http.serve``: the endpoint over HTTP on uvicorn (what the Docker image runs),
set up from its options and SPECWHISPER_* variables; the server itself is :mod:`specwhisper.serving.http.server`.
With an API key (``--api-key``, or the ``SPECWHISPER_API_KEY`` variable) every route but ``/health`` wants
``Authorization: Bearer <key>``. The options and their mistakes are read before the web stack and the models
are imported (seconds), so ``--help`` and a bad value are answered at once.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from specwhisper.asr.weights.errors import ModelError
from specwhisper.pipeline.options import BY_NAME
from specwhisper.serving.arguments import OneLineParser, add_options, positive, tcp_port
from specwhisper.messages import one_line
from specwhisper.serving.http.callbacks import callback_prefixes
from specwhisper.serving.http.config import ConnectionLimits, JobLimits, RequestLimits, ServerConfig, check_api_key

API_KEY_ENV = "SPECWHISPER_API_KEY"
LOOPBACK = ("127.0.0.1", "::1", "localhost")
log = logging.getLogger(__name__)


def build_parser() -> argparse.ArgumentParser:
    d, c, r = ServerConfig(), ConnectionLimits(), RequestLimits()
    p = OneLineParser(prog="python -m specwhisper.serving.http.serve", description="Serve the transcription endpoint over HTTP. The models and their settings "
                      "come from SPECWHISPER_* variables (SPECWHISPER_THREADS is --threads' default).")
    p.add_argument("--host", default=d.host, help="address to bind (default: 127.0.0.1; 0.0.0.0 in a container)")
    p.add_argument("--port", type=tcp_port(), default=d.port, help=f"port (default: {d.port}; 0: any free port)")
    p.add_argument("-q", "--quiet", action="store_true", help="no access log")
    limits = [  # flag, type, default, what it bounds
        ("--queue", int, d.max_waiting, "requests that may wait for the model; more get 503 with Retry-After"),
        ("--batch-requests", int, d.batch_requests, "uploads with the same model and options that wait together are "
                                                    "transcribed in one pass, up to this many (1: one at a time)"),
        ("--batch-audio", float, d.batch_audio_s, "seconds of audio such a pass takes besides the first upload's"),
        ("--max-connections", int, c.max_connections, "open connections; more get 503"),
        ("--request-timeout", float, r.request_timeout_s, "seconds from a request's arrival to its answer; later: 504"),
        ("--body-timeout", float, r.body_timeout_s, "seconds to send a request body; later: 408"),
        ("--head-timeout", float, c.head_timeout_s, "seconds to send a request's line and headers; later: 408"),
        ("--keep-alive", int, c.keep_alive_s, "seconds an idle connection stays open"),
        ("--retry-after", int, r.retry_after_s, "seconds a client turned away by a full queue is told to wait"),
    ]
    for flag, kind, default, text in limits:
        p.add_argument(flag, type=positive(kind), default=default, help=f"{text} (default: {default:g})")
    p.add_argument("--overtake-audio", type=positive(float, or_zero=True), default=d.overtake_s,
                   help="an upload of at most this many seconds of audio, and a live stream's update, is transcribed "
                        "inside a longer one's pass at its next batch instead of after it (0: never; "
                        f"default: {d.overtake_s:g})")
    p.add_argument("--spool-dir", type=Path, default=d.spool_dir, help=f"folder for uploads in flight (default: {d.spool_dir})")
    p.add_argument("--jobs-dir", type=Path, help="folder of the jobs of POST /v1/jobs, taken up again by the next server "
                                                  "started on it (default: the spool folder's jobs/)")
    p.add_argument("--max-jobs", type=positive(int), default=d.jobs.max_jobs,
                   help=f"jobs held at once, finished ones included; more get 429 (default: {d.jobs.max_jobs})")
    p.add_argument("--job-ttl", type=positive(float), default=d.jobs.ttl_s,
                   help=f"seconds a finished job's result is kept (default: {d.jobs.ttl_s:g})")
    p.add_argument("--job-callbacks", type=_prefixes, default=d.jobs.callbacks, metavar="PREFIX[,PREFIX]",
                   help="URL prefixes a job's callback_url may be under (https://hooks.example.com/transcripts/): the "
                        "server POSTs the job's answer there when it ends, signed with the API key (default: none, "
                        "no callbacks)")
    p.add_argument("--api-key", help=f"a key every request must send as 'Authorization: Bearer KEY' (all routes but /health; "
                                     f"default: the {API_KEY_ENV} variable, which keeps it out of the process list; "
                                     f"neither: no key, anyone who reaches the port may use the server)")
    add_options(p, [BY_NAME["threads"]])  # declared once for every entry point
    return p


def _prefixes(text: str) -> tuple[str, ...]:
    try:
        return callback_prefixes(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def api_key_from(args: argparse.Namespace, env: Mapping[str, str]) -> str | None:
    """The key of --api-key, else of SPECWHISPER_API_KEY; None when neither is set. One set but empty is an
    error, not an open server (``--api-key "$KEY"`` with KEY unset)."""
    key = args.api_key if args.api_key is not None else env.get(API_KEY_ENV)
    if key is None:
        return None
    try:
        return check_api_key(key)
    except ValueError as exc:
        raise ValueError(f"{'--api-key' if args.api_key is not None else API_KEY_ENV}: {exc}") from None


def config_from_args(args: argparse.Namespace, max_upload_bytes: int, api_key: str | None = None) -> ServerConfig:
    return ServerConfig(
        host=args.host,
        port=args.port,
        connections=ConnectionLimits(max_connections=args.max_connections, head_timeout_s=args.head_timeout,
                                     keep_alive_s=args.keep_alive),
        requests=RequestLimits(max_upload_bytes=max_upload_bytes, body_timeout_s=args.body_timeout,
                               request_timeout_s=args.request_timeout, retry_after_s=args.retry_after),
        max_waiting=args.queue,
        batch_requests=args.batch_requests,
        batch_audio_s=args.batch_audio,
        overtake_s=args.overtake_audio,
        spool_dir=args.spool_dir,
        jobs_dir=args.jobs_dir,
        jobs=JobLimits(max_jobs=args.max_jobs, ttl_s=args.job_ttl, callbacks=args.job_callbacks),
        access_log=not args.quiet,
        api_key=api_key,
    )


def main(argv: list[str] | None = None) -> int:
    """Settings come from SPECWHISPER_* variables, as for handler.EndpointHandler."""
    args = build_parser().parse_args(argv)
    try:
        api_key = api_key_from(args, os.environ)
    except ValueError as exc:
        print(f"serve: error: {one_line(exc)}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    # the web stack and the models' code: imported once the options passed (seconds)
    from specwhisper.serving.endpoint.contract import Endpoint, settings_from_env
    from specwhisper.serving.http.server import EndpointServer

    try:
        settings = settings_from_env(os.environ)
        if args.threads is not None:
            settings.base.threads = args.threads
        config = config_from_args(args, settings.max_upload_bytes, api_key)
        server = EndpointServer(Endpoint(settings), config)
    except (ValueError, OSError, ModelError) as exc:  # a bad setting, a model that does not load (a bad name)
        print(f"serve: error: {one_line(exc)}", file=sys.stderr)
        return 2
    if config.api_key is None and config.host not in LOOPBACK:
        log.warning("no API key (--api-key or %s): anyone who reaches %s may use the server", API_KEY_ENV, server.url)
    print(f"serving on {server.url}", file=sys.stderr, flush=True)
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
