"""A job's callback: ``POST /v1/jobs?callback_url=URL`` has the server POST the job's answer to URL once the job
is done or failed, the JSON ``GET /v1/jobs/ID`` then gives (its state, and the result when done), so that a client
need not poll, or keep a connection a proxy would cut.

The server calls only the URLs its operator allowed (``--job-callbacks PREFIX,...``, each a scheme, host, port and
path prefix): one that called any URL a client named could be made to reach the network behind it. It follows no
redirect. With an API key the body is signed, ``X-Specwhisper-Signature: sha256=HEX``, the HMAC-SHA256 of the body
under the key (GitHub's webhook scheme), so that the receiver can tell the call came from the server. A call that
fails (no connection, no answer within ``TIMEOUT_S``, a status other than 2xx) is made again after each wait of
``JobLimits.callback_retry_s``; the job's ``callback`` tells how it went. Stdlib alone: the server's command reads
its options without the web stack.
"""

from __future__ import annotations

import hashlib
import heapq
import hmac
import itertools
import logging
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from urllib.parse import urlsplit

log = logging.getLogger(__name__)
TIMEOUT_S = 10.0  # to connect and be answered
MAX_URL_CHARS = 2048
SIGNATURE_HEADER = "X-Specwhisper-Signature"


def _parts(url: str) -> tuple[str, str, int, str]:
    """(scheme, host, port, path) of an absolute http(s) URL without credentials; ValueError otherwise."""
    if len(url) > MAX_URL_CHARS or any(c.isspace() or ord(c) < 32 for c in url):
        raise ValueError("not a URL (at most 2048 characters, no spaces)")
    try:
        split = urlsplit(url)
        port = split.port
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if split.scheme not in ("http", "https") or not split.hostname:
        raise ValueError("not an http:// or https:// URL with a host")
    if split.username is not None or split.password is not None:
        raise ValueError("a URL with a user name or password (send secrets in its path or query)")
    if any(part.lower().replace("%2e", ".") in (".", "..") for part in split.path.split("/")):
        raise ValueError("a URL whose path has . or .. in it")
    return split.scheme, split.hostname.lower(), port or (443 if split.scheme == "https" else 80), split.path or "/"


def callback_prefixes(text: str) -> tuple[str, ...]:
    """``--job-callbacks``' value: comma-separated URL prefixes (``https://hooks.example.com/transcripts/``), each
    an http(s) URL with a host and no query; ValueError naming the bad one."""
    prefixes = tuple(p.strip() for p in text.split(",") if p.strip())
    for prefix in prefixes:
        try:
            _parts(prefix)
        except ValueError as exc:
            raise ValueError(f"'{prefix[:80]}': {exc}") from None
        if urlsplit(prefix).query or urlsplit(prefix).fragment:
            raise ValueError(f"'{prefix[:80]}': a prefix has no query or fragment")
    return prefixes


def allowed(url: str, prefixes: tuple[str, ...]) -> bool:
    """Whether ``url`` is under one of ``prefixes``: the same scheme, host and port, and a path that is the
    prefix's or goes on below it (``/hooks`` allows ``/hooks`` and ``/hooks/1``, not ``/hooks-other``).
    Compared as parsed, not as text: ``https://hooks.example.com.evil.net/`` is another host."""
    try:
        scheme, host, port, path = _parts(url)
    except ValueError:
        return False
    for prefix in prefixes:
        p_scheme, p_host, p_port, p_path = _parts(prefix)
        if (scheme, host, port) == (p_scheme, p_host, p_port) and (
                path == p_path or path.startswith(p_path if p_path.endswith("/") else p_path + "/")):
            return True
    return False


def check_callback_url(url: str, prefixes: tuple[str, ...]) -> str:
    """``url`` if the server may call it; ValueError (one line, for the client) otherwise."""
    if not prefixes:
        raise ValueError("callback_url: this server makes no job callbacks (its operator allows them with "
                         "--job-callbacks); poll GET /v1/jobs/ID instead")
    try:
        _parts(url)
    except ValueError as exc:
        raise ValueError(f"callback_url: {exc}") from None
    if not allowed(url, prefixes):
        raise ValueError("callback_url: not a URL this server may call (its --job-callbacks)")
    return url


def signature(body: bytes, key: str) -> str:
    return "sha256=" + hmac.new(key.encode(), body, hashlib.sha256).hexdigest()


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        return None  # the 3xx answer is then an HTTPError: a failed call


_OPENER = urllib.request.build_opener(_NoRedirects)


def post(url: str, body: bytes, key: str | None, timeout_s: float = TIMEOUT_S) -> str | None:
    """POST ``body`` (JSON) to ``url``: None when answered 2xx, else why not, in one line."""
    headers = {"Content-Type": "application/json", "User-Agent": "specwhisper"}
    if key is not None:
        headers[SIGNATURE_HEADER] = signature(body, key)
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    try:
        with _OPENER.open(request, timeout=timeout_s) as answer:
            answer.read(1 << 16)
            return None
    except urllib.error.HTTPError as exc:
        return f"answered {exc.code}"
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        return f"no answer ({str(reason).splitlines()[0][:200] if str(reason) else type(reason).__name__})"


class Deliveries:
    """The calls of one server, made one at a time on a thread of their own: ``add(job_id)`` queues one;
    ``body(job_id)`` gives what to send (None: the job is gone, nothing is sent), ``url(job_id)`` where, and
    ``record(job_id, state, error)`` is told of each try (``delivered``; ``pending`` with the error while tries
    are left, then ``failed``). ``retry_s``: the waits before each try after the first; a call waiting for its
    next try holds up no other. ``close()`` stops at the next call's end; what was not delivered stays
    ``pending`` for the next server on the folder."""

    def __init__(self, body: Callable[[str], bytes | None], url: Callable[[str], str | None],
                 record: Callable[[str, str, str | None], None], key: str | None, retry_s: tuple[float, ...],
                 timeout_s: float = TIMEOUT_S):
        self._body, self._url, self._record = body, url, record
        self._key, self._retry_s, self._timeout_s = key, retry_s, timeout_s
        self._due: list[tuple[float, int, str, int]] = []  # (when, order, job, its try's index): a heap
        self._order = itertools.count()
        self._changed = threading.Condition()
        self._closed = False
        self._thread = threading.Thread(target=self._run, name="job-callbacks", daemon=True)
        self._thread.start()

    def add(self, job_id: str) -> None:
        self._schedule(job_id, 0, 0.0)

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._changed.notify()

    def _schedule(self, job_id: str, attempt: int, wait_s: float) -> None:
        with self._changed:
            heapq.heappush(self._due, (time.monotonic() + wait_s, next(self._order), job_id, attempt))
            self._changed.notify()

    def _next(self) -> tuple[str, int] | None:
        """The next try once it is due; None once closed."""
        with self._changed:
            while not self._closed:
                if self._due and self._due[0][0] <= time.monotonic():
                    _, _, job_id, attempt = heapq.heappop(self._due)
                    return job_id, attempt
                self._changed.wait(self._due[0][0] - time.monotonic() if self._due else None)
            return None

    def _run(self) -> None:
        while (due := self._next()) is not None:
            try:
                self._try(*due)
            except Exception:  # noqa: BLE001 - one job's call must not end the others'
                log.exception("the callback of %s", due[0])

    def _try(self, job_id: str, attempt: int) -> None:
        url, body = self._url(job_id), self._body(job_id)
        if url is None or body is None:  # deleted meanwhile
            return
        error = post(url, body, self._key, self._timeout_s)
        left = attempt < len(self._retry_s)
        if error is not None:
            log.warning("the callback of %s: %s (try %d of %d)", job_id, error, attempt + 1, len(self._retry_s) + 1)
        self._record(job_id, "delivered" if error is None else "pending" if left else "failed", error)
        if error is not None and left:
            self._schedule(job_id, attempt + 1, self._retry_s[attempt])
