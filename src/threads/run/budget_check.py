"""The budget guard: before a turn opens and before each model request, compare spend read
back from the log plus a worst-case reservation for the next request with every limit in force
(the agent's, for the thread's lifetime; the run's, carried on its ``user_input``).

A request that could cross a limit is never sent: ``budget_exceeded`` is recorded, the turn ends
``budget_exhausted`` and the run returns ``BudgetExhausted``. Usage a provider did not report,
and attempts left in doubt by a crash, count at their bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from threads.log.lines import Event
from threads.log.reduce import usage_cost
from threads.models.protocol import Model, Price
from threads.run.budget import Budget, BudgetLimit, BudgetScope
from threads.run.config import AgentSpec
from threads.run.drafts import HOST, Draft
from threads.run.results import BudgetExhausted, BudgetInfo
from threads.run.runtime import Runtime


@dataclass(slots=True)
class Spend:
    model_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nanos: int = 0
    upper_bound: bool = False


def attempt_bounds(spec: AgentSpec) -> tuple[int, int, int]:
    """(input tokens, output tokens, cost nanos) one attempt can at most use, on whichever of
    the agent's models (its model and fallbacks) is asked."""
    bounds = [_model_bounds(model) for model in (spec.model, *spec.fallback)]
    return max(b[0] for b in bounds), max(b[1] for b in bounds), max(b[2] for b in bounds)


def _model_bounds(model: Model) -> tuple[int, int, int]:
    max_tokens = int(model.params().get("max_tokens", model.max_output_tokens))
    price = model.price
    if price is None:
        return model.context_window, max_tokens, 0
    input_rate = max(price.input, price.cache_read or 0, price.cache_write or 0)
    return (
        model.context_window,
        max_tokens,
        model.context_window * input_rate + max_tokens * price.output,
    )


def _costliest_price(spec: AgentSpec) -> Price | None:
    """Every per-token rate at its highest among the agent's models: a reply is never priced
    below what the model that may have given it charges."""
    prices = [m.price for m in (spec.model, *spec.fallback) if m.price is not None]
    if not prices:
        return None

    def top(rates: list[int | None]) -> int | None:
        known = [r for r in rates if r is not None]
        return max(known) if known else None

    return Price(
        input=max(p.input for p in prices),
        output=max(p.output for p in prices),
        cache_read=top([p.cache_read for p in prices]),
        cache_write=top([p.cache_write for p in prices]),
        currency=prices[0].currency,
    )


def spend(spec: AgentSpec, events: list[Event]) -> Spend:
    """What ``events`` spent, with in-doubt and unreported usage at its bound."""
    price = _costliest_price(spec)
    price_wire = None if price is None else price.to_wire()
    bound_in, bound_out, bound_cost = attempt_bounds(spec)
    total = Spend()
    open_requests: dict[str, bool] = {}
    for event in events:
        if event.type == "model_request":
            total.model_requests += 1
            open_requests[event.event_id] = True
        elif event.type in ("model_response", "model_response_recovered"):
            open_requests.pop(event.data["request_event_id"], None)
            usage = event.data["usage"]
            inp, out = usage.get("input_tokens"), usage.get("output_tokens")
            total.input_tokens += bound_in if inp is None else inp
            total.output_tokens += bound_out if out is None else out
            cost = usage_cost(usage, price_wire)
            if cost is None:
                total.upper_bound = True
                total.cost_nanos += bound_cost
            else:
                total.cost_nanos += cost
        elif event.type == "model_attempt_abandoned":
            open_requests.pop(event.data["request_event_id"], None)
            if event.data["provider_outcome"] == "unknown":
                total.upper_bound = True
                total.input_tokens += bound_in
                total.output_tokens += bound_out
                total.cost_nanos += bound_cost
    for _ in open_requests:  # in flight or in doubt: counts as spent
        total.upper_bound = True
        total.input_tokens += bound_in
        total.output_tokens += bound_out
        total.cost_nanos += bound_cost
    return total


def _scopes(rt: Runtime) -> list[tuple[BudgetScope, Budget, list[Event]]]:
    fold = rt.fold
    scopes: list[tuple[BudgetScope, Budget, list[Event]]] = []
    if rt.spec.budget is not None:
        scopes.append(("thread", rt.spec.budget, fold.events))
    turn = fold.turn
    if turn is not None and turn.budget is not None:
        start = next(i for i, e in enumerate(fold.events) if e is turn.input_event)
        scopes.append(("run", Budget.from_wire(turn.budget), fold.events[start:]))
    return scopes


async def before_turn(rt: Runtime) -> BudgetExhausted | None:
    budget = rt.spec.budget
    refused = None if budget is None else budget.turns_refusal(rt.fold.turns_completed)
    if refused is None:
        return None
    return await _exceeded(
        rt, "thread", "max_turns", refused["limit_value"], refused["observed"], upper=False
    )


async def before_request(rt: Runtime) -> BudgetExhausted | None:
    bound_in, bound_out, bound_cost = attempt_bounds(rt.spec)
    for scope, budget, events in _scopes(rt):
        spent = spend(rt.spec, events)
        checks: list[tuple[BudgetLimit, int | None, int]] = [
            ("max_model_requests", budget.max_model_requests, spent.model_requests + 1),
            ("max_input_tokens", budget.max_input_tokens, spent.input_tokens + bound_in),
            ("max_output_tokens", budget.max_output_tokens, spent.output_tokens + bound_out),
            ("max_cost_nanos", budget.max_cost_nanos, spent.cost_nanos + bound_cost),
        ]
        for limit, value, observed in checks:
            if value is not None and observed > value:
                # a request count is exact; spend includes the worst-case reservation
                upper = limit != "max_model_requests"
                return await _exceeded(rt, scope, limit, value, observed, upper=upper)
        turn = rt.fold.turn
        if budget.max_wall_ms is not None and turn is not None:
            started = events[0].time if scope == "thread" else turn.input_event.time
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
