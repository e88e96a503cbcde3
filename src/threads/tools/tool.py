"""``tool(...)``: a named, typed action the model may call, with its effect class.

The effect class is how threads settles a call that a crash left in doubt: ``read_only`` (run it
again), ``idempotent`` (resend with the same ``effect_key`` inside ``dedup_window_ms``),
``reconcilable`` (ask ``reconcile.lookup``), ``sandbox_local`` (interrupted once its process is
proven gone), ``unguarded`` (the default: park for a person). Misconfiguration raises
``ConfigError`` here, at definition time, never mid-run.
"""

from __future__ import annotations

import asyncio
import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

import httpx
from pydantic import BaseModel

from threads.errors import ConfigError
from threads.memory import MemoryHandle
from threads.principal import Principal
from threads.sandbox.handle import SandboxHandle

EffectClass = Literal["read_only", "idempotent", "reconcilable", "sandbox_local", "unguarded"]
EFFECT_CLASSES: tuple[str, ...] = (
    "read_only",
    "idempotent",
    "reconcilable",
    "sandbox_local",
    "unguarded",
)
TOOL_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
DEFAULT_MAX_ATTEMPTS = 3
DEFAULT_RETRY_BACKOFF_MS = 1000
DEFAULT_SETTLE_MS = 60_000

V = TypeVar("V")


@dataclass(frozen=True, slots=True)
class Found(Generic[V]):
    """The lookup found the effect: it happened, and this is what it returned."""

    value: V


@dataclass(frozen=True, slots=True)
class NotFound:
    """The lookup did not find the effect (final only if the tool's finality is ``final``)."""


@dataclass(frozen=True, slots=True)
class LookupUnknown:
    """The lookup could not tell (provider down, ambiguous answer): the call parks."""

    reason: str = "lookup could not tell"


LookupOutcome = Found[Any] | NotFound | LookupUnknown


def _no_http() -> httpx.AsyncClient:
    raise RuntimeError("this RunContext was made outside a run: it has no fenced HTTP client")


@dataclass(frozen=True, slots=True)
class RunContext:
    """What a tool's ``execute`` (and a reconcile ``lookup``) may see of the run. ``deps`` are
    the caller's and are never logged. ``effect_key`` is stable across retries of this call:
    pass it to your provider as its idempotency key. ``epoch`` is the run's lease epoch: it only
    grows, so a provider that accepts a fencing token can refuse a request from an earlier
    holder. ``http`` is an ``httpx.AsyncClient`` that checks the run still holds its lease before
    every request it sends (``stale_epoch`` otherwise): send your effect through it."""

    deps: Any
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


@dataclass(frozen=True, slots=True)
class Reconcile:
    """``lookup(effect_key, ctx)`` answers whether an in-doubt call happened. ``finality``
    ``final`` means a ``NotFound`` proves it never did; ``nonfinal`` parks on ``NotFound``."""

    lookup: Callable[[str, RunContext], Awaitable[LookupOutcome]]
    finality: Literal["final", "nonfinal"] = "nonfinal"


class EffectUnknown(Exception):  # noqa: N818 - it names the outcome, like the wire event
    """Raise from ``execute`` when the call may or may not have taken effect (a timeout after
    sending, a dropped connection). threads records ``effect_unknown`` and settles the call by
    its effect class instead of reporting a plain error."""

    def __init__(self, message: str, reason: Literal["timeout", "transport_error"] = "timeout"):
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True, eq=False)
class Tool:
    name: str
    description: str
    input: type[BaseModel]
    execute: Callable[[Any, RunContext], Awaitable[Any]]
    runs: Literal["host", "sandbox"]
    effect: EffectClass
    dedup_window_ms: int | None
    reconcile: Reconcile | None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    settle_ms: int = DEFAULT_SETTLE_MS

    def spec(self) -> dict[str, Any]:
        """The ToolSpec pinned in thread_started (and rendered to the model)."""
        spec: dict[str, Any] = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input.model_json_schema(),
            "effect_class": self.effect,
        }
        if self.dedup_window_ms is not None:
            spec["dedup_window_ms"] = self.dedup_window_ms
        return spec


def tool(
    *,
    name: str,
    description: str,
    input: type[BaseModel],
    execute: Callable[[Any, RunContext], Awaitable[Any]],
    runs: Literal["host", "sandbox"] = "host",
    effect: EffectClass = "unguarded",
    dedup_window_ms: int | None = None,
    reconcile: Reconcile | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    settle_ms: int = DEFAULT_SETTLE_MS,
) -> Tool:
    """Define a tool; every mistake is a ``ConfigError`` now rather than a surprise mid-run.

    ``max_attempts``: how many times threads dispatches one call's effect on its own (the first
    send and every resend it decides; an operator's ``assume_not_done`` always gets its one
    send). ``retry_backoff_ms``: the wait before the first resend after a timeout or transport
    error, doubled for each further one (at most a minute); each wait is recorded as
    ``retry_scheduled``. A resend after a crash does not wait.

    ``settle_ms``: how long after a takeover a request that an earlier holder of the thread (a
    frozen or partitioned process that lost its lease) already had in flight may still reach
    your provider. Until the takeover is that old, a ``final`` not-found is not trusted (the call
    parks) and an operator's ``assume_not_done`` is refused. Make it longer than the timeout of
    the client the tool sends with (``ctx.http``: 30 s)."""
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ConfigError(
            "invalid_config", f"tool name {name!r} must match ^[a-z][a-z0-9_]{{0,63}}$"
        )
    if not description:
        raise ConfigError("invalid_config", f"tool {name}: a description is required")
    if not (isinstance(input, type) and issubclass(input, BaseModel)):
        raise ConfigError("invalid_config", f"tool {name}: input must be a Pydantic model class")
    if not inspect.iscoroutinefunction(execute):
        raise ConfigError("invalid_config", f"tool {name}: execute must be an async function")
    if runs not in ("host", "sandbox"):
        raise ConfigError("invalid_config", f"tool {name}: runs must be 'host' or 'sandbox'")
    if effect not in EFFECT_CLASSES:
        raise ConfigError(
            "invalid_config", f"tool {name}: effect must be one of {', '.join(EFFECT_CLASSES)}"
        )
    if effect == "idempotent":
        if not isinstance(dedup_window_ms, int) or dedup_window_ms < 1:
            raise ConfigError(
                "invalid_config",
                f"tool {name}: an idempotent tool needs dedup_window_ms (how long your provider"
                " deduplicates an idempotency key), a positive integer",
            )
    elif dedup_window_ms is not None:
        raise ConfigError(
            "invalid_config", f"tool {name}: dedup_window_ms only goes with effect='idempotent'"
        )
    if effect == "reconcilable":
        if not isinstance(reconcile, Reconcile):
            raise ConfigError(
                "invalid_config",
                f"tool {name}: a reconcilable tool needs reconcile=Reconcile(lookup, finality)",
            )
        if not inspect.iscoroutinefunction(reconcile.lookup):
            raise ConfigError("invalid_config", f"tool {name}: reconcile.lookup must be async")
        if reconcile.finality not in ("final", "nonfinal"):
            raise ConfigError("invalid_config", f"tool {name}: finality is 'final' or 'nonfinal'")
    elif reconcile is not None:
        raise ConfigError(
            "invalid_config", f"tool {name}: reconcile only goes with effect='reconcilable'"
        )
    if effect == "sandbox_local" and runs != "sandbox":
        raise ConfigError(
            "invalid_config", f"tool {name}: effect='sandbox_local' needs runs='sandbox'"
        )
    _check_count(name, "max_attempts", max_attempts, minimum=1)
    _check_count(name, "retry_backoff_ms", retry_backoff_ms, minimum=0)
    _check_count(name, "settle_ms", settle_ms, minimum=0)
    return Tool(
        name,
        description,
        input,
        execute,
        runs,
        effect,
        dedup_window_ms,
        reconcile,
        max_attempts,
        retry_backoff_ms,
        settle_ms,
    )


def _check_count(tool_name: str, what: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            "invalid_config", f"tool {tool_name}: {what} must be an integer >= {minimum}"
        )
