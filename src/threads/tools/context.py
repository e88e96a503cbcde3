"""``RunContext``: what a tool (and a reconcile lookup) may see of the run that calls it.

Invariant: nothing in it is ever written to the log; ``deps`` are the caller's own objects.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic

import httpx
from typing_extensions import TypeVar

from threads.memory.protocol import MemoryHandle
from threads.principal import Principal
from threads.sandbox.handle import SandboxHandle

# The caller's ``deps`` type: an ``Agent[Deps, ...]`` hands its tools a ``RunContext[Deps]``.
# Unparameterized, it reads ``Any``.
DepsT = TypeVar("DepsT", default=Any)


def _no_http() -> httpx.AsyncClient:
    raise RuntimeError("this RunContext was made outside a run: it has no fenced HTTP client")


@dataclass(frozen=True, slots=True)
class RunContext(Generic[DepsT]):
    """What a tool's ``execute`` (and a reconcile ``lookup``) may see of the run. ``deps`` are
    the caller's and are never logged. ``effect_key`` is stable across retries of this call:
    pass it to your provider as its idempotency key. ``epoch`` is the run's lease epoch: it only
    grows, so a provider that accepts a fencing token can refuse a request from an earlier
    holder. ``http`` is an ``httpx.AsyncClient`` that checks the run still holds its lease before
    every request it sends (``stale_epoch`` otherwise): send your effect through it."""

    deps: DepsT
    thread_id: str
    branch_id: str
    principal: Principal
    call_id: str
    effect_key: str
    attempt: int
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)
    epoch: int = 0
    http_client: Callable[[], httpx.AsyncClient] = _no_http
    sandbox: SandboxHandle | None = None  # the run's sandbox, for tools with runs="sandbox"
    memory: MemoryHandle | None = None  # the agent's memory, scoped to this run's user

    @property
    def http(self) -> httpx.AsyncClient:
        return self.http_client()
