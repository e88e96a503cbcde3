"""The open turn, read and ended: what the model last said, whether it asked for tools, and the
drafts that end a turn (``turn_completed`` for an error, a carried-out cancel) or record a
Ctrl-C as the durable cancel barrier. Each ending returns the run's outcome as a value.
"""

from __future__ import annotations

from typing import Any

from threads.log.fold import Fold, ParkKind
from threads.log.lines import Draft
from threads.run.drafts import HOST
from threads.run.park_info import effect_park_detail, parked_event
from threads.run.queued_controls import apply_queued_cancels
from threads.run.results import Cancelled, ErrorInfo, Failed, Parked, ParkReason, Pending
from threads.run.runtime import Runtime

PARK_REASONS: dict[str, ParkReason] = {
    "approval": "awaiting_approval",
    "effect": "effect_unknown",
    "input": "awaiting_input",
}
CHILD_REASONS: dict[str, ParkReason] = {r: r for r in PARK_REASONS.values()}
CODED_ERRORS = ("transport_fence_unsupported", "content_unsupported", "continuation_unsupported")


def last_text(fold: Fold) -> str:
    if not fold.responses:
        return ""
    return "".join(
        p.get("text", "") for p in fold.responses[-1]["content"] if p.get("type") == "text"
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
    reason = park.data["reason"] if park is not None else None
    return CHILD_REASONS.get(str(reason), "effect_unknown")


async def honour_cancel_request(rt: Runtime, *, queued: bool = True) -> None:
    """Record a Ctrl-C (``run_sync``) as the durable ``cancel_requested`` barrier, or (unless
    ``queued`` is False) a cancel another process queued for this thread while this run held
    it."""
    turn = rt.fold.turn
    if rt.cancel.wanted and turn is not None and turn.cancel_event is None:
        actor = {"kind": "user", "principal": rt.principal.to_wire()}
        data = {"reason": "interrupted (Ctrl-C)", "scope": "turn"}
        await rt.writer.append([Draft("cancel_requested", data, actor)])
        return
    if queued:
        await apply_queued_cancels(rt)


async def finish_cancelled(rt: Runtime) -> Cancelled:
    turn = rt.fold.turn
    assert turn is not None
    assert turn.cancel_event is not None
    await rt.writer.append(
        [
            Draft("cancelled", {"request_event_id": turn.cancel_event.event_id}, HOST),
            Draft("turn_completed", {"reason": "cancelled"}, HOST),
        ]
    )
    return Cancelled(rt.thread)


async def fail_turn(rt: Runtime, code: str, message: str, reason: str = "error") -> Failed:
    data: dict[str, Any] = {"reason": reason}
    if reason == "error" and code in CODED_ERRORS:
        data["code"] = code
    if rt.fold.turn is not None and rt.fold.open_attempt is None:
        await rt.writer.append([Draft("turn_completed", data, HOST)])
    return Failed(rt.thread, ErrorInfo(code, message))
