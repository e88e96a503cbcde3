"""The host's access log: one line per HTTP request, written when its answer ends.

``<time> <client> "<METHOD> <path>" <status> <duration> ms``, the time in UTC by the store's
clock (an event stream's line comes when the stream closes). Invariant: a line carries nothing
a request may hide a secret in: no query string, no header (so never a bearer token), no body;
the path's bytes outside printable ASCII are percent-escaped, so a line is always one line.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any
from urllib.parse import quote

from threads.clock import Clock, utc_iso

ASGIApp = Callable[[Any, Any, Any], Any]
SAFE_PATH_CHARS = "/:@-._~!$&'()*+,;="  # printable path characters kept as they are


class AccessLog:
    """ASGI middleware writing one ``access_line`` per HTTP request to ``write``."""

    def __init__(self, app: ASGIApp, *, clock: Clock, write: Callable[[str], None]) -> None:
        self.app = app
        self.clock = clock
        self.write = write

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = self.clock.now_ms()
        status: list[int] = []

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(int(message["status"]))
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            self.write(access_line(scope, status[0] if status else None, started,
                                   self.clock.now_ms()))


def access_line(scope: Any, status: int | None, started_ms: int, ended_ms: int) -> str:
    """The line for one request (``status`` None: it ended before an answer began)."""
    client = scope.get("client")
    who = client[0] if client else "-"
    path = quote(str(scope.get("path", "")), safe=SAFE_PATH_CHARS)
    answered = "-" if status is None else str(status)
    request = f'"{quote(str(scope["method"]), safe="")} {path}"'
    return f"{utc_iso(ended_ms)} {who} {request} {answered} {ended_ms - started_ms} ms"
