"""Admitting tool calls: record each ``tool_use`` of a reply as ``tool_call`` with what can be
decided at once (an unknown tool or invalid input closes it ``not_executed``; otherwise the
permission decision), the approval challenge an ``ask`` opens when its turn comes, and the
checks made again right before a call runs: the run's ceiling, and that a recorded grant or
denial came from someone the authority rule allows (else the decision counts as not made and a
new challenge is asked).

Everything here returns drafts or a reason; nothing is appended or dispatched here.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import ValidationError

from threads.log.event_types import Actor
from threads.log.fold import Approval, Call
from threads.log.ids import uuid7
from threads.log.json_types import JsonObject
from threads.log.lines import Draft
from threads.log.vocabulary import (
    ApprovalRequestedData,
    OutputPart,
    ParkedData,
    ToolCallData,
    ToolUsePart,
    draft,
)
from threads.run.authority import recorded_refusal
from threads.run.drafts import HOST, tool_result_data
from threads.run.output_schema import is_candidate
from threads.run.runtime import Runtime
from threads.run.spawn import spawned_by
from threads.tools.tool import Tool

APPROVAL_TTL_MS = 60 * 60 * 1000  # an approval challenge is open for 1 h
CANCELLED = "not executed: cancelled"


def record_calls(
    rt: Runtime, content: Sequence[OutputPart], request_event_id: str
) -> list[Draft]:
    """``tool_call`` drafts for every ``tool_use`` part, each followed by its decision (an
    error result for an unknown tool or invalid input, else the permission decision). What a
    decision leads to (a denied result, an approval challenge) is recorded later, in call order,
    once every call of the reply is recorded and decided."""
    drafts: list[Draft] = []
    for part in content:
        if part["type"] != "tool_use":
            continue
        drafts.append(_call_draft(part, request_event_id))
        drafts.extend(admit(rt, part["call_id"], part["name"], part["input"]))
    return drafts


def _call_draft(part: ToolUsePart, request_event_id: str) -> Draft:
    data: ToolCallData = {
        "call_id": part["call_id"],
        "input": part["input"],
        "name": part["name"],
        "request_event_id": request_event_id,
    }
    return draft("tool_call", data, HOST)


def complete_recording(rt: Runtime) -> list[Draft]:
    """What the open turn's last reply still lacks, in part order: a ``tool_call`` (+ decision)
    for each part a crash left unrecorded, a decision for each recorded call that has none. A
    resumed run thus continues the log as an uninterrupted one would: every call of the reply
    is recorded and decided before any of them runs.

    Once the turn has a cancel barrier nothing more is decided: each recorded call that never
    began is closed ``not_executed``, and each unrecorded part is recorded as a ``tool_call``
    closed the same way, never authorized (the format's "cancel while a response's calls are
    recorded")."""
    fold = rt.fold
    turn = fold.turn
    if turn is None or not fold.responses:
        return []
    barred = turn.cancel_event is not None
    last = fold.responses[-1]
    drafts: list[Draft] = []
    for part in last["content"]:
        if part["type"] != "tool_use":
            continue
        call = fold.calls.get(part["call_id"])
        if call is None:
            if barred:
                drafts.append(_call_draft(part, last["request_event_id"]))
                drafts.append(_not_executed(part["call_id"], CANCELLED, rt.actor()))
            else:
                drafts.extend(record_calls(rt, [part], last["request_event_id"]))
        elif call.result is None and call.effect is None:
            if barred:
                if spawned_by(fold, call.call_id) is None:  # a child runs to its end
                    drafts.append(_not_executed(call.call_id, CANCELLED, rt.actor()))
            elif call.decision is None:
                tool = rt.spec.tool_named(call.name)
                if never_runs(rt, call, tool) is None:
                    drafts.extend(admit(rt, call.call_id, call.name, call.input))
    return drafts


def never_runs(rt: Runtime, call: Call, tool: Tool | None) -> str | None:
    """Why a call that never began must not start now, if it must not: the cancel barrier, no
    such tool when it was called (or now), or a later tool set that dropped it."""
    turn = rt.fold.turn
    if turn is not None and turn.cancel_event is not None:
        if spawned_by(rt.fold, call.call_id) is not None:
            return None  # its child exists (or is recorded): it is run to its end
        return "cancelled"
    if call.spec is None:
        return f"unknown tool {call.name}"
    if call.removed:
        return f"{call.name} was removed from the tool set"
    if tool is None:
        return f"unknown tool {call.name}"
    return None


def admit(rt: Runtime, call_id: str, name: str, args: JsonObject) -> list[Draft]:
    """The decision draft for one call: a ``not_executed`` result (unknown tool, invalid input),
    or its ``permission_decision``."""
    tool = rt.spec.tool_named(name)
    if tool is None or rt.fold.tool_spec(name) is None:
        return [_not_executed(call_id, f"not executed: unknown tool {name}")]
    try:
        if not is_candidate(rt.fold, name):  # a final_output candidate is judged when it runs
            tool.input.model_validate(args)
    except ValidationError as exc:
        return [_not_executed(call_id, f"invalid input for {name}: {validation_summary(exc)}")]
    permissions = rt.permissions.in_mode(rt.fold.mode)  # a mode_changed holds from its seq on
    decision = permissions.decide(name, args, tool.effect, rt.fold.thread_rules)
    return [draft("permission_decision", decision.to_wire(call_id), HOST)]


def denied_text(call: Call) -> str:
    """What the model sees for a call the policy denied: ``denied``, with the policy's reason
    when it gave one (the rule is on the ``permission_decision``)."""
    return f"denied: {call.decision_reason}" if call.decision_reason else "denied"


def ceiling_refusal(rt: Runtime, call: Call, tool: Tool) -> str | None:
    """Checked again right before a call runs: the run's ceiling (re-supplied by the caller on
    every run) may deny what was decided earlier."""
    if rt.ceiling is None:
        return None
    decided = rt.ceiling.decide(call.name, call.input, tool.effect)
    if decided.decision != "deny":
        return None
    why = decided.reason or f"not permitted by {decided.rule_id or 'policy'}"
    return f"denied by the run's permission ceiling: {why}"


def decision_refusal(rt: Runtime, approval: Approval) -> str | None:
    """Why a recorded grant or denial must be treated as not made (its principal may not decide
    for this thread under the authority rule), or None when it stands."""
    return recorded_refusal(
        rt.fold, approval.decided_by, tenant=rt.principal.tenant, agent_approvers=rt.spec.approvers
    )


def open_approval(rt: Runtime, call: Call) -> tuple[str, list[Draft]]:
    """A new approval challenge for ``call`` and the park on it: what a run records for an
    ``ask`` when the call's turn comes, and again when the decision it found was not made by
    someone allowed to make it."""
    now = rt.now()
    challenge_id = uuid7(now)
    expires_at = now + APPROVAL_TTL_MS
    request: ApprovalRequestedData = {
        "args_hash": call.args_hash,
        "call_id": call.call_id,
        "challenge_id": challenge_id,
        "expires_at": expires_at,
    }
    park: ParkedData = {
        "address": {"id": challenge_id, "kind": "approval"},
        "expires_at": expires_at,
        "reason": "awaiting_approval",
    }
    return challenge_id, [
        draft("approval_requested", request, HOST),
        draft("parked", park, rt.actor()),
    ]


def validation_summary(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors()[:5]:
        where = ".".join(str(p) for p in error["loc"]) or "input"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def _not_executed(call_id: str, text: str, actor: Actor = HOST) -> Draft:
    return draft(
        "tool_result", tool_result_data(call_id, text, origin="not_executed", is_error=True), actor
    )
