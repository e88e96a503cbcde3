"""The open turn, read and ended: what the model last said, whether it asked for tools, and the
drafts that end a turn (``turn_completed`` for an error, a carried-out cancel) or record a
Ctrl-C as the durable cancel barrier. Each ending returns the run's outcome as a value, and a
later run with nothing to do returns the same outcome read back from the recorded ending
(``recorded_ending``): the result and the log never disagree on how a turn ended.
"""

from __future__ import annotations

from typing import TypeGuard, get_args, get_type_hints

from threads.log.fold import Fold, ParkKind
from threads.log.vocabulary import (
    CancelRequestedData,
    TurnCompletedData,
    TurnCompletedDataCode,
    TurnCompletedDataReason,
    data_of,
    draft,
)
from threads.run.drafts import HOST
from threads.run.park_info import effect_park_detail, parked_event
from threads.run.queued_controls import apply_queued_cancels
from threads.run.results import (
    Cancelled,
    Completed,
    ErrorInfo,
    Failed,
    Parked,
    ParkReason,
    Pending,
    RunResult,
)
from threads.run.runtime import Runtime

PARK_REASONS: dict[str, ParkReason] = {
    "approval": "awaiting_approval",
    "effect": "effect_unknown",
    "input": "awaiting_input",
}
# The codes a turn_completed{error} may carry (the schema's, through the generated vocabulary).
CODED_ERRORS: tuple[str, ...] = get_args(get_type_hints(TurnCompletedData)["code"])
UNCODED = "model_error"  # a turn that ended error without a code, as a run's result reads it
FAILED_ENDINGS = ("context_exhausted", "model_unavailable", "output_invalid")
CHILD_REASONS: dict[str, ParkReason] = {r: r for r in PARK_REASONS.values()}


def last_text(fold: Fold) -> str:
    if not fold.responses:
        return ""
    return "".join(
        p["text"] for p in fold.responses[-1]["content"] if p["type"] == "text"
    )


def answered(fold: Fold) -> bool:
    """The last transcript item is a model reply that asked for no tool."""
    if not fold.transcript or fold.transcript[-1][0] != "assistant":
        return False
    return not any(part.get("type") == "tool_use" for part in fold.responses[-1]["content"])


def last_stop(fold: Fold) -> str:
    return str(fold.responses[-1]["stop_reason"]) if fold.responses else "end_turn"


def pending_for(rt: Runtime, kind: ParkKind, ident: str) -> Pending:
    """What the run waits on; an effect carries the detail an operator needs to resolve it."""
    if kind != "effect":
        return Pending(kind, ident)
    call = next((c for c in rt.fold.calls.values() if c.effect_key == ident), None)
    if call is None:
        return Pending(kind, ident)
    tool = rt.spec.tool_named(call.name)
    detail = effect_park_detail(rt.fold, call, tool, rt.now(), rt.writer.gone_epochs())
    return Pending(kind, ident, detail)


def parked_result(rt: Runtime) -> Parked:
    pending = [pending_for(rt, kind, ident) for kind, ident in rt.fold.parks]
    return Parked(rt.thread, park_reason(rt.fold, pending[0]), pending)


def park_reason(fold: Fold, pending: Pending) -> ParkReason:
    """Why a run parked on ``pending``: by its kind, or for a child, the child's own reason
    (its parent's ``parked`` records it)."""
    if pending.kind != "child":
        return PARK_REASONS.get(pending.kind, "effect_unknown")
    park = parked_event(fold, {"id": pending.id, "kind": "child"})
    reason = data_of(park, "parked")["reason"] if park is not None else None
    return CHILD_REASONS.get(str(reason), "effect_unknown")


async def honour_cancel_request(rt: Runtime, *, queued: bool = True) -> None:
    """Record a Ctrl-C (``run_sync``) as the durable ``cancel_requested`` barrier, or (unless
    ``queued`` is False) a cancel another process queued for this thread while this run held
    it."""
    turn = rt.fold.turn
    if rt.cancel.wanted and turn is not None and turn.cancel_event is None:
        actor = rt.principal.actor()
        data: CancelRequestedData = {"reason": "interrupted (Ctrl-C)", "scope": "turn"}
        await rt.writer.append([draft("cancel_requested", data, actor)])
        return
    if queued:
        await apply_queued_cancels(rt)


async def finish_cancelled(rt: Runtime) -> Cancelled:
    turn = rt.fold.turn
    assert turn is not None
    assert turn.cancel_event is not None
    await rt.writer.append(
        [
            draft("cancelled", {"request_event_id": turn.cancel_event.event_id}, HOST),
            draft("turn_completed", {"reason": "cancelled"}, HOST),
        ]
    )
    return Cancelled(rt.thread)


async def fail_turn(
    rt: Runtime, code: str, message: str, reason: TurnCompletedDataReason = "error"
) -> Failed:
    """End the open turn ``reason`` and return the run's ``Failed``; the two agree. For
    ``reason: error`` the ending records ``code`` when the format has it (``CODED_ERRORS``);
    any other code is reported as ``model_error`` (what a turn that ended ``error`` without a
    code reads as, ``recorded_ending``), its own code kept at the head of the message."""
    data: TurnCompletedData = {"reason": reason}
    if reason == "error":
        if _coded(code):
            data["code"] = code
        elif code != UNCODED:
            code, message = UNCODED, f"{code}: {message}"
    if rt.fold.turn is not None and rt.fold.open_attempt is None:
        await rt.writer.append([draft("turn_completed", data, HOST)])
    return Failed(rt.thread, ErrorInfo(code, message))


def _coded(code: str) -> TypeGuard[TurnCompletedDataCode]:
    return code in CODED_ERRORS


def recorded_ending(rt: Runtime) -> RunResult:
    """What a run that found no turn to drive and no input returns: ``Failed`` when the last
    turn failed, with the code its recorded ending stands for (``failed_code``), never a
    success for a failed turn; else ``Completed`` with the last reply's text (nothing was left
    to do: a cancelled turn's cancel was carried out, an exhausted budget was recorded)."""
    fold = rt.fold
    for event in reversed(fold.events):
        if event.type != "turn_completed":
            continue
        ending = data_of(event, "turn_completed")
        code = failed_code(ending)
        if code is not None:
            return Failed(rt.thread, ErrorInfo(
                code, f"the thread's last turn ended {ending['reason']} (seq {event.seq}); run"
                " it with a new input to start another turn", event.seq,
            ))
        break
    return Completed(rt.thread, last_text(fold))


def failed_code(ending: TurnCompletedData) -> str | None:
    """The code of the ``Failed`` a turn's recorded ending stands for, or None when the turn
    did not fail: ``error`` gives its code (``model_error`` without one), ``context_exhausted``,
    ``model_unavailable`` and ``output_invalid`` give themselves."""
    reason = ending["reason"]
    if reason == "error":
        return ending.get("code", UNCODED)
    return reason if reason in FAILED_ENDINGS else None
