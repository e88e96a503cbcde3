"""``GET /v1/threads/{id}``: a thread and its place in the tree of threads agents start: the
thread it was started from (``thread_started.parent``: a subagent's parent, a handoff's source)
and the threads it started (each ``agent_spawned`` and ``handoff`` of its log, in log order),
each with its status.

Invariant: read only, from the thread's own log plus each child's summary; a child of another
tenant (never written so) or not created yet shows no ``thread_status``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import NotFoundError, ThreadsError
from threads.host.bodies import ChildEntry, ParentRef, ThreadDetail
from threads.host.http import Context, thread_view
from threads.log.fold import Fold
from threads.log.vocabulary import data_of
from threads.principal import Principal
from threads.run import listing_of

HANDED_OFF = "handed_off"


async def get_thread(ctx: Context, request: Request, principal: Principal) -> Response:
    view = await thread_view(ctx, principal, request.path_params["thread_id"], None)
    fold = view.fold
    listing = listing_of(fold)
    children = [
        child.model_copy(update={"thread_status": await _status_of(ctx, principal, child)})
        for child in children_of(fold)
    ]
    body = ThreadDetail(
        thread_id=view.thread_id, branch_id=view.root.branch_id, agent=listing.agent,
        status=listing.status, head_seq=fold.last_seq, parent=parent_ref(fold),
        children=children,
    )
    return JSONResponse(body.model_dump())


def parent_ref(fold: Fold) -> ParentRef | None:
    started = fold.events[0] if fold.events and fold.events[0].type == "thread_started" else None
    parent = None if started is None else data_of(started, "thread_started").get("parent")
    if parent is None:
        return None
    return ParentRef(thread_id=parent["thread_id"], relation=parent["relation"],
                     branch_id=parent["branch_id"], event_id=parent["event_id"])


def children_of(fold: Fold) -> list[ChildEntry]:
    """The threads the branch's log started, in log order, with the status its log gives."""
    out: list[ChildEntry] = []
    for event in fold.events:
        if event.type == "agent_spawned":
            spawned = data_of(event, "agent_spawned")
            child = fold.features.children.get(spawned["child_thread_id"])
            out.append(ChildEntry(
                thread_id=spawned["child_thread_id"], relation="subagent",
                agent=spawned["agent_name"], call_id=spawned["call_id"],
                event_id=event.event_id, status="running" if child is None else child.status,
                thread_status=None,
            ))
        elif event.type == "handoff":
            handoff = data_of(event, "handoff")
            out.append(ChildEntry(
                thread_id=handoff["to_thread_id"], relation="handoff", agent=handoff["to_agent"],
                call_id=handoff["call_id"], event_id=event.event_id, status=HANDED_OFF,
                thread_status=None,
            ))
    return out


async def _status_of(ctx: Context, principal: Principal, child: ChildEntry) -> str | None:
    store = ctx.runs.store
    try:
        root = await store.root_branch(child.thread_id)
    except NotFoundError:
        return None
    if root.tenant_id != principal.tenant:
        return None
    try:
        return (await ctx.summaries.of(store, root)).status
    except ThreadsError:
        return "unreadable"
