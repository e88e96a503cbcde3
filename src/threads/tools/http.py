"""``ctx.http``: the HTTP client a tool sends its effect through, fenced like the model adapters.

Its transport asks the run's fence (the lease check) before every request, so a run that lost
its lease (frozen past its TTL and taken over) sends nothing more through it: the request fails
``stale_epoch`` before any byte leaves. One client per run, made on first use and closed when
the run ends; it never retries on its own (a resend is the run's decision, and is recorded).
"""

from __future__ import annotations

import httpx

from threads.models.fence import Fence, FencedTransport

TOOL_HTTP_TIMEOUT_S = 30.0


class ToolHttp:
    def __init__(self, fence: Fence, *, timeout_s: float = TOOL_HTTP_TIMEOUT_S) -> None:
        self._fence = fence
        self._timeout_s = timeout_s
        self._client: httpx.AsyncClient | None = None

    def client(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(
                transport=FencedTransport(lambda: self._fence), timeout=self._timeout_s
            )
        return self._client

    async def aclose(self) -> None:
        if self._client is not None:
            await self._client.aclose()
            self._client = None
