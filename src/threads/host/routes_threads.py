"""Read routes of a thread: timeline, branches, fork points, pending approvals; and the list
of the caller's threads that the web timeline starts from."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.host.bodies import (
    BranchEntry,
    ForkPoint,
    PendingApproval,
    ThreadSummary,
    Timeline,
    TimelineEntry,
)
from threads.host.http import Context, ThreadView, branch_param, thread_view
from threads.principal import Principal
from threads.run.thread import Thread

LIST_LIMIT = 200


def _fork_point_seqs(view: ThreadView) -> set[int]:
    now = view.fold.now_ms
    return {
        seq
        for seq, _, expires_at in view.fold.snapshots
        if expires_at is None or now is None or expires_at > now
    }


async def _view(ctx: Context, request: Request, principal: Principal) -> ThreadView:
    return await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )


async def get_timeline(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await _view(ctx, request, principal)
    points = _fork_point_seqs(view)
    entries = [
        TimelineEntry(event=json.loads(e.line), fork_point=e.seq in points)
        for e in view.chain.events
    ]
    body = Timeline(thread_id=view.thread_id, branch_id=view.branch.branch_id, entries=entries)
    return JSONResponse(body.model_dump())


async def get_branches(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await thread_view(ctx, principal, request.path_params["thread_id"], None)
    branches = await ctx.runs.store.list_branches(view.thread_id)
    out = [
        BranchEntry(
            branch_id=b.branch_id,
            parent_branch_id=b.parent_branch_id,
            fork_at_seq=b.fork_at_seq,
            mode="live",
            runnable=b.state == "ready",
        ).model_dump(exclude_none=True)
        for b in branches
        if b.state != "forking"
    ]
    return JSONResponse(out)


async def get_fork_points(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await _view(ctx, request, principal)
    points = _fork_point_seqs(view)
    out = []
    for segment in view.chain.segments:
        for event in segment.events:
            if event.seq in points and event.type == "snapshot":
                point = ForkPoint(
                    branch_id=segment.header.branch_id,
                    seq=event.seq,
                    event_id=event.event_id,
                    snapshot=event.data,
                )
                out.append(point.model_dump())
    return JSONResponse(out)


async def get_approvals(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await _view(ctx, request, principal)
    handle = Thread(ctx.runs.store, view.thread_id, principal=principal)
    pending = await handle.pending_approvals()
    out = [
        PendingApproval(
            challenge_id=p.challenge_id,
            call_id=p.call_id,
            tool=p.tool,
            input=p.input,
            args_hash=p.args_hash,
            expires_at=p.expires_at,
            suggested_rules=[p.tool],
        ).model_dump(exclude_none=True)
        for p in pending
    ]
    return JSONResponse(out)


async def get_threads(ctx: Context, request: Request, principal: Principal) -> Response:
    store = ctx.runs.store
    roots = await store.list_threads(principal.tenant)
    out = []
    for root in roots[-LIST_LIMIT:]:
        status: str
        agent: str | None
        try:
            summary = await ctx.summaries.of(store, root)
            status, agent = summary.status, summary.agent
        except Exception:  # one unreadable thread must not hide the others
            status, agent = "unreadable", None
        out.append(
            ThreadSummary(
                thread_id=root.thread_id,
                branch_id=root.branch_id,
                agent=agent,
                status=status,
                head_seq=root.head_seq,
            ).model_dump()
        )
    return JSONResponse(list(reversed(out)))
