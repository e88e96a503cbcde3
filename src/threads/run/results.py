"""Run outcomes as values: ``Completed``, ``Parked``, ``Failed``, ``BudgetExhausted``,
``Cancelled``. Each carries ``.status`` and ``.thread`` (a handle to inspect or control it)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from threads.run.thread import Thread


@dataclass(frozen=True, slots=True)
class Pending:
    """What a parked run waits on: ``approval`` (id = challenge_id), ``effect`` (id =
    effect_key) or ``input`` (id = call_id)."""

    kind: str
    id: str
    detail: str | None = None  # for an effect: what the operator should know before resolving


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    code: str
    message: str
    seq: int | None = None  # where in the log the problem sits, when it sits in one


@dataclass(frozen=True, slots=True)
class BudgetInfo:
    limit: str
    limit_value: int
    observed: int
    scope: str
    observed_is_upper_bound: bool


@dataclass(frozen=True, slots=True)
class Completed:
    thread: Thread
    output: str
    status: Literal["completed"] = field(default="completed", init=False)


@dataclass(frozen=True, slots=True)
class Parked:
    thread: Thread
    reason: str
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


RunResult = Completed | Parked | Failed | BudgetExhausted | Cancelled
