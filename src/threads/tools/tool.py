"""``tool``: a named, typed action the model may call, with its effect class.

Two spellings make the same ``Tool``: ``@tool`` / ``@tool(effect=...)`` on a typed function (name
from the function, description from its docstring, input model from its parameters; see
``threads.tools.signature``), or ``tool(name=..., description=..., input=Model, execute=fn)``.

The effect class is how threads settles a call that a crash left in doubt: ``read_only`` (run it
again), ``idempotent`` (resend with the same ``effect_key`` inside ``dedup_window_ms``),
``reconcilable`` (ask ``reconcile.lookup``), ``sandbox_local`` (interrupted once its process is
proven gone), ``unguarded`` (the default: park for a person). Misconfiguration raises
``ConfigError`` here, at definition time, never mid-run.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar, overload

from pydantic import BaseModel

from threads.errors import ConfigError
from threads.log.vocabulary import ToolSpec
from threads.tools.context import DepsT, RunContext
from threads.tools.signature import Execute, as_async, from_function

__all__ = [
    "EFFECT_CLASSES",
    "EffectClass",
    "EffectUnknown",
    "Found",
    "LookupOutcome",
    "LookupUnknown",
    "NotFound",
    "Reconcile",
    "RunContext",  # defined in threads.tools.context, named here with the rest of a tool's API
    "Tool",
    "tool",
]

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
M = TypeVar("M", bound=BaseModel)
D = TypeVar("D")


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
class Tool(Generic[DepsT]):
    """A defined tool. ``execute`` is always async here: a sync function given to ``tool``
    runs in a worker thread behind it. ``DepsT`` is the ``ctx.deps`` type its ``execute`` reads
    (``Any`` for a decorated function): an ``Agent[Deps, ...]`` takes ``Tool[Deps]``s."""

    name: str
    description: str
    input: type[BaseModel]
    execute: Execute
    runs: Literal["host", "sandbox"]
    effect: EffectClass
    dedup_window_ms: int | None
    reconcile: Reconcile | None
    max_attempts: int = DEFAULT_MAX_ATTEMPTS
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS
    settle_ms: int = DEFAULT_SETTLE_MS

    def spec(self) -> ToolSpec:
        """The ToolSpec pinned in thread_started (and rendered to the model)."""
        spec: ToolSpec = {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input.model_json_schema(),
            "effect_class": self.effect,
        }
        if self.dedup_window_ms is not None:
            spec["dedup_window_ms"] = self.dedup_window_ms
        return spec


Runs = Literal["host", "sandbox"]
Finality = Literal["final", "nonfinal"]


@overload
def tool(fn: Callable[..., object], /) -> Tool: ...


@overload
def tool(
    *,
    name: str,
    description: str,
    input: type[M],
    execute: Callable[[M, RunContext[D]], object],
    runs: Runs = "host",
    effect: EffectClass = "unguarded",
    dedup_window_ms: int | None = None,
    reconcile: Reconcile | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    settle_ms: int = DEFAULT_SETTLE_MS,
) -> Tool[D]: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    runs: Runs = "host",
    effect: EffectClass = "unguarded",
    dedup_window_ms: int | None = None,
    reconcile: Reconcile | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    settle_ms: int = DEFAULT_SETTLE_MS,
) -> Callable[[Callable[..., object]], Tool]: ...


def tool(
    fn: Callable[..., object] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    input: type[BaseModel] | None = None,
    execute: Callable[[Any, RunContext[Any]], object] | None = None,
    runs: Runs = "host",
    effect: EffectClass = "unguarded",
    dedup_window_ms: int | None = None,
    reconcile: Reconcile | None = None,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    retry_backoff_ms: int = DEFAULT_RETRY_BACKOFF_MS,
    settle_ms: int = DEFAULT_SETTLE_MS,
) -> Tool | Callable[[Callable[..., object]], Tool]:
    """Define a tool, as a decorator (``@tool``, ``@tool(effect="read_only")``) on a typed
    function, or explicitly with ``name``, ``description``, ``input`` and ``execute``. Every
    mistake is a ``ConfigError`` now rather than a surprise mid-run.

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
    options = _Options(
        runs, effect, dedup_window_ms, reconcile, max_attempts, retry_backoff_ms, settle_ms
    )
    if input is not None or execute is not None:
        if fn is not None or input is None or execute is None:
            raise ConfigError(
                "invalid_config",
                "the explicit form takes name=, description=, input= and execute= together;"
                " or decorate a typed function with @tool",
            )
        if not callable(execute):
            raise ConfigError("invalid_config", f"tool {name}: execute must be a function")
        return _define(name, description, input, as_async(execute), options)

    def decorate(function: Callable[..., object]) -> Tool:
        if not callable(function):
            raise ConfigError("invalid_config", "@tool decorates a function")
        tool_name = name if name is not None else getattr(function, "__name__", "")
        _check_name(tool_name)
        made = from_function(function, tool_name)
        text = description if description is not None else made.docstring
        return _define(tool_name, text, made.input, made.execute, options)

    return decorate(fn) if fn is not None else decorate


@dataclass(frozen=True, slots=True)
class _Options:
    runs: Runs
    effect: EffectClass
    dedup_window_ms: int | None
    reconcile: Reconcile | None
    max_attempts: int
    retry_backoff_ms: int
    settle_ms: int


def _check_name(name: object) -> None:
    if not isinstance(name, str) or not TOOL_NAME.match(name):
        raise ConfigError(
            "invalid_config",
            f"tool name {name!r} must match ^[a-z][a-z0-9_]{{0,63}}$ (rename the function,"
            " or pass name=)",
        )


def _define(
    name: str | None,
    description: str | None,
    input: type[BaseModel],
    execute: Execute,
    options: _Options,
) -> Tool:
    _check_name(name)
    assert isinstance(name, str)
    if not description:
        raise ConfigError(
            "invalid_config",
            f"tool {name}: a description is required (a docstring, or description=)",
        )
    if not (isinstance(input, type) and issubclass(input, BaseModel)):
        raise ConfigError("invalid_config", f"tool {name}: input must be a Pydantic model class")
    runs, effect = options.runs, options.effect
    dedup_window_ms, reconcile = options.dedup_window_ms, options.reconcile
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
    _check_count(name, "max_attempts", options.max_attempts, minimum=1)
    _check_count(name, "retry_backoff_ms", options.retry_backoff_ms, minimum=0)
    _check_count(name, "settle_ms", options.settle_ms, minimum=0)
    return Tool(
        name,
        description,
        input,
        execute,
        runs,
        effect,
        dedup_window_ms,
        reconcile,
        options.max_attempts,
        options.retry_backoff_ms,
        options.settle_ms,
    )


def _check_count(tool_name: str, what: str, value: object, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigError(
            "invalid_config", f"tool {tool_name}: {what} must be an integer >= {minimum}"
        )
