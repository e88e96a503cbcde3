"""``POST .../settings`` and ``POST .../mode``: change the model settings or the permission mode
a thread's next steps run under, as a ``settings_changed`` or ``mode_changed`` event.

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

from typing import Any, Literal

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from threads.errors import LogError
from threads.host.bodies import ModeChange, SettingsChange
from threads.host.failure import HostError
from threads.host.http import Context, ThreadView, body_of, branch_param, owning_agent, thread_view
from threads.log.fold import Fold
from threads.log.lines import Draft
from threads.principal import Principal
from threads.run.authority import refusal
from threads.run.control import control_writer


async def _authorized_view(ctx: Context, request: Request, principal: Principal) -> ThreadView:
    view = await thread_view(
        ctx, principal, request.path_params["thread_id"], branch_param(request)
    )
    agent = owning_agent(ctx, view)
    refused = refusal(
        view.fold, principal, tenant=view.root.tenant_id, agent_approvers=agent.approvers
    )
    if refused is not None:
        raise HostError("forbidden", refused)
    return view


async def _append(
    ctx: Context,
    view: ThreadView,
    principal: Principal,
    type_: Literal["settings_changed", "mode_changed"],
    data_of: Any,
) -> Response:
    """Append one change event built from the branch's fold as read under the lease."""
    actor = {"kind": "user", "principal": principal.to_wire()}
    async with control_writer(ctx.runs.store, view.branch.branch_id) as writer:
        data = data_of(writer.fold)
        try:
            (event,) = await writer.append([Draft(type_, data, actor)])
        except LogError as error:
            if error.code == "invalid_transition":
                raise HostError("invalid_transition", error.message) from None
            raise HostError(  # the line itself can't be written, e.g. an integer past 2^53-1
                "invalid_request",
                f"this change can't be recorded in the log ({error.code}): keep integers"
                " within ±(2^53-1) and use plain JSON values",
            ) from None
    ctx.runs.hub.notify(view.branch.branch_id, [event])
    return JSONResponse({"event_id": event.event_id})


async def post_settings(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, SettingsChange)
    view = await _authorized_view(ctx, request, principal)
    model = body.model.model_dump()

    def data_of(fold: Fold) -> dict[str, Any]:
        listed = ((fold.thread_started or {}).get("policy") or {}).get("models")
        names = [{"provider": m["provider"], "name": m["name"]} for m in listed or []]
        if listed is not None and model not in names:
            raise HostError(
                "invalid_transition",
                f"this thread's policy lists the models {names}; a settings change names one"
                " of them (start a new thread for another model)",
            )
        current = fold.settings
        params = current["model_params"] if body.model_params is None else body.model_params
        return {
            "reason": "user",
            "settings": {
                "adapter": current["adapter"],
                "model": model,
                "model_params": params,
                "reasoning_carryover": body.reasoning_carryover or "keep",
            },
        }

    return await _append(ctx, view, principal, "settings_changed", data_of)


async def post_mode(ctx: Context, request: Request, principal: Principal) -> Response:
    body = await body_of(ctx, request, ModeChange)
    view = await _authorized_view(ctx, request, principal)

    def data_of(fold: Fold) -> dict[str, Any]:
        return {"from": fold.mode, "to": body.mode}

    return await _append(ctx, view, principal, "mode_changed", data_of)
