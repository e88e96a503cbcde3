"""The fenced HTTP client handed to provider SDKs, and the task-local fence slot it reads.

Current openai/anthropic SDKs are built on ``httpx2`` (anthropic refuses plain ``httpx`` clients),
older ones on ``httpx``; we build the client the SDK actually uses, with the same
``FencedTransport`` rule: the fence is checked before every request, before any byte leaves.
The slot is task-local (a ``ContextVar``) so one adapter serving concurrent runs sends each
request under the fence of the run that made it, never another run's.
"""

from __future__ import annotations

import sys
from contextvars import ContextVar
from typing import Any

from threads.models.fence import Fence, FenceSlot, fenced_http_client


class TaskFenceSlot(FenceSlot):
    """A ``FenceSlot`` whose fence belongs to the current asyncio task (unset: refuse)."""

    def __init__(self) -> None:
        super().__init__()
        self._current: ContextVar[Fence | None] = ContextVar(f"fence_{id(self)}", default=None)

    def set(self, fence: Fence) -> None:
        self._current.set(fence)

    def get(self) -> Fence:
        fence = self._current.get()
        if fence is None:
            return super().get()  # the base slot's "no run holds this fence" refusal
        return fence


def fenced_sdk_client(slot: FenceSlot, *, timeout: float) -> Any:
    """An async HTTP client of the flavour the already-imported SDK expects, fenced by ``slot``.

    Typed ``Any`` because ``httpx2`` exists only where an SDK that uses it is installed."""
    if "httpx2" not in sys.modules:
        return fenced_http_client(slot, timeout=timeout)
    from threads.adapters.httpx2_fence import fenced_httpx2_client

    return fenced_httpx2_client(slot, timeout=timeout)
