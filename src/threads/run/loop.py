"""The turn loop: decide the next step from the reduced log, make its intent durable, act, make
its outcome durable, repeat. Sequencing only: each step is a function of the ``Runtime`` in its
own module, and returns what it decided.

user_input → model_request (Render v1 artifact, durable before dispatch) → model →
model_response (+ tool_call / permission_decision for each call, in part order) → per call, in
call order: a denied result, an approval challenge (parks), or effect_begin
(durable before execute, effectful classes only) → execute → effect_commit → tool_result → next
model_request → ... → turn_completed. Recovery (``threads.run.recovery``) is the same loop
started on a log whose tail is in doubt: it settles each in-doubt item first.
"""

from __future__ import annotations

import dataclasses

from threads.errors import StoreError
from threads.log.vocabulary import (
    LogRepairedData,
    UserInputDataSource,
    draft,
)
from threads.run import structured
from threads.run.background import record_ended, settle
from threads.run.calls import release_approval_parks, run_pending
from threads.run.compaction import serve_request, settle_answered
from threads.run.drafts import HOST
from threads.run.handoff import handed_off
from threads.run.model_step import model_step
from threads.run.recovery import recover
from threads.run.results import (
    BudgetExhausted,
    BudgetInfo,
    Cancelled,
    Completed,
    ErrorInfo,
    Failed,
    RunResult,
)
from threads.run.runtime import Runtime
from threads.run.spawn import adopt_background, resume_parked_children
from threads.run.stops import after_reply
from threads.run.turn import (
    answered,
    finish_cancelled,
    honour_cancel_request,
    last_text,
    parked_result,
    recorded_ending,
)
from threads.run.turn_open import TurnRequest, open_turn

LOST_BRANCH = ("stale_epoch", "seq_conflict", "branch_busy")
MISSING_BYTES = ("artifact_missing", "artifact_corrupt")


async def drive(
    rt: Runtime, input: str | None, *, recovering: bool, source: UserInputDataSource = "api"
) -> RunResult:
    """The run: repair, recover, continue the open turn, then open one for ``input`` (its
    ``user_input`` of ``source``); then wait for the background children it runs
    (``threads.run.background``)."""
    try:
        await _repair_torn_tail(rt)
        if rt.fold.features.handoff is not None:
            return await handed_off(rt, input)  # rule 26: nothing more happens here
        if recovering:
            stop = await recover(dataclasses.replace(rt, recovering=True))
            if isinstance(stop, Cancelled):
                # the turn's cancel is carried out: its background children are stopped now,
                # as the run that recorded the barrier would have (they run barred)
                await adopt_background(rt)
                return await settle(rt, stop, run_turn)
            if stop is not None:
                return stop
        await release_approval_parks(rt)  # expired, or cancelled
        await resume_parked_children(rt)
        if rt.fold.parks:
            return parked_result(rt)
        await adopt_background(rt)
        await settle_answered(rt)  # a summary a crash left recorded but not yet applied
        if rt.fold.compaction.requested is not None and rt.fold.turn is None:
            await serve_request(rt)  # an operator asked for it: before any new input
        if rt.fold.turn is not None:
            result = await run_turn(rt)
            if input is None or not isinstance(result, Completed):
                return await settle(rt, result, run_turn)
        if input is None:
            return await settle(rt, recorded_ending(rt), run_turn)
        request = TurnRequest(input, rt.principal, rt.run_budget, source=source)
        opened = await open_turn(rt.writer, rt.spec, request)
        if isinstance(opened, BudgetInfo):
            return await settle(rt, BudgetExhausted(rt.thread, opened), run_turn)
        return await settle(rt, await run_turn(rt), run_turn)
    except StoreError as exc:
        # A lost branch, or an artifact the log needs that the store lacks (a result to
        # materialize, ...): a coded outcome, nothing recorded; a later run tries again.
        if exc.code in LOST_BRANCH or exc.code in MISSING_BYTES:
            return Failed(rt.thread, ErrorInfo(exc.code, exc.message))
        raise
    finally:
        await rt.background.abandon()


async def run_turn(rt: Runtime) -> RunResult:
    """Drive the open turn until it ends, parks, or runs out of budget."""
    while True:
        await honour_cancel_request(rt)
        stop = await run_pending(rt)
        if stop is not None:
            return stop
        ended = await structured.after_calls(rt)
        if ended is not None:
            return ended
        # A Ctrl-C during a call: no further request. A cancel queued meanwhile is looked for
        # once the next model_request commits (model_step), by that commit's own inbox read.
        await honour_cancel_request(rt, queued=False)
        fold = rt.fold
        turn = fold.turn
        if turn is None:
            return Completed(rt.thread, last_text(fold))
        if turn.cancel_event is not None:
            return await finish_cancelled(rt)
        if answered(fold) and (ended := await after_reply(rt)) is not None:
            return ended
        await record_ended(rt)  # background children's ends: input to this turn
        outcome = await model_step(rt)
        if outcome is not None:
            return outcome


async def _repair_torn_tail(rt: Runtime) -> None:
    """An import that dropped a torn final chunk records it on the first writable open."""
    fold = rt.fold
    if rt.dropped_ref is None or any(e.type == "log_repaired" for e in fold.events):
        return
    at_offset = sum(len(e.line) + 1 for e in fold.events) + sum(
        len(h.line) + 1 for h in fold.segment_headers
    )
    data: LogRepairedData = {
        "at_offset": at_offset,
        "dropped_ref": rt.dropped_ref,
        "truncated_bytes": rt.dropped_ref["bytes"],
    }
    await rt.writer.append([draft("log_repaired", data, HOST)])
