"""Decision routes: approve or deny, answer a question, resolve a parked effect, cancel, fork.

Each decision goes through the ``Thread`` handle, which checks the tenant and the authority
(the owning agent's approvers, else the thread's starter) and appends nothing when it refuses.
After approve, deny, answer, resolve and cancel the host continues the thread itself, whatever
the decision's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import NotFound, ThreadsError
from threads.host.bodies import (
    Answer,
    ApprovalDecision,
    ForkRequest,
    ParkedResolution,
)
from threads.host.failure import HostError
from threads.host.http import Context, ThreadView, body_of, branch_param, owning_agent, thread_view
from threads.log.ids import uuid7
from threads.log.lines import Event
from threads.principal import Principal
from threads.run.authority import refusal
from threads.run.fork import fork_at
from threads.run.thread import Thread

CANCEL_WAIT_S = 2.0  # how long a cancel of our own run waits to answer with its event id


async def _root_view(ctx: Context, request: Request, principal: Principal) -> ThreadView:
    view = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    if view.branch.branch_id != view.root.branch_id:
        raise HostError(
            "invalid_request",
            "this host decides on a thread's root branch; drop branch_id, or run the fork",
        )
    return view


def _handle(ctx: Context, view: ThreadView, principal: Principal) -> Thread:
    agent = owning_agent(ctx, view)
    return Thread(ctx.runs.store, view.thread_id, principal=principal, agent=agent)


async def _appended(
    ctx: Context,
    view: ThreadView,
    decide: Callable[[], Awaitable[None]],
    match: Callable[[Event], bool],
) -> Response:
    """Run a decision, continue the thread, answer ``Appended`` with the decision's event."""
    store = ctx.runs.store
    try:
        await decide()
    finally:
        ctx.runs.hub.notify(view.branch.branch_id)
        await ctx.runs.resume(view.thread_id)
    chain = await store.read_chain(view.branch.branch_id)
    fresh = [e for e in chain.events if e.seq > view.fold.last_seq and match(e)]
    if not fresh:
        raise HostError("invalid_request", "the decision was not recorded; read the timeline")
    return JSONResponse({"event_id": fresh[0].event_id})


async def post_approval(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ApprovalDecision)
    view = await _root_view(ctx, request, principal)
    handle = _handle(ctx, view, principal)
    challenge_id = request.path_params["challenge_id"]
    call = view.fold.approvals.get(challenge_id)
    if call is None:
        raise HostError("not_found", f"no approval {challenge_id} on this thread")
    if body.decision == "deny":
        if body.remember_rule is not None:
            raise HostError("invalid_request", "remember_rule goes with a grant, not a deny")

        async def decide() -> None:
            await handle.deny(challenge_id, principal, body.reason)

        kind = "approval_denied"
    else:
        if body.remember_rule is not None and body.remember_rule != call.name:
            raise HostError(
                "invalid_request",
                f"remember_rule must be one of the challenge's suggested_rules: [{call.name!r}]",
            )

        async def decide() -> None:
            await handle.approve(challenge_id, principal, body.remember_rule)

        kind = "approval_granted"
    return await _appended(
        ctx, view, decide, lambda e: e.type == kind and e.data["challenge_id"] == challenge_id
    )


async def post_resolve(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ParkedResolution)
    view = await _root_view(ctx, request, principal)
    handle = _handle(ctx, view, principal)
    effect_key = request.path_params["effect_key"]
    call = next((c for c in view.fold.calls.values() if c.effect_key == effect_key), None)

    async def decide() -> None:
        await handle.resolve_parked(effect_key, body.resolution, principal)

    return await _appended(
        ctx, view, decide,
        lambda e: e.type == "effect_resolved" and call is not None
        and e.data["call_id"] == call.call_id,
    )


async def post_answer(ctx: Context, request: Request, principal: Principal) -> Response:
    await body_of(ctx, request, Answer)
    view = await _root_view(ctx, request, principal)
    call_id = request.path_params["call_id"]
    if ("input", call_id) not in view.fold.parks:
        raise HostError("no_open_question", f"no question {call_id} is waiting for an answer")
    turn = view.fold.turn
    asker = turn.input_event.actor.get("principal") if turn is not None else None
    if asker is None or Principal.from_wire(asker) != principal:
        raise HostError("forbidden", "only the principal who opened this turn may answer")
    # Our loop never asks (no ask_user yet): a question here was written by another
    # implementation, and this host can't hand it an answer.
    raise HostError("invalid_answer", "this host can't deliver answers to this thread's loop")


async def post_cancel(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await _root_view(ctx, request, principal)
    agent = owning_agent(ctx, view)
    branch_id = view.branch.branch_id
    refused = refusal(
        view.fold, principal, tenant=view.root.tenant_id, agent_approvers=agent.approvers
    )
    if refused is not None:
        raise HostError("forbidden", refused)
    if ctx.runs.cancel_in_process(branch_id):
        event = await _wait_for(ctx, view, lambda e: e.type == "cancel_requested")
        if event is None:
            return JSONResponse({"item_key": uuid7(ctx.runs.store.clock.now_ms())}, 202)
        return JSONResponse({"event_id": event.event_id})
    handle = _handle(ctx, view, principal)

    async def decide() -> None:
        await handle.cancel(principal)

    return await _appended(ctx, view, decide, lambda e: e.type == "cancel_requested")


async def _wait_for(ctx: Context, view: ThreadView, match: Callable[[Event], bool]) -> Event | None:
    """The first event after the view's head that matches, once our run commits it."""
    store, hub = ctx.runs.store, ctx.runs.hub
    loop = asyncio.get_running_loop()
    deadline = loop.time() + CANCEL_WAIT_S
    branch_id = view.branch.branch_id
    while loop.time() < deadline:
        seen = hub.version(branch_id)
        chain = await store.read_chain(branch_id)
        found = next((e for e in chain.events if e.seq > view.fold.last_seq and match(e)), None)
        if found is not None:
            return found
        await hub.wait(branch_id, seen, max(0.0, deadline - loop.time()))
    return None


async def post_fork(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ForkRequest)
    view = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    if body.mode == "stub":
        raise HostError("invalid_request", "stub forks are not supported by this host yet")
    agent = ctx.runs.agent_for(view.fold)
    restore = getattr(agent.sandbox, "restore", None) if agent is not None else None

    async def restore_or_refuse(snapshot: dict[str, Any]) -> str:
        if restore is None:
            raise ThreadsError(
                "sandbox_required",
                "forking restores a snapshot into a new sandbox: serve this thread's agent"
                " with a sandbox that can restore",
            )
        return str(await restore(snapshot))

    try:
        child = await fork_at(
            ctx.runs.store, view.branch, body.event_id, restore_or_refuse,
            knowledge_policy=body.knowledge,
        )
    except NotFound:
        raise HostError(
            "no_snapshot_boundary", f"no event {body.event_id} on this branch to fork at"
        ) from None
    return JSONResponse({"thread_id": view.thread_id, "branch_id": child}, status_code=201)
