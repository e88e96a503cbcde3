"""The write side of an MCP session, fenced: every JSON-RPC message the client sends (a
request, a notification, an answer to the server) first passes the run's fence.

The check runs in the sender's task, so a refusal (``StoreError('stale_epoch')``) reaches the
caller of ``call_tool`` as what it is: nothing was handed to the transport, nothing was sent.
Each transport checks again where bytes leave (the stdio writer before it writes to the child's
stdin; the fenced HTTP client before each request), so a lease lost in between still stops it.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType

from mcp.shared._stream_protocols import WriteStream
from mcp.shared.message import SessionMessage

from threads.models.fence import Fence


class FencedWriteStream:
    def __init__(self, inner: WriteStream[SessionMessage], fence_of: Callable[[], Fence]) -> None:
        self._inner = inner
        self._fence_of = fence_of

    async def send(self, item: SessionMessage, /) -> None:
        await self._fence_of().check()
        await self._inner.send(item)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> FencedWriteStream:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> bool | None:
        await self.aclose()
        return None
