"""uvicorn's HTTP protocol with deadlines, so that slow or silent clients cannot hold connections.

uvicorn closes a kept-alive connection that stays idle after a response (``timeout_keep_alive``),
but waits without limit for a new connection's first byte, and for a request that arrives a byte
a minute; it has no setting for either. Here a new connection gets the keep-alive time to start a
request, and every request, from its first byte to the end of its body, gets ``request_timeout``
seconds; past that the client is told 408 (as JSON, like every error of the demo) and the
connection is closed. A 10 MB body (the default ``--max-body``) then needs about 3 Mbit/s. A request
the HTTP parser refuses (a body longer than its Content-Length, a malformed request line) is
answered 400 in the same JSON, not in uvicorn's plain text.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

REQUEST_TIMEOUT = 30.0


class DeadlineProtocol(HttpToolsProtocol):
    """HttpToolsProtocol whose connections and requests end at a deadline."""

    request_timeout: float = REQUEST_TIMEOUT
    _deadline: asyncio.TimerHandle | None = None
    _headers_received = False  # of the request being received; until then self.cycle is an earlier one's

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm(self.timeout_keep_alive, self.transport.close)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._headers_received = False
        self._arm(self.request_timeout, self._request_expired)

    def on_headers_complete(self) -> None:
        self._headers_received = True
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        super().on_message_complete()
        self._disarm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self, seconds: float, callback: Callable[[], None]) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(seconds, callback)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _request_expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        if self._may_answer():
            self.transport.write(_json_response(408, "Request Timeout",
                                                f"request not received within {self.request_timeout:g} s"))
        self.transport.close()

    def send_400_response(self, msg: str) -> None:
        self.transport.write(_json_response(400, "Bad Request", f"invalid HTTP request: {msg}"))
        self.transport.close()

    def _may_answer(self) -> bool:
        """Whether a 408 would be the next bytes on the connection: no response begun and unfinished.

        The app may answer before reading a body (413 on a declared length); with pipelining an
        earlier request's response may still be under way.
        """
        if not self._headers_received:
            return self.cycle is None or self.cycle.response_complete
        return not self.pipeline and not self.cycle.response_started


def _json_response(status: int, reason: str, error: str) -> bytes:
    """A whole response, written by the protocol itself, that closes the connection."""
    body = json.dumps({"error": error}).encode()
    head = (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body
