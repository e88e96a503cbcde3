"""The transport fence: every outbound call a run makes passes through here first.

A ``Fence`` answers one question before each send: does this run still hold its branch at its
epoch? ``check()`` raises ``StoreError("stale_epoch")`` when not, before any byte leaves.
``fenced_http_client()`` gives adapters an ``httpx.AsyncClient`` whose transport checks the
fence on every request, so an SDK built on httpx (openai, anthropic) can't send around it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Protocol

import httpx

from threads.errors import StoreError


class Fence(Protocol):
    async def check(self) -> None:
        """Raise ``StoreError('stale_epoch')`` unless the run still owns its branch at its epoch."""
        ...


class OpenFence:
    """A fence that never refuses: for calls made outside any run (tests of adapters alone)."""

    async def check(self) -> None:
        return None


class CallbackFence:
    """A fence backed by a check function (the run loop passes its lease check)."""

    def __init__(self, check: Callable[[], Awaitable[None]]) -> None:
        self._check = check

    async def check(self) -> None:
        await self._check()


class FencedTransport(httpx.AsyncBaseTransport):
    """An httpx transport that consults the fence before every request it sends."""

    def __init__(
        self, fence_of: Callable[[], Fence], inner: httpx.AsyncBaseTransport | None = None
    ):
        self._fence_of = fence_of
        self._inner = inner or httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        await self._fence_of().check()
        return await self._inner.handle_async_request(request)

    async def aclose(self) -> None:
        await self._inner.aclose()


class FenceSlot:
    """Holds the fence of the call in progress; an adapter's long-lived client reads it on every
    send, so one SDK client can serve many runs. Until a run sets it, every send is refused."""

    def __init__(self) -> None:
        self._fence: Fence | None = None

    def set(self, fence: Fence) -> None:
        self._fence = fence

    def get(self) -> Fence:
        if self._fence is None:
            return _UNSET
        return self._fence


class _Unset:
    async def check(self) -> None:
        raise StoreError(
            "stale_epoch",
            "no run holds this adapter's fence; calls are only sent from inside a run",
        )


_UNSET = _Unset()


def fenced_http_client(slot: FenceSlot, *, timeout: float = 600.0) -> httpx.AsyncClient:
    """An httpx client for an SDK: every request first passes ``slot``'s current fence."""
    return httpx.AsyncClient(transport=FencedTransport(slot.get), timeout=timeout)
