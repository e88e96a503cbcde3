"""Read routes of a thread: timeline, branches, fork points, pending approvals; and the list
of the caller's threads that the console starts from (filtered, ordered and paged here)."""

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
from threads.host.failure import HostError
from threads.host.http import Context, ThreadView, branch_param, thread_view
from threads.host.paging import Key, page, page_request, paged_response
from threads.host.routes_overview import cost_body
from threads.host.summaries import Listed
from threads.log.json_types import JsonObject
from threads.principal import Principal
from threads.run import Thread

LIST_LIMIT = 200  # threads a page holds unless ``limit`` says otherwise
MAX_LIMIT = 1000
STATUSES = ("parked", "in_turn", "idle", "cancelled", "inspection_only", "unreadable")


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
    """The caller's threads, parked first then the most recently updated, filtered by
    ``status``, ``agent`` and ``q`` (part of the thread id), a page at a time."""
    asked = page_request(request, (int, int, str), default_limit=LIST_LIMIT, max_limit=MAX_LIMIT)
    status = request.query_params.get("status")
    if status is not None and status not in STATUSES:
        raise HostError("invalid_request", f"status is one of {', '.join(STATUSES)}")
    agent = request.query_params.get("agent")
    q = request.query_params.get("q", "").strip().lower()
    if len(q) > 256:
        raise HostError("invalid_request", "q is at most 256 characters of a thread id")
    rows = [
        row for row in await ctx.summaries.listed(ctx.runs.store, principal.tenant)
        if (status is None or _status(row) == status)
        and (agent is None or (row.summary is not None and row.summary.agent == agent))
        and q in row.root.thread_id.lower()
    ]
    chosen, next_key = page(rows, _list_order, asked)
    return paged_response(request, [_summary_body(row) for row in chosen], next_key)


def _status(row: Listed) -> str:
    return row.summary.status if row.summary is not None else "unreadable"


def _list_order(row: Listed) -> Key:
    updated = row.summary.updated_at if row.summary is not None else 0
    return (0 if _status(row) == "parked" else 1, -updated, row.root.thread_id)


def _summary_body(row: Listed) -> JsonObject:
    summary, root = row.summary, row.root
    return ThreadSummary(
        thread_id=root.thread_id,
        branch_id=root.branch_id,
        agent=summary.agent if summary is not None else None,
        status=_status(row),
        head_seq=root.head_seq,
        created_at=summary.created_at if summary is not None else None,
        updated_at=summary.updated_at if summary is not None else None,
        first_input=summary.first_input if summary is not None else None,
        cost=cost_body(summary.cost) if summary is not None else None,
        waiting=len(summary.waiting) if summary is not None else 0,
    ).model_dump()
