"""The budget guard: before a turn opens and before each model request, compare spend read
back from the log plus a worst-case reservation for the next request with every limit in force
(the agent's, for the thread's lifetime; the run's, carried on its ``user_input``).

A request that could cross a limit is never sent: ``budget_exceeded`` is recorded, the turn ends
``budget_exhausted`` and the run returns ``BudgetExhausted``. Usage a provider did not report,
and attempts left in doubt by a crash, count at their bound.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from threads.log.lines import Event
from threads.log.reduce import usage_cost
from threads.run.budget import Budget, BudgetLimit, BudgetScope
from threads.run.results import BudgetExhausted, BudgetInfo

if TYPE_CHECKING:
    from threads.run.agent import Agent
    from threads.run.loop import RunLoop


@dataclass(slots=True)
class Spend:
    model_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cost_nanos: int = 0
    upper_bound: bool = False


class BudgetGuard:
    def __init__(self, agent: Agent, run_budget: Budget | None) -> None:
        self.agent = agent
        self.run_budget = run_budget

    def _bounds(self) -> tuple[int, int, int]:
        """(input tokens, output tokens, cost nanos) one attempt can at most use."""
        model = self.agent.model
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

    def spend(self, events: list[Event]) -> Spend:
        price = self.agent.model.price
        price_wire = None if price is None else price.to_wire()
        bound_in, bound_out, bound_cost = self._bounds()
        spend = Spend()
        open_requests: dict[str, bool] = {}
        for event in events:
            if event.type == "model_request":
                spend.model_requests += 1
                open_requests[event.event_id] = True
            elif event.type in ("model_response", "model_response_recovered"):
                open_requests.pop(event.data["request_event_id"], None)
                usage = event.data["usage"]
                inp, out = usage.get("input_tokens"), usage.get("output_tokens")
                spend.input_tokens += bound_in if inp is None else inp
                spend.output_tokens += bound_out if out is None else out
                cost = usage_cost(usage, price_wire)
                if cost is None:
                    spend.upper_bound = True
                    spend.cost_nanos += bound_cost
                else:
                    spend.cost_nanos += cost
            elif event.type == "model_attempt_abandoned":
                open_requests.pop(event.data["request_event_id"], None)
                if event.data["provider_outcome"] == "unknown":
                    spend.upper_bound = True
                    spend.input_tokens += bound_in
                    spend.output_tokens += bound_out
                    spend.cost_nanos += bound_cost
        for _ in open_requests:  # in flight or in doubt: counts as spent
            spend.upper_bound = True
            spend.input_tokens += bound_in
            spend.output_tokens += bound_out
            spend.cost_nanos += bound_cost
        return spend

    def _scopes(self, loop: RunLoop) -> list[tuple[BudgetScope, Budget, list[Event]]]:
        fold = loop.fold
        scopes: list[tuple[BudgetScope, Budget, list[Event]]] = []
        if self.agent.budget is not None:
            scopes.append(("thread", self.agent.budget, fold.events))
        turn = fold.turn
        if turn is not None and turn.budget is not None:
            start = next(i for i, e in enumerate(fold.events) if e is turn.input_event)
            scopes.append(("run", Budget.from_wire(turn.budget), fold.events[start:]))
        return scopes

    async def before_turn(self, loop: RunLoop) -> BudgetExhausted | None:
        budget = self.agent.budget
        if budget is None or budget.max_turns is None:
            return None
        observed = loop.fold.turns_completed + 1
        if observed <= budget.max_turns:
            return None
        return await self._exceeded(
            loop, "thread", "max_turns", budget.max_turns, observed, upper=False
        )

    async def before_request(self, loop: RunLoop) -> BudgetExhausted | None:
        bound_in, bound_out, bound_cost = self._bounds()
        for scope, budget, events in self._scopes(loop):
            spend = self.spend(events)
            checks: list[tuple[BudgetLimit, int | None, int]] = [
                ("max_model_requests", budget.max_model_requests, spend.model_requests + 1),
                ("max_input_tokens", budget.max_input_tokens, spend.input_tokens + bound_in),
                ("max_output_tokens", budget.max_output_tokens, spend.output_tokens + bound_out),
                ("max_cost_nanos", budget.max_cost_nanos, spend.cost_nanos + bound_cost),
            ]
            for limit, value, observed in checks:
                if value is not None and observed > value:
                    # a request count is exact; spend includes the worst-case reservation
                    upper = limit != "max_model_requests"
                    return await self._exceeded(loop, scope, limit, value, observed, upper=upper)
            turn = loop.fold.turn
            if budget.max_wall_ms is not None and turn is not None:
                elapsed = loop.now() - (
                    events[0].time if scope == "thread" else turn.input_event.time
                )
                if elapsed > budget.max_wall_ms:
                    return await self._exceeded(
                        loop, scope, "max_wall_ms", budget.max_wall_ms, elapsed, upper=False
                    )
        return None

    async def _exceeded(
        self,
        loop: RunLoop,
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
        items: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
            ("budget_exceeded", data, {"kind": "host"})
        ]
        if loop.fold.turn is not None:
            items.append(("turn_completed", {"reason": "budget_exhausted"}, {"kind": "host"}))
        await loop.writer.append(items)
        return BudgetExhausted(loop.thread, BudgetInfo(limit, value, observed, scope, upper))
