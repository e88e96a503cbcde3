"""A remote MCP server over HTTP: Streamable HTTP, or the older SSE transport.

Both send through one fenced ``httpx2`` client (the SDK's HTTP library): its transport checks
the run's fence before every request (a tool call's POST, the event stream's GET, the closing
DELETE), never retries on its own, and carries the server's ``headers`` (which may hold
secrets: they go to the server and nowhere else). Timeouts are the SDK's: 30 s to connect and
write, 300 s between reads of a held-open stream; a call's own limit is the tool's timeout.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Literal

import httpx2
from mcp.client._transport import TransportStreams
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from threads.adapters.httpx2_fence import FencedHttpx2Transport
from threads.models.fence import Fence

Protocol = Literal["streamable_http", "sse"]
CONNECT_TIMEOUT_S = 30.0
STREAM_READ_TIMEOUT_S = 300.0


def _fenced_client(
    headers: Mapping[str, str], fence_of: Callable[[], Fence], timeout: httpx2.Timeout | None
) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(
        transport=FencedHttpx2Transport(fence_of),
        headers=dict(headers),
        timeout=timeout or httpx2.Timeout(CONNECT_TIMEOUT_S, read=STREAM_READ_TIMEOUT_S),
    )


@contextlib.asynccontextmanager
async def http_transport(
    protocol: Protocol, url: str, headers: Mapping[str, str], fence_of: Callable[[], Fence]
) -> AsyncIterator[TransportStreams]:
    """The session's streams to ``url`` over ``protocol``."""
    if protocol == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return _fenced_client(headers or {}, fence_of, timeout)

        async with sse_client(
            url,
            headers=dict(headers),
            timeout=CONNECT_TIMEOUT_S,
            sse_read_timeout=STREAM_READ_TIMEOUT_S,
            httpx_client_factory=factory,
        ) as streams:
            yield streams
        return
    async with (
        _fenced_client(headers, fence_of, None) as client,
        streamable_http_client(url, http_client=client) as streams,
    ):
        yield streams
