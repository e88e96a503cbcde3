"""A minimal HTTP/1.1 server on loopback for fake model providers.

It owns the socket work only: parse each request (keep-alive, ``Content-Length`` bodies), record
it, ask a handler for a reply, and write that reply as a JSON body or as an SSE stream in chunked
transfer encoding, so a stream cut before its terminating chunk is visible to the client as a
broken body. Invariant: every accepted TCP connection and every request body is recorded before
anything is answered, so a test can prove a call never reached the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

_REASONS = {
    200: "OK", 400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
    413: "Payload Too Large", 429: "Too Many Requests", 500: "Internal Server Error",
    502: "Bad Gateway", 503: "Service Unavailable", 529: "Overloaded",
}


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]  # lower-cased names
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


@dataclass(frozen=True, slots=True)
class BodyReply:
    """A complete response with a ``Content-Length`` body (JSON or deliberately broken bytes)."""

    status: int
    body: bytes
    headers: dict[str, str] = field(default_factory=dict)
    content_type: str = "application/json"


@dataclass(frozen=True, slots=True)
class SseEvent:
    data: str
    event: str | None = None


@dataclass(frozen=True, slots=True)
class SseReply:
    """A 200 ``text/event-stream``; with ``cut_after`` set, the connection is dropped after that
    many events, without the final chunk; with ``hold_after`` set, nothing more is sent after that
    many events until the server closes (a stream still in flight)."""

    events: list[SseEvent]
    cut_after: int | None = None
    hold_after: int | None = None
    headers: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class StallReply:
    """Accept the request and never answer (until the server closes): drives client timeouts."""


Reply = BodyReply | SseReply | StallReply
Handler = Callable[[RecordedRequest], Awaitable[Reply]]


class LoopbackHTTPServer:
    """Serves ``handler`` on ``127.0.0.1`` at an ephemeral port; use as an async context manager."""

    def __init__(self, handler: Handler) -> None:
        self._handler = handler
        self._server: asyncio.Server | None = None
        self._writers: set[asyncio.StreamWriter] = set()
        self._closing = asyncio.Event()
        self.connections: list[tuple[str, int]] = []
        self.requests: list[RecordedRequest] = []
        self.holding = asyncio.Event()  # set once a stream is held in flight (``hold_after``)

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("the server is not started; use `async with`")
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def __aenter__(self) -> LoopbackHTTPServer:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self

    async def __aexit__(self, *_: object) -> None:
        self._closing.set()
        if self._server is not None:
            self._server.close()
        for writer in list(self._writers):
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()
        if self._server is not None:
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections.append(writer.get_extra_info("peername"))
        self._writers.add(writer)
        try:
            while (request := await _read_request(reader)) is not None:
                self.requests.append(request)
                reply = await self._handler(request)
                if not await self._write(writer, reply):
                    break
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # the client went away; nothing left to answer
        finally:
            self._writers.discard(writer)
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _write(self, writer: asyncio.StreamWriter, reply: Reply) -> bool:
        """Write ``reply``; return whether the connection may serve another request."""
        if isinstance(reply, StallReply):
            await self._closing.wait()
            return False
        if isinstance(reply, BodyReply):
            head = _head(reply.status, {
                "content-type": reply.content_type,
                "content-length": str(len(reply.body)),
                **reply.headers,
            })
            writer.write(head + reply.body)
            await writer.drain()
            return True
        writer.write(_head(200, {
            "content-type": "text/event-stream",
            "transfer-encoding": "chunked",
            **reply.headers,
        }))
        for sent, event in enumerate(reply.events):
            if reply.cut_after is not None and sent >= reply.cut_after:
                await writer.drain()
                return False  # drop the connection mid-body
            if reply.hold_after is not None and sent >= reply.hold_after:
                await writer.drain()
                self.holding.set()
                await self._closing.wait()
                return False
            frame = (f"event: {event.event}\n" if event.event else "") + f"data: {event.data}\n\n"
            payload = frame.encode()
            writer.write(f"{len(payload):x}\r\n".encode() + payload + b"\r\n")
            await writer.drain()
        writer.write(b"0\r\n\r\n")
        await writer.drain()
        return True


def _head(status: int, headers: dict[str, str]) -> bytes:
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Status')}"]
    lines += [f"{name}: {value}" for name, value in headers.items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode()


async def _read_request(reader: asyncio.StreamReader) -> RecordedRequest | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None  # the client closed an idle keep-alive connection
    request_line, *header_lines = head.decode("latin-1").split("\r\n")
    method, path, _version = request_line.split(" ", 2)
    headers: dict[str, str] = {}
    for line in header_lines:
        if line:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
    body = await reader.readexactly(int(headers.get("content-length", "0")))
    return RecordedRequest(method=method, path=path, headers=headers, body=body)
