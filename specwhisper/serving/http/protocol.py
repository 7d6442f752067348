"""uvicorn's HTTP/1.1 protocol (h11) with the guards a public server needs below the application:

* at most ``max_connections`` open connections: one more is answered 503 (with Retry-After) and closed;
* a request head (request line and headers) must arrive within ``head_timeout_s`` of the connection
  opening or of the previous answer, so half-open and slowly trickled heads do not pile up;
* a malformed request (a bad Content-Length, a broken request line) is answered with the same one-line
  JSON error as every other, instead of uvicorn's plain text;
* closing lingers: the answer is followed by a FIN, and what the client still sends is read and dropped
  for up to ``linger_s`` before the socket closes. Closing a socket with unread data makes the kernel
  send a reset, which would destroy an early answer (a 413 to a body still arriving) on its way.

WebSockets (``/v1/live``) run on uvicorn's ``websockets-sansio`` protocol, with one fix: a handshake
refused with an HTTP answer (the API key's 401) is marked complete, so uvicorn does not log an error
for it (:class:`RefusingWebSocketProtocol`).
"""

from __future__ import annotations

import asyncio
import functools
import http
import json
from collections.abc import Callable
from typing import Any

import h11
from uvicorn.config import Config
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from uvicorn.server import ServerState

from specwhisper.serving.http.config import ConnectionLimits


def error_bytes(status: int, message: str, retry_after_s: int | None = None) -> bytes:
    """A complete HTTP/1.1 answer carrying ``{"error", "status"}``, closing the connection."""
    body = json.dumps({"error": message, "status": status}, separators=(",", ":")).encode()
    head = [f"HTTP/1.1 {status} {http.HTTPStatus(status).phrase}", "content-type: application/json",
            f"content-length: {len(body)}", "connection: close"]
    if retry_after_s is not None:
        head.append(f"retry-after: {retry_after_s}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


class LingeringTransport:
    """A transport whose ``close()`` half-closes (FIN after the pending writes), keeps reading so that
    the client's late data is dropped rather than answered with a reset, and closes for real when the
    client closes or after ``linger_s``. Everything else goes to the real transport."""

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop, linger_s: float):
        self._transport = transport
        self._loop = loop
        self._linger_s = linger_s
        self._timer: asyncio.TimerHandle | None = None
        self.lingering = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)

    def is_closing(self) -> bool:
        return self.lingering or self._transport.is_closing()

    def write(self, data: bytes) -> None:
        if not self.lingering:  # after close() nothing more goes out (a WebSocket protocol answering
            self._transport.write(data)  # the late frames it still parses would write after the FIN)

    def close(self) -> None:
        if self.is_closing():
            return
        self.lingering = True
        if self._linger_s <= 0 or not self._transport.can_write_eof():
            self._transport.close()
            return
        self._transport.write_eof()
        self._transport.resume_reading()
        self._timer = self._loop.call_later(self._linger_s, self.abort_linger)

    def abort_linger(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._transport.close()


class GuardedH11Protocol(H11Protocol):
    def __init__(self, config: Config, server_state: ServerState, app_state: dict[str, Any],
                 _loop: asyncio.AbstractEventLoop | None = None, *, limits: ConnectionLimits):
        super().__init__(config, server_state, app_state, _loop)
        self.limits = limits
        self._head_timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(LingeringTransport(transport, self.loop, self.limits.linger_s))  # type: ignore[arg-type]
        if len(self.connections) > self.limits.max_connections:
            self._answer_and_close(503, f"too many connections (at most {self.limits.max_connections}); try again later",
                                   retry_after_s=1)
            return
        self._arm_head_timer()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm_head_timer()
        self.transport.abort_linger()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if not self.transport.lingering:  # what comes after the answer is dropped
            super().data_received(data)

    def eof_received(self) -> bool | None:
        if self.transport.lingering:
            self.transport.abort_linger()  # the client is done too
        return super().eof_received()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm_head_timer()

    def handle_websocket_upgrade(self, event: h11.Request) -> None:
        self._disarm_head_timer()  # the head has arrived; the WebSocket's own timeouts apply from here
        super().handle_websocket_upgrade(event)

    def send_400_response(self, msg: str) -> None:
        self._answer_and_close(400, "malformed HTTP request (its request line, a header or the Content-Length)")

    def _answer_and_close(self, status: int, message: str, retry_after_s: int | None = None) -> None:
        self._disarm_head_timer()
        if not self.transport.is_closing():
            self.transport.write(error_bytes(status, message, retry_after_s))
            self.transport.close()

    def _arm_head_timer(self) -> None:
        self._disarm_head_timer()
        self._head_timer = self.loop.call_later(self.limits.head_timeout_s, self._head_timed_out)

    def _disarm_head_timer(self) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None

    def _head_timed_out(self) -> None:
        self._head_timer = None
        if self.transport.is_closing() or self.conn.their_state is not h11.IDLE:
            return  # a request is in the application, whose own deadlines apply
        if self.conn.trailing_data[0]:  # part of a head came: say why it is dropped
            self._answer_and_close(408, f"the request head did not arrive within {self.limits.head_timeout_s:g} s")
        else:
            self.transport.close()


def protocol_factory(limits: ConnectionLimits) -> Callable[..., GuardedH11Protocol]:
    """What ``uvicorn.Config(http=...)`` takes: builds a guarded protocol per connection."""
    return functools.partial(GuardedH11Protocol, limits=limits)


class RefusingWebSocketProtocol(WebSocketsSansIOProtocol):
    """uvicorn's sans-I/O WebSocket protocol, whose denial response (an HTTP answer to the handshake, the
    ASGI ``websocket.http.response`` extension) leaves ``handshake_complete`` unset in uvicorn 0.54: each
    refused handshake then logs "ASGI callable returned without completing handshake." at ERROR level,
    though the client got its answer (uvicorn pull request #3138, open; the wsproto protocol sets it)."""

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "websocket.http.response.body" and not message.get("more_body", False):
            self.handshake_complete = True
