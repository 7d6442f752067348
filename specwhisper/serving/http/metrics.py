"""``GET /metrics``: the server's counters in Prometheus's text format (prometheus_client), for the
scrapers and dashboards a deployment already runs.

Kept in a registry of the server's own (no process-wide state: two servers in one process count apart):

* ``specwhisper_http_requests_total{route, method, status}``: requests answered, by the route's template
  (``/v1/jobs/{job_id}``, not each job's path; ``unmatched`` for a path no route takes), what the API key's
  guard refuses included;
* ``specwhisper_http_request_duration_seconds{route}``: the time from a request's arrival to its answer's
  start (for a streamed answer, its first byte);
* ``specwhisper_audio_seconds_total``, ``specwhisper_transcriptions_total``,
  ``specwhisper_transcription_seconds_total``: the audio transcribed, the transcripts made and the wall
  seconds the pipeline took for them (every route's, the jobs' included: ``Endpoint.run``);
* ``specwhisper_decoder_tokens_total``, ``specwhisper_decoder_target_passes_total``,
  ``specwhisper_draft_tokens_total``, ``specwhisper_draft_accepted_tokens_total``: what speculation did
  (tokens per target pass, acceptance: ratios of these);
* gauges read when scraped: ``specwhisper_worker_waiting`` (jobs queued for the model worker),
  ``specwhisper_worker_busy``, ``specwhisper_models_loaded``, ``specwhisper_live_streams``;
* counters read when scraped: ``specwhisper_live_streams_started_total`` and
  ``specwhisper_live_audio_seconds_total`` (the audio live sockets received, as it arrives).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily
from starlette.routing import Match

from specwhisper.results.transcript import Transcript

METRICS_PATH = "/metrics"
# seconds: a short upload answers in well under a second, an hour of audio on a CPU in minutes
DURATION_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 900.0, 3600.0)


class _ReadCounters:
    """Counters whose totals another object keeps: name -> (help, a function read at each scrape)."""

    def __init__(self, counters: dict[str, tuple[str, Callable[[], float]]]):
        self.counters = counters

    def collect(self):
        for name, (text, read) in self.counters.items():
            yield CounterMetricFamily(name, text, value=read())


class ServerMetrics:
    """The counters and gauges above; ``gauges`` and ``counters`` name -> (help, a function read at each scrape)."""

    def __init__(self, gauges: dict[str, tuple[str, Callable[[], float]]],
                 counters: dict[str, tuple[str, Callable[[], float]]] | None = None):
        r = self.registry = CollectorRegistry()
        if counters:
            r.register(_ReadCounters(counters))
        self.requests = Counter("specwhisper_http_requests", "HTTP requests answered, by route template, method and "
                                "status", ["route", "method", "status"], registry=r)
        self.duration = Histogram("specwhisper_http_request_duration_seconds", "Seconds from a request's arrival to its "
                                  "answer's start, by route template", ["route"], buckets=DURATION_BUCKETS, registry=r)
        self.audio = Counter("specwhisper_audio_seconds", "Seconds of audio transcribed", registry=r)
        self.transcriptions = Counter("specwhisper_transcriptions", "Transcripts made", registry=r)
        self.seconds = Counter("specwhisper_transcription_seconds", "Wall seconds the pipeline took for them", registry=r)
        self.tokens = Counter("specwhisper_decoder_tokens", "Tokens the decoder wrote", registry=r)
        self.passes = Counter("specwhisper_decoder_target_passes", "Target-model decoder passes (per row)", registry=r)
        self.drafted = Counter("specwhisper_draft_tokens", "Tokens the drafters proposed", registry=r)
        self.accepted = Counter("specwhisper_draft_accepted_tokens", "Proposed tokens the target model kept", registry=r)
        for name, (text, read) in gauges.items():
            Gauge(name, text, registry=r).set_function(read)

    def transcribed(self, transcript: Transcript) -> None:
        """Count a transcript made (``Endpoint.on_transcript``)."""
        stats = transcript.stats
        self.transcriptions.inc()
        self.audio.inc(max(0.0, transcript.duration))
        self.seconds.inc(max(0.0, float(transcript.timings.get("total", 0.0) or 0.0)))
        self.tokens.inc(stats.generated_tokens)
        self.passes.inc(stats.target_passes)
        self.drafted.inc(stats.drafted_tokens)
        self.accepted.inc(stats.accepted_tokens)

    def page(self) -> bytes:
        return generate_latest(self.registry)

    content_type = CONTENT_TYPE_LATEST


class RequestMetrics:
    """ASGI middleware counting every HTTP request with its route's template, status and time to answer
    (outermost, so that what an inner layer refuses counts too: the API key's guard answers before the
    router, so such a request's template is found among ``routes`` here)."""

    def __init__(self, app, metrics: ServerMetrics, routes: list):
        self.app, self.metrics, self.routes = app, metrics, routes

    def template(self, scope) -> str:
        """The path template of the route that took (or would take) the request; ``unmatched`` for none."""
        route = scope.get("route")  # set by the router in the scope it was given: this dict
        if route is None:
            route = next((r for r in self.routes if r.matches(scope)[0] != Match.NONE), None)
        return getattr(route, "path", None) or "unmatched"

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        t0 = time.perf_counter()
        status = [500]  # what a request answered by no one (an exception past every handler) counts as
        began = [None]

        async def sending(message) -> None:
            if message["type"] == "http.response.start":
                status[0], began[0] = message["status"], time.perf_counter()
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            template = self.template(scope)
            self.metrics.requests.labels(template, scope.get("method", ""), str(status[0])).inc()
            self.metrics.duration.labels(template).observe((began[0] or time.perf_counter()) - t0)
