"""The server's API key: with one set, every HTTP route and the live WebSocket want
``Authorization: Bearer <key>`` (what OpenAI's clients send), and a request without it, or with another
key, is answered 401 before the application sees it. ``/health`` stays open, so that a load balancer or
a container's health check needs no secret; it tells nothing but that the server is up.

The key is compared in constant time (:func:`hmac.compare_digest` on SHA-256 digests, so that neither
the content nor the length of the key leaks through the time a refusal takes). A refused HTTP request's
body is never read: the answer closes the connection. A refused WebSocket gets its 401 as the answer
to the handshake (the ASGI denial-response extension; a plain close, which the server sends as 403,
where a server lacks it), so no socket is opened.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from specwhisper.serving.http.config import check_api_key
from specwhisper.serving.http.uploads import Refusal

OPEN_PATHS = frozenset({"/health"})
SCHEME = b"bearer"


def bearer_token(headers: list[tuple[bytes, bytes]]) -> bytes | None:
    """The token of an ``Authorization: Bearer <token>`` header, None without one."""
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.strip().partition(b" ")
            return token.strip() if scheme.lower() == SCHEME else None
    return None


def _digest(value: bytes) -> bytes:
    return hashlib.sha256(value).digest()


class ApiKeyGuard:
    """ASGI middleware: lets through requests that carry ``key`` (and those to ``OPEN_PATHS``); answers
    the others with ``refuser(path)(Refusal(401, ...))``, the error body of the route they asked for."""

    def __init__(self, app: ASGIApp, key: str, refuser: Callable[[str], Callable[[Refusal], Response]]):
        self.app = app
        self._digest = _digest(check_api_key(key).encode())
        self.refuser = refuser

    def allowed(self, scope: Scope) -> Refusal | None:
        """None when the request may go on; the refusal otherwise."""
        token = bearer_token(scope.get("headers", []))
        if token is None:
            return Refusal(401, "no API key given: send it in an Authorization header (Authorization: Bearer YOUR_KEY)",
                           close=True)
        if not hmac.compare_digest(_digest(token), self._digest):
            return Refusal(401, "incorrect API key provided", close=True, code="invalid_api_key")
        return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        refusal = self.allowed(scope)
        if refusal is None:
            await self.app(scope, receive, send)
            return
        response = self.refuser(scope["path"])(refusal)
        response.headers["www-authenticate"] = "Bearer"
        if scope["type"] == "websocket" and "websocket.http.response" not in scope.get("extensions", {}):
            await send({"type": "websocket.close", "code": 1008})
            return
        await response(scope, receive, send)  # a WebSocket's denial response: the handshake's answer
