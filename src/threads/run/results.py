"""Run outcomes as values: ``Completed``, ``Parked``, ``Failed``, ``BudgetExhausted``,
``Cancelled``. Each carries ``.status`` and ``.thread`` (a handle to inspect or control it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias

from typing_extensions import TypeVar

from threads.log.fold import ParkKind
from threads.run.budget import BudgetLimit, BudgetScope

if TYPE_CHECKING:
    from threads.run.thread import Thread

# What a completed run's output is: ``str`` for an agent without ``output=``, else its model
# (``Agent[Deps, Output]`` carries it to ``run``'s result). Unparameterized, it reads ``Any``.
OutputT = TypeVar("OutputT", default=Any)

ParkReason = Literal["awaiting_approval", "effect_unknown", "awaiting_input"]
RunStatus = Literal["completed", "parked", "failed", "budget_exhausted", "cancelled"]


@dataclass(frozen=True, slots=True)
class Pending:
    """What a parked run waits on: ``approval`` (id = challenge_id), ``effect`` (id =
    effect_key) or ``input`` (id = call_id). The other kinds the log format names are parks
    written by the TypeScript implementation."""

    kind: ParkKind
    id: str
    detail: str | None = None  # for an effect: what the operator should know before resolving


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: str
    message: str
    seq: int | None = None  # where in the log the problem sits, when it sits in one


@dataclass(frozen=True, slots=True)
class BudgetInfo:
    limit: BudgetLimit
    limit_value: int
    observed: int
    scope: BudgetScope
    observed_is_upper_bound: bool


@dataclass(frozen=True, slots=True)
class Completed(Generic[OutputT]):
    """``output``: the last reply's text, or for an agent with ``output=Model`` the validated
    model instance (``Agent[Deps, Model]``'s runs return ``Completed[Model]``)."""

    thread: Thread
    output: OutputT
    status: Literal["completed"] = field(default="completed", init=False)


@dataclass(frozen=True, slots=True)
class Parked:
    thread: Thread
    reason: ParkReason
    pending: list[Pending]
    status: Literal["parked"] = field(default="parked", init=False)


@dataclass(frozen=True, slots=True)
class Failed:
    thread: Thread
    error: ErrorInfo
    status: Literal["failed"] = field(default="failed", init=False)


@dataclass(frozen=True, slots=True)
class BudgetExhausted:
    thread: Thread
    budget: BudgetInfo
    status: Literal["budget_exhausted"] = field(default="budget_exhausted", init=False)


@dataclass(frozen=True, slots=True)
class Cancelled:
    thread: Thread
    status: Literal["cancelled"] = field(default="cancelled", init=False)


RunResult: TypeAlias = Completed[OutputT] | Parked | Failed | BudgetExhausted | Cancelled


def describe(result: RunResult) -> str:
    """What a log line about ``result`` adds to its status: what a park waits on, why a run
    failed, which budget ran out ("" when the status says it all)."""
    if isinstance(result, Parked):
        waits = ", ".join(f"{p.kind} {p.id}" for p in result.pending)
        return f"{result.reason}, waiting on {waits}"
    if isinstance(result, Failed):
        return f"{result.error.code}: {result.error.message}"
    if isinstance(result, BudgetExhausted):
        budget = result.budget
        return f"{budget.limit} {budget.observed} > {budget.limit_value} ({budget.scope})"
    return ""
