"""``GET /v1/inbox``: everything waiting for a person across the caller's tenant (approvals,
parked effects, open questions), newest first, a page at a time, each naming its thread.

Served from the per-head summaries (``threads.host.summaries``): a call folds only the threads
whose head moved since they were last summarized, never the whole tenant. Another tenant's
threads are never listed (the roots are read for the caller's tenant only).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from threads.host.bodies import InboxItem
from threads.host.failure import HostError
from threads.host.http import Context, as_deciding
from threads.host.inbox import Place, inbox_items, item_id
from threads.host.paging import Key, page, page_request, paged_response
from threads.principal import Principal

DEFAULT_LIMIT = 50
MAX_LIMIT = 500
KINDS = ("approval", "effect", "question")


async def get_inbox(ctx: Context, request: Request, principal: Principal) -> Response:
    asked = page_request(request, (int, str, str), default_limit=DEFAULT_LIMIT, max_limit=MAX_LIMIT)
    kind = request.query_params.get("kind")
    if kind is not None and kind not in KINDS:
        raise HostError("invalid_request", f"kind is one of {', '.join(KINDS)}")
    now = ctx.runs.store.clock.now_ms()
    items: list[InboxItem] = []
    for row in await ctx.summaries.listed(ctx.runs.store, principal.tenant):
        summary = row.summary
        if summary is None or not summary.waiting:
            continue
        served = ctx.runs.agents.get(summary.agent) if summary.agent is not None else None
        place = Place(
            thread_id=row.root.thread_id, branch_id=row.root.branch_id,
            tenant_id=row.root.tenant_id, agent_name=summary.agent,
            agent=None if served is None else await as_deciding(ctx, served, summary.parent),
            starter=summary.starter, root=True, parent=summary.parent,
        )
        items += [
            item for item in inbox_items(place, summary.waiting, principal, now)
            if kind is None or item.kind == kind
        ]
    chosen, next_key = page(items, _newest_first, asked)
    return paged_response(request, [item.model_dump() for item in chosen], next_key)


def _newest_first(item: InboxItem) -> Key:
    return (-item.since, item.thread_id, item_id(item))
