"""The budget guard: before each model request, compare spend read back from the log plus a
worst-case reservation for the next request with every limit in force (the agent's, for the
thread's lifetime; the run's, carried on its ``user_input``). ``max_turns`` is checked where a
turn is opened (``threads.run.turn_open``).

A request that could cross a limit is never sent: ``budget_exceeded`` is recorded, the turn ends
``budget_exhausted`` and the run returns ``BudgetExhausted``. Usage a provider did not report,
and attempts left in doubt by a crash, count at their bound.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from threads.errors import ThreadsError
from threads.log.fold import ModelAttempt
from threads.log.fold.cost import MAX_INT, PriceTable
from threads.log.lines import Draft
from threads.run.budget import Budget, BudgetLimit, BudgetScope
from threads.run.drafts import HOST
from threads.run.results import BudgetExhausted, BudgetInfo
from threads.run.runtime import Runtime


@dataclass(frozen=True, slots=True)
class Spend:
    """What a scope's attempts spent, each unreported or in-doubt amount at its bound; None
    where some amount has no bound (or its sum passes 2^53-1)."""

    model_requests: int
    input_tokens: int | None
    output_tokens: int | None
    cost_nanos: int | None


def _plus(total: int | None, amount: int | None) -> int | None:
    return None if total is None or amount is None else total + amount


def _tokens(reported: object, bound: int | None) -> int | None:
    return reported if isinstance(reported, int) else bound


def spend(table: PriceTable, attempts: list[ModelAttempt]) -> Spend:
    """What ``attempts`` spent; the cost is the log's own ``Cost`` upper bound."""
    inp: int | None = 0
    out: int | None = 0
    for attempt in attempts:
        if not table.billed(attempt):
            continue
        usage: Mapping[str, Any] = attempt.usage or {}
        settings = attempt.settings
        inp = _plus(inp, _tokens(usage.get("input_tokens"), table.input_bound(settings)))
        out = _plus(out, _tokens(usage.get("output_tokens"), table.output_bound(settings)))
    return Spend(len(attempts), inp, out, _cost(table, attempts))


def _cost(table: PriceTable, attempts: list[ModelAttempt]) -> int | None:
    if table.currency is None:
        return None
    try:
        cost = table.total(attempts)
    except ThreadsError as exc:
        if exc.code != "cost_overflow":
            raise
        return None
    return cost.upper_bound_nanos if cost.bounded else None


def _scopes(rt: Runtime) -> list[tuple[BudgetScope, Budget, list[ModelAttempt]]]:
    fold = rt.fold
    attempts = list(fold.attempts.values())
    scopes: list[tuple[BudgetScope, Budget, list[ModelAttempt]]] = []
    if rt.spec.budget is not None:
        scopes.append(("thread", rt.spec.budget, attempts))
    turn = fold.turn
    if turn is not None and turn.budget is not None:
        start = turn.input_event.seq
        run = [a for a in attempts if a.event.seq > start]
        scopes.append(("run", Budget.from_wire(turn.budget), run))
    return scopes


async def before_request(rt: Runtime) -> BudgetExhausted | None:
    """Refuse the next request when what its scope spent plus the request's bound (under the
    settings epoch in force) could cross a limit; an amount without a bound always could."""
    table = rt.fold.price_table()
    settings = rt.fold.settings
    reserve = Spend(
        1, table.input_bound(settings), table.output_bound(settings), table.bound(settings)
    )
    for scope, budget, attempts in _scopes(rt):
        spent = spend(table, attempts)
        checks: list[tuple[BudgetLimit, int | None, int | None]] = [
            ("max_model_requests", budget.max_model_requests, spent.model_requests + 1),
            ("max_input_tokens", budget.max_input_tokens, _plus(spent.input_tokens,
                                                                 reserve.input_tokens)),
            ("max_output_tokens", budget.max_output_tokens, _plus(spent.output_tokens,
                                                                   reserve.output_tokens)),
            ("max_cost_nanos", budget.max_cost_nanos, _plus(spent.cost_nanos, reserve.cost_nanos)),
        ]
        for limit, value, observed in checks:
            if value is None:
                continue
            if observed is None or observed > value:
                # a request count is exact; spend includes the worst-case reservation, and an
                # amount with no bound is recorded as the largest the log carries
                upper = limit != "max_model_requests"
                seen = MAX_INT if observed is None else min(observed, MAX_INT)
                return await _exceeded(rt, scope, limit, value, seen, upper=upper)
        turn = rt.fold.turn
        if budget.max_wall_ms is not None and turn is not None:
            started = rt.fold.events[0].time if scope == "thread" else turn.input_event.time
            elapsed = rt.now() - started
            if elapsed > budget.max_wall_ms:
                return await _exceeded(
                    rt, scope, "max_wall_ms", budget.max_wall_ms, elapsed, upper=False
                )
    return None


async def _exceeded(
    rt: Runtime,
    scope: BudgetScope,
    limit: BudgetLimit,
    value: int,
    observed: int,
    *,
    upper: bool,
) -> BudgetExhausted:
    data: dict[str, Any] = {
        "limit": limit,
        "limit_value": value,
        "observed": observed,
        "observed_is_upper_bound": upper,
        "scope": scope,
    }
    drafts = [Draft("budget_exceeded", data, HOST)]
    if rt.fold.turn is not None:
        drafts.append(Draft("turn_completed", {"reason": "budget_exhausted"}, HOST))
    await rt.writer.append(drafts)
    return BudgetExhausted(rt.thread, BudgetInfo(limit, value, observed, scope, upper))
