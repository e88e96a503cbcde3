"""``POST .../settings`` and ``POST .../mode``: change the model settings or the permission mode
a thread's next steps run under, as a ``settings_changed`` or ``mode_changed`` event, through
the thread handle (``Thread.change_settings``, ``Thread.change_mode``).

Both need the same authority as a decision (the agent's approvers, else the thread's starter):
a mode change can skip every approval, so any member of the tenant may not make it. Each is one
append under the branch's lease, taken for that append only, so a thread a run is driving
right now answers 409 ``branch_busy`` (retry once the run parked or ended). The log's rules
decide what is legal: a settings change names a model the thread's policy lists and never lands
while a model request awaits its answer; ``bypass`` needs the agent's ``allow_bypass``. A
refused change is 409 ``invalid_transition`` and appends nothing. Neither resumes the thread:
the change holds from the thread's next run on.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import ThreadsError
from threads.host.bodies import ModeChange, SettingsChange
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
from threads.principal import Principal
from threads.run import Thread


async def _changed(
    ctx: Context, request: Request, principal: Principal,
    change: Callable[[Thread, str], Awaitable[Event]],
) -> Response:
    view: ThreadView = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    handle = Thread(ctx.runs.store, view.thread_id, principal=principal,
                    agent=await deciding_agent(ctx, view))
    try:
        event = await change(handle, view.branch.branch_id)
    except ThreadsError as error:
        raise HostError.of(error) from None
    ctx.runs.hub.notify(view.branch.branch_id, [event])
    return JSONResponse({"event_id": event.event_id})


async def post_settings(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, SettingsChange)
    return await _changed(ctx, request, principal, lambda thread, branch_id: (
        thread.change_settings(
            principal, provider=body.model.provider, model=body.model.name,
            model_params=body.model_params,
            reasoning_carryover=body.reasoning_carryover or "keep", branch_id=branch_id,
        )
    ))


async def post_mode(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ModeChange)
    return await _changed(ctx, request, principal, lambda thread, branch_id: (
        thread.change_mode(principal, body.mode, branch_id=branch_id)
    ))
