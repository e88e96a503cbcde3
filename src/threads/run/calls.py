"""The call scheduler: run every pending call of the turn in call order, and stop at a park.

A call that never started is checked again before it runs (cancel barrier, tool present at call
time and not removed, input valid, permission, approval) and dispatched (``execute``). A call in
doubt (begun or unknown, by a crash, timeout or transport error) is settled (``settle``); when
settling allows another dispatch, this module does it, as the next step of a plain loop, so no
call stack grows with attempts.
"""

from __future__ import annotations

import logging

from threads.log.fold import Call
from threads.log.fold.questions import ASK_USER, input_problem
from threads.log.lines import Draft
from threads.log.vocabulary import (
    ParkedData,
    ToolResultDataOrigin,
    data_of,
    draft,
)
from threads.run import settle, structured
from threads.run.admit import (
    CANCELLED,
    admit,
    ceiling_refusal,
    complete_recording,
    decision_refusal,
    denied_text,
    never_runs,
    open_approval,
)
from threads.run.drafts import HOST, resumed_data, tool_result_data
from threads.run.execute import InDoubt, dispatch
from threads.run.handoff import ensure_target, hand_off, is_handoff
from threads.run.output_schema import is_candidate
from threads.run.park_info import parked_event
from threads.run.questions import NO_ANSWER, QUESTION_TTL_MS
from threads.run.record import close
from threads.run.results import Parked, ParkReason, Pending, RunResult
from threads.run.runtime import Runtime
from threads.run.spawn import SPAWN_AGENT, SpawnAgent, run_spawn
from threads.run.turn import honour_cancel_request, park_reason, pending_for
from threads.tools.tool import Tool

log = logging.getLogger("threads")
EXPIRED = "denied: the approval request expired (approval_expired)"


async def run_pending(rt: Runtime) -> RunResult | None:
    """Record and decide what the last reply still lacks, then settle or run every pending
    call in call order; stop at the first park, or at a handoff."""
    await release_approval_parks(rt)
    unrecorded = complete_recording(rt)
    if unrecorded:
        await rt.writer.append(unrecorded)
    parked: list[Pending] = []
    reason: ParkReason = "effect_unknown"
    for call in rt.fold.pending_calls():
        await honour_cancel_request(rt)
        if rt.fold.features.handoff is not None:
            break  # the reply's later calls never run
        if call.result is not None:
            continue
        if call.effect is not None:
            if await settle_until_closed(rt, call):
                parked.append(pending_for(rt, "effect", call.effect_key))
            continue
        if parked:
            continue  # nothing new starts while something is parked
        outcome = await start(rt, call)
        if outcome is not None:
            if not parked:
                reason = park_reason(rt.fold, outcome)
            parked.append(outcome)
    if parked:
        return Parked(rt.thread, reason, parked)
    if rt.fold.features.handoff is not None:
        return await ensure_target(rt)
    return None


async def settle_until_closed(rt: Runtime, call: Call) -> bool:
    """Settle a call in doubt, dispatching again each time settling allows it, until it has a
    result (False) or parks (True)."""
    while True:
        outcome = await settle.settle(rt, call)
        if isinstance(outcome, settle.Closed):
            return False
        if isinstance(outcome, settle.Parked):
            return True
        tool = rt.spec.tool_named(call.name)
        assert tool is not None  # settle returns Retry only for a tool this agent has
        if outcome.not_before is not None:
            await rt.wait_until(outcome.not_before)
        if not settle.resend_allowed(call, rt.now()):
            await settle.park(rt, call)  # the dedup window passed while the resend waited
            return True
        if not isinstance(await dispatch(rt, call, tool), InDoubt):
            return False


async def release_approval_parks(rt: Runtime) -> None:
    """An approval park ends without a decision when the approval expired (the call counts as
    denied) or a cancel barrier follows it (the call is not executed); a question park when it
    expired unanswered (``close_expired_questions``) or a cancel barrier follows it (digest
    §2.1: the call is not executed)."""
    await close_expired_questions(rt)
    fold = rt.fold
    turn = fold.turn
    barred = turn is not None and turn.cancel_event is not None
    for (kind, park_id), address in list(fold.parks.items()):
        if kind == "input":
            call = fold.calls.get(park_id) if barred else None
        else:
            call = fold.approvals.get(park_id) if kind == "approval" else None
            if call is not None and (call.approval is None or call.approval.state != "open"):
                call = None
        if call is None:
            continue
        drafts = [draft("resumed", resumed_data(fold, address), HOST)]
        if call.result is not None:
            pass  # already closed (expired at dispatch, or by recovery): the park is left
        elif barred:
            drafts.append(_error_result(call, CANCELLED, "not_executed"))
        elif call.approval is not None and call.approval.expires_at <= rt.now():
            drafts.append(_error_result(call, EXPIRED, "denied"))
        else:
            continue
        await rt.writer.append(drafts)


async def start(rt: Runtime, call: Call) -> Pending | None:
    """A call that never began: check everything again, then dispatch it."""
    tool = rt.spec.tool_named(call.name)
    reason = never_runs(rt, call, tool)
    if reason is not None or tool is None:
        await close(rt, call, f"not executed: {reason}", origin="not_executed", actor=rt.actor())
        return None
    if call.decision is None:
        await rt.writer.append(admit(rt, call.call_id, call.name, call.input)[:1])
    return await _authorized_start(rt, call, tool)


async def _authorized_start(rt: Runtime, call: Call, tool: Tool) -> Pending | None:
    refusal = ceiling_refusal(rt, call, tool)
    if refusal is not None and (call.decision == "allow" or call.approval is not None):
        await close(rt, call, refusal, origin="denied", actor=HOST)
        return None
    if call.decision == "allow":
        return await _run(rt, call, tool)
    if call.decision == "deny":
        await close(rt, call, denied_text(call), origin="denied", actor=HOST)
        return None
    approval = call.approval
    if call.decision != "ask":
        return None
    if approval is None or (
        approval.state != "open" and (why := decision_refusal(rt, approval)) is not None
    ):
        if approval is not None:
            log.warning(
                "call %s: the %s decision is not accepted (%s)", call.call_id, approval.state, why
            )
        challenge_id, drafts = open_approval(rt, call)
        await rt.writer.append(drafts)
        return Pending("approval", challenge_id)
    if approval.state == "granted":
        return await _run(rt, call, tool)
    if approval.state == "denied":
        text = f"denied by approver: {approval.reason or 'no reason given'}"
        await close(rt, call, text, origin="denied", actor=HOST)
        return None
    if approval.expires_at <= rt.now():
        await close(rt, call, EXPIRED, origin="denied", actor=HOST)
        return None
    if ("approval", approval.challenge_id) not in rt.fold.parks:
        data: ParkedData = {
            "address": {"id": approval.challenge_id, "kind": "approval"},
            "expires_at": approval.expires_at,
            "reason": "awaiting_approval",
        }
        await rt.writer.append([draft("parked", data, rt.actor())])
    return Pending("approval", approval.challenge_id)


async def _run(rt: Runtime, call: Call, tool: Tool) -> Pending | None:
    """Dispatch a call for the first time; one left in doubt is settled at once. A question
    parks the run instead, a final_output candidate is judged instead, a handoff is carried
    out instead."""
    if call.name == ASK_USER:
        return await _park_on_question(rt, call)
    if is_handoff(rt.fold, call.name):
        await hand_off(rt, call)
        return None
    if call.name == SPAWN_AGENT:
        return await run_spawn(rt, call.call_id, SpawnAgent.model_validate(call.input))
    if is_candidate(rt.fold, call.name):
        await structured.judge(rt, call)
        return None
    if isinstance(await dispatch(rt, call, tool), InDoubt) and await settle_until_closed(rt, call):
        return pending_for(rt, "effect", call.effect_key)
    return None


async def close_expired_questions(rt: Runtime) -> None:
    """A question whose park expired with no answer recorded is closed, one append per
    question: ``tool_result{is_error, not_executed, preview: "no answer"}`` and the park's
    ``resumed``; the turn then goes on. Expiry is never implicit: until this is recorded, a late
    answer is still taken."""
    fold = rt.fold
    for (kind, call_id), address in list(fold.parks.items()):
        park = parked_event(fold, address) if kind == "input" else None
        expires_at = data_of(park, "parked").get("expires_at") if park is not None else None
        if expires_at is None or expires_at > rt.now():
            continue
        result = tool_result_data(call_id, NO_ANSWER, origin="not_executed", is_error=True)
        await rt.writer.append([
            draft("tool_result", result, HOST),
            draft("resumed", resumed_data(fold, address), HOST),
        ])


async def _park_on_question(rt: Runtime, call: Call) -> Pending | None:
    """The park an allowed ask_user call puts the run in (recorded once). A recorded call whose
    input can't be asked (an older or foreign writer's) is closed ``not_executed`` instead."""
    problem = input_problem(call.input)
    if problem is not None:
        await close(rt, call, f"invalid input: {problem}", origin="not_executed", actor=HOST)
        return None
    if ("input", call.call_id) not in rt.fold.parks:
        data: ParkedData = {
            "address": {"id": call.call_id, "kind": "input"},
            "expires_at": rt.now() + QUESTION_TTL_MS,
            "reason": "awaiting_input",
        }
        await rt.writer.append([draft("parked", data, HOST)])
    return Pending("input", call.call_id)


def _error_result(call: Call, text: str, origin: ToolResultDataOrigin) -> Draft:
    return draft(
        "tool_result", tool_result_data(call.call_id, text, origin=origin, is_error=True), HOST
    )
