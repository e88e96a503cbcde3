"""Decision routes: approve or deny, answer a question, resolve a parked effect, cancel, fork.

Each decision goes through the ``Thread`` handle, which checks the tenant and the authority
(the owning agent's approvers, else the thread's starter) and appends nothing when it refuses.
After approve, deny, answer, resolve and cancel the host continues the thread itself, whatever
the decision's outcome; a decision recorded on a subagent's thread continues the tree's root
instead, whose run reruns the child first (a refused one continues nothing there). A cancel
of a thread another process runs is queued for that process as a control item (202
``CancelAccepted``), which it records at its next step boundary. A cancel while one is in force
already records nothing and answers as the first did, with the barrier recorded then.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import NotFoundError, StoreError, ThreadsError
from threads.host.bodies import (
    Answer,
    ApprovalDecision,
    ForkRequest,
    ParkedResolution,
)
from threads.host.failure import HostError
from threads.host.http import (
    Context,
    ThreadView,
    body_of,
    branch_param,
    deciding_agent,
    thread_view,
)
from threads.log.lines import Event
from threads.log.vocabulary import (
    SnapshotData as WireSnapshot,
)
from threads.log.vocabulary import (
    data_of,
)
from threads.principal import Principal
from threads.run import Thread, fork_at, refusal


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


async def _handle(ctx: Context, view: ThreadView, principal: Principal) -> Thread:
    agent = await deciding_agent(ctx, view)
    return Thread(ctx.runs.store, view.thread_id, principal=principal, agent=agent)


async def _appended(
    ctx: Context,
    view: ThreadView,
    decide: Callable[[], Awaitable[None]],
    match: Callable[[Event], bool],
) -> Response:
    """Run a decision, continue the thread, answer ``Appended`` with the decision's event.
    On a subagent's thread it is the tree's root that continues: its run reruns the child
    (under the root's ceiling and budgets) and goes on from it (digest §6.2)."""
    store = ctx.runs.store
    decided = False
    try:
        await decide()
        decided = True
    finally:
        ctx.runs.hub.notify(view.branch.branch_id)
        await ctx.runs.resume(view.thread_id, tree=decided)
    chain = await store.read_chain(view.branch.branch_id)
    fresh = [e for e in chain.events if e.seq > view.fold.last_seq and match(e)]
    if not fresh:
        raise HostError("invalid_request", "the decision was not recorded; read the timeline")
    return JSONResponse({"event_id": fresh[0].event_id})


async def post_approval(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ApprovalDecision)
    view = await _root_view(ctx, request, principal)
    handle = await _handle(ctx, view, principal)
    challenge_id = request.path_params["challenge_id"]
    call = view.fold.approvals.get(challenge_id)
    if call is None:
        raise HostError("not_found", f"no approval {challenge_id} on this thread")
    if body.decision == "deny":
        if body.remember_rule is not None:
            raise HostError("invalid_request", "remember_rule goes with a grant, not a deny")

        async def decide() -> None:
            await handle.deny(challenge_id, principal, body.reason)

        kind: Literal["approval_granted", "approval_denied"] = "approval_denied"
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
        ctx, view, decide,
        lambda e: e.type == kind and data_of(e, kind)["challenge_id"] == challenge_id,
    )


async def post_resolve(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ParkedResolution)
    view = await _root_view(ctx, request, principal)
    handle = await _handle(ctx, view, principal)
    effect_key = request.path_params["effect_key"]
    call = next((c for c in view.fold.calls.values() if c.effect_key == effect_key), None)

    async def decide() -> None:
        await handle.resolve_parked(effect_key, body.resolution, principal)

    return await _appended(
        ctx, view, decide,
        lambda e: e.type == "effect_resolved" and call is not None
        and data_of(e, "effect_resolved")["call_id"] == call.call_id,
    )


async def post_answer(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, Answer)
    view = await _root_view(ctx, request, principal)
    call_id = request.path_params["call_id"]
    if ("input", call_id) not in view.fold.parks:
        raise HostError("no_open_question", f"no question {call_id} is waiting for an answer")
    handle = await _handle(ctx, view, principal)

    async def decide() -> None:
        await handle.answer(call_id, body.answer, principal)

    return await _appended(
        ctx, view, decide,
        lambda e: e.type == "tool_result" and data_of(e, "tool_result")["call_id"] == call_id,
    )


async def post_cancel(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await _root_view(ctx, request, principal)
    agent = await deciding_agent(ctx, view)
    branch_id = view.branch.branch_id
    refused = refusal(
        view.fold, principal, tenant=view.root.tenant_id, agent_approvers=agent.approvers
    )
    if refused is not None:
        raise HostError("forbidden", refused)
    handle = await _handle(ctx, view, principal)
    decided = False
    try:
        barrier = await handle.cancel(principal)
        decided = True
    except StoreError as error:
        if error.code != "branch_busy":
            raise
        # Another process runs the thread (or our own run does: its tools see ctx.cancelled
        # at once). Queue the cancel for it; it records the barrier at its next step.
        ctx.runs.cancel_in_process(branch_id)
        item_key = await handle.queue_cancel(principal)
        return JSONResponse({"item_key": item_key}, status_code=202)
    finally:
        ctx.runs.hub.notify(branch_id)
        await ctx.runs.resume(view.thread_id, tree=decided)
    # The barrier in force: the one recorded now, or (a second cancel) the one before it.
    return JSONResponse({"event_id": barrier.event_id})


async def post_fork(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ForkRequest)
    view = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    if body.mode == "stub":
        raise HostError("invalid_request", "stub forks are not supported by this host yet")
    agent = ctx.runs.agent_for(view.fold)
    restore = getattr(agent.sandbox, "restore", None) if agent is not None else None

    async def restore_or_refuse(snapshot: WireSnapshot) -> str:
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
    except NotFoundError:
        raise HostError(
            "no_snapshot_boundary", f"no event {body.event_id} on this branch to fork at"
        ) from None
    return JSONResponse({"thread_id": view.thread_id, "branch_id": child}, status_code=201)
