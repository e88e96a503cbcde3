"""Memory: facts an agent keeps across runs, behind the run's fence.

A ``Memory`` provider saves, searches and forgets records in a ``MemoryScope`` (tenant, agent,
and the user: the principal's issuer and subject), so one user's memories never answer
another's. Every call takes the run's fence and awaits it before it touches anything. A write is
an effect: the memory tools (``threads.memory.tools``) write with the provider's declared effect
class (``idempotent`` keyed by the call's effect key, so a resend after a crash writes nothing
twice). ``local_memory()`` (``threads.memory.local``) keeps memories in the SQLite store.

``mem0()`` is refused at setup: the mem0 SDK sends its requests with HTTP clients (and, in
hosted mode, background calls) that threads can't route through the transport fence, so a run
that lost its lease could still write memories.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Literal, NoReturn, Protocol, runtime_checkable
from urllib.parse import quote

from threads.errors import ConfigError
from threads.principal import Principal

MEM0_REFUSAL = (
    "mem0() can't be fenced: its SDK sends requests with its own HTTP clients that threads can't"
    " intercept, so a run that lost its lease could still write to memory. Use local_memory(),"
    " or keep memory in your own tools (effect='idempotent' or 'reconcilable') instead."
)
SEARCH_DEFAULT_K = 5

Fence = Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class MemoryScope:
    """Whose memories: a tenant's agent, for one user (``issuer/subject``, each escaped)."""

    tenant_id: str
    agent: str
    user: str

    @staticmethod
    def of(principal: Principal, agent: str) -> MemoryScope:
        user = f"{quote(principal.issuer, safe='')}/{quote(principal.subject, safe='')}"
        return MemoryScope(principal.tenant, agent, user)


@dataclass(frozen=True, slots=True)
class MemoryRecord:
    id: str
    text: str
    created_at: int


@runtime_checkable
class Memory(Protocol):
    """A memory provider. ``write_effect``/``dedup_window_ms`` are how its writes settle after
    a crash (``idempotent`` by key inside the window; ``unguarded`` parks)."""

    @property
    def write_effect(self) -> Literal["idempotent", "unguarded"]: ...

    @property
    def dedup_window_ms(self) -> int | None: ...

    def check_fenceable(self) -> None:
        """Raise ``ConfigError("transport_fence_unsupported")`` if its traffic can't be fenced."""
        ...

    def bind(self, store: object) -> BoundMemory:
        """The provider working against a run's store (local memory lives in it)."""
        ...


class BoundMemory(Protocol):
    async def remember(
        self, scope: MemoryScope, text: str, key: str, fence: Fence
    ) -> MemoryRecord:
        """Save ``text`` under ``key``: the same key with the same text is a no-op returning the
        same record; the same key with other text is refused (``invalid_argument``)."""
        ...

    async def recall(
        self, scope: MemoryScope, query: str, fence: Fence, *, k: int = SEARCH_DEFAULT_K
    ) -> list[MemoryRecord]: ...

    async def forget(self, scope: MemoryScope, record_id: str, key: str, fence: Fence) -> bool:
        """True if the record was there; forgetting twice is a no-op."""
        ...


@dataclass(frozen=True, slots=True)
class MemoryHandle:
    """What a tool sees of memory in a run: the bound provider, its scope, and the fence."""

    memory: BoundMemory
    scope: MemoryScope
    fence: Fence


def mem0(*args: Any, **kwargs: Any) -> NoReturn:
    """Always ``ConfigError("transport_fence_unsupported")``; see the module docstring."""
    raise ConfigError("transport_fence_unsupported", MEM0_REFUSAL)
