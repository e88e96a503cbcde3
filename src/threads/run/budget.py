"""``Budget``: limits on what a thread (agent level) or a run (run level) may spend.

Limits are checked before each model request against a worst-case reservation (the pinned
``max_tokens`` out, a full context window in, at its price: ``threads.log.fold.cost``), so a request
that could cross a limit is never sent. Spend is read back from the log; unreported usage counts
at its bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal, Protocol, cast

from threads.errors import ConfigError
from threads.log.fold.cost import positive_int
from threads.log.json_types import JsonObject
from threads.log.vocabulary import Budget as WireBudget
from threads.log.vocabulary import BudgetExceededData

BudgetLimit = Literal[
    "max_model_requests", "max_turns", "max_input_tokens", "max_output_tokens",
    "max_cost_nanos", "max_wall_ms",
]
BudgetScope = Literal["thread", "run", "ancestor"]
LIMITS: tuple[BudgetLimit, ...] = (
    "max_model_requests", "max_turns", "max_input_tokens", "max_output_tokens",
    "max_cost_nanos", "max_wall_ms",
)


class _Priced(Protocol):
    @property
    def price(self) -> Any: ...

    def params(self) -> JsonObject: ...


@dataclass(frozen=True, slots=True)
class Budget:
    max_model_requests: int | None = None
    max_turns: int | None = None
    max_input_tokens: int | None = None
    max_output_tokens: int | None = None
    max_cost_nanos: int | None = None
    max_wall_ms: int | None = None

    def __post_init__(self) -> None:
        values = [getattr(self, f.name) for f in fields(self)]
        if all(v is None for v in values):
            raise ConfigError("invalid_config", "a Budget needs at least one limit")
        for f in fields(self):
            value = getattr(self, f.name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ConfigError("invalid_config", f"Budget.{f.name} must be a positive integer")

    def to_wire(self) -> WireBudget:
        set_ = {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name)}
        return cast("WireBudget", set_)  # the fields are the wire's limits, by name

    @classmethod
    def from_wire(cls, value: WireBudget | Mapping[str, int]) -> Budget:
        limits: Mapping[str, object] = value
        return cls(**{k: cast(int, v) for k, v in limits.items() if k in LIMITS})

    def turns_refusal(self, turns_completed: int) -> BudgetExceededData | None:
        """The ``budget_exceeded`` data (thread scope) refusing one more turn after
        ``turns_completed``, or None while ``max_turns`` allows it. ``threads.run.turn_open``,
        which writes every new ``user_input`` (a run's, a host's), checks this first and writes
        no input when refused."""
        observed = turns_completed + 1
        if self.max_turns is None or observed <= self.max_turns:
            return None
        return {
            "limit": "max_turns",
            "limit_value": self.max_turns,
            "observed": observed,
            "observed_is_upper_bound": False,
            "scope": "thread",
        }

    def check_enforceable(self, model: _Priced) -> None:
        if self.max_cost_nanos is not None and model.price is None:
            raise ConfigError(
                "budget_unenforceable",
                "max_cost_nanos needs a model with a declared price (nano-units per token);"
                " give the model price=Price(input=..., output=...) or drop the cost limit",
            )
        output_bound = positive_int(model.params().get("max_tokens"))
        if self.max_cost_nanos is not None and output_bound is None:
            raise ConfigError(
                "budget_unenforceable",
                "max_cost_nanos needs a bound on each request's output: the model must pin"
                " max_tokens (a positive integer) in its params; pass params={'max_tokens': N}"
                " or drop the cost limit",
            )


@dataclass(frozen=True, slots=True)
class Spend:
    """What a scope's attempts spent, each unreported or in-doubt amount at its bound; None
    where some amount has no bound (or its sum passes 2^53-1). ``turns``: the turns its
    threads started (ended or still open), where the scope counts them (a tree's)."""

    model_requests: int
    input_tokens: int | None
    output_tokens: int | None
    cost_nanos: int | None
    turns: int = 0

    def plus(self, other: Spend) -> Spend:
        return Spend(
            self.model_requests + other.model_requests,
            plus(self.input_tokens, other.input_tokens),
            plus(self.output_tokens, other.output_tokens),
            plus(self.cost_nanos, other.cost_nanos),
            self.turns + other.turns,
        )

    def with_turns(self, turns: int) -> Spend:
        return Spend(self.model_requests, self.input_tokens, self.output_tokens,
                     self.cost_nanos, self.turns + turns)


NOTHING_SPENT = Spend(0, 0, 0, 0)


def plus(total: int | None, amount: int | None) -> int | None:
    return None if total is None or amount is None else total + amount


@dataclass(frozen=True, slots=True)
class AncestorBudget:
    """A budget of a thread above this one in a subagent tree (its thread budget or its run's)
    and what the tree spent under it outside this thread's subtree when this thread started;
    ``started_ms``: when that budget's clock started (the owner thread's first event, or its
    run's input), for ``max_wall_ms``."""

    owner_thread_id: str
    budget: Budget
    spent: Spend
    started_ms: int


@dataclass(frozen=True, slots=True)
class ThreadSpend:
    """What one subagent thread spent itself (its attempts, the turns it started) and its own
    children, as of its log's head ``(seq, hash)``."""

    head: tuple[int, str]
    spent: Spend
    children: tuple[str, ...]


class SpendMemo:
    """A run's memo of the subagent threads' spend that its budget checks read: a thread's
    spend can only change when its log grows, so an entry serves while that log's head is the
    one it was read at (``reads``: how many logs were read and folded for it)."""

    def __init__(self) -> None:
        self._by_branch: dict[str, ThreadSpend] = {}
        self.reads = 0

    def get(self, branch_id: str, head: tuple[int, str]) -> ThreadSpend | None:
        seen = self._by_branch.get(branch_id)
        return seen if seen is not None and seen.head == head else None

    def put(self, branch_id: str, seen: ThreadSpend) -> None:
        self.reads += 1
        self._by_branch[branch_id] = seen
