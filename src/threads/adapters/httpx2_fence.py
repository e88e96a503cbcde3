"""``FencedTransport`` for SDKs built on ``httpx2`` (imported only when httpx2 is installed).

Invariant: identical to ``threads.models.fence.FencedTransport``: the fence is checked before
every request; a refusal raises before a connection is opened.
"""

from __future__ import annotations

from collections.abc import Callable

import httpx2

from threads.models.fence import Fence, FenceSlot


class FencedHttpx2Transport(httpx2.AsyncBaseTransport):
    def __init__(self, fence_of: Callable[[], Fence]) -> None:
        self._fence_of = fence_of
        self._inner = httpx2.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        await self._fence_of().check()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


def fenced_httpx2_client(slot: FenceSlot, *, timeout: float) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(transport=FencedHttpx2Transport(slot.get), timeout=timeout)
