"""``GET /v1/threads/{id}/overview``: what a person reading a branch needs besides its events:
status, agent, times, spend and usage, every model call with its duration, usage and cost,
every effect with its class and state, what waits for a decision, and the fork points.

All of it is read from the branch's fold (the same one the timeline answers from), so the
figures are the log's: a model call's duration is from its ``model_request`` to the event
that closed it, its cost is its reported usage at the thread's pinned price (null when the
usage or the price is unknown).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.host.bodies import (
    CostBody,
    EffectEntry,
    ForkPointRef,
    ModelCall,
    ThreadOverview,
    UsageBody,
)
from threads.host.http import Context, ThreadView, as_deciding, branch_param, thread_view
from threads.host.inbox import Place, inbox_items
from threads.host.summaries import Summary
from threads.log.fold import Fold, ModelAttempt
from threads.log.fold.cost import PriceTable
from threads.log.vocabulary import data_of
from threads.principal import Principal
from threads.run import ThreadCost, gone_holders, usage_of


def cost_body(cost: ThreadCost | None) -> CostBody | None:
    if cost is None:
        return None
    return CostBody(
        currency=cost.currency, known_nanos=cost.known_nanos,
        upper_bound_nanos=cost.upper_bound_nanos, complete=cost.complete, bounded=cost.bounded,
    )


async def place_of(ctx: Context, view: ThreadView, summary: Summary) -> Place:
    served = ctx.runs.agent_for(view.fold)
    return Place(
        thread_id=view.thread_id,
        branch_id=view.branch.branch_id,
        tenant_id=view.root.tenant_id,
        agent_name=summary.agent,
        agent=None if served is None else await as_deciding(ctx, served, summary.parent),
        starter=summary.starter,
        root=view.branch.branch_id == view.root.branch_id,
        parent=summary.parent,
    )


async def get_overview(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    fold = view.fold
    gone = await gone_holders(ctx.runs.store, view.branch.branch_id)
    summary = ctx.summaries.summarize(fold, gone)
    place = await place_of(ctx, view, summary)
    now = ctx.runs.store.clock.now_ms()
    usage = usage_of(fold)
    body = ThreadOverview(
        thread_id=view.thread_id,
        branch_id=view.branch.branch_id,
        root_branch_id=view.root.branch_id,
        agent=summary.agent,
        served=place.agent is not None,
        status=summary.status,
        head_seq=fold.last_seq,
        created_at=summary.created_at,
        updated_at=summary.updated_at,
        first_input=summary.first_input,
        cost=cost_body(summary.cost),
        usage=UsageBody(
            input_tokens=usage.input_tokens, output_tokens=usage.output_tokens,
            unknown_responses=usage.unknown_responses, model_requests=usage.model_requests,
            turns_completed=usage.turns_completed,
        ),
        model_calls=model_calls(fold),
        effects=effects(fold),
        waiting=inbox_items(place, summary.waiting, principal, now),
        fork_points=[ForkPointRef(seq=seq, event_id=eid) for seq, eid in fold.fork_points()],
    )
    return JSONResponse(body.model_dump())


def model_calls(fold: Fold) -> list[ModelCall]:
    table = fold.price_table()
    abandoned = {
        data_of(e, "model_attempt_abandoned")["request_event_id"]: e
        for e in fold.events if e.type == "model_attempt_abandoned"
    }
    out = []
    for request_id, attempt in fold.attempts.items():
        started = attempt.event.time
        end = fold.response_to(request_id) or abandoned.get(request_id)
        usage = attempt.usage  # its response's, when it has one
        out.append(ModelCall(
            request_event_id=request_id,
            attempt=attempt.attempt,
            started_at=started,
            outcome=attempt.outcome or "open",
            response_event_id=end.event_id if end is not None else None,
            ended_at=end.time if end is not None else None,
            duration_ms=max(0, end.time - started) if end is not None else None,
            input_tokens=usage.get("input_tokens") if usage else None,
            output_tokens=usage.get("output_tokens") if usage else None,
            cost_nanos=_exact_cost(table, attempt),
        ))
    return out


def _exact_cost(table: PriceTable, attempt: ModelAttempt) -> int | None:
    """The attempt's cost when its response made it exact, else None."""
    charge = table.charge(attempt)
    return charge.known if charge is not None and charge.exact else None


def effects(fold: Fold) -> list[EffectEntry]:
    out = []
    for call_id in fold.effect_order:
        call = fold.calls[call_id]
        out.append(EffectEntry(
            effect_key=call.effect_key, call_id=call_id, tool=call.name,
            effect_class=call.effect_class, state=call.effect,
        ))
    return out
