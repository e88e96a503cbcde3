"""The holder's side of control items (``threads.store.control_items``): at each step boundary
the run applies the cancels other processes queued for its thread while it held the lease.

A queued cancel becomes the durable ``cancel_requested`` barrier (its actor the principal who
asked), appended together with the item's consumption in one transaction. An item that finds
nothing to cancel (the turn it was queued for already ended or already carries a barrier) is
consumed without an append, so it never cancels a later turn; so is one whose principal is not
a valid principal (another writer's malformed row never stops a run).

A run looks again only once its log moved (a reply, a result, any event) since it last looked:
once per step boundary, not at every check the loop makes between two steps. The store reads
the inbox inside the transaction of the append that moved the log, so that look costs no round
trip; what another process queues after that commit is seen at the next boundary. A look after
a tool ran (its result not yet written) reads the store: a cancel queued during the call must
stop the next model request.
"""

from __future__ import annotations

from typing import Any

from threads.principal import Principal
from threads.run.drafts import Draft
from threads.run.runtime import Runtime
from threads.store.capabilities import controls_of

QUEUED_REASON = "cancel queued while another process ran the thread"


async def apply_queued_cancels(rt: Runtime) -> None:
    controls = controls_of(rt.writer.store)
    if controls is None:
        return
    if rt.cancel.queued_checked_at == rt.fold.last_seq:
        return  # nothing happened since the last look: this is the same step boundary
    rt.cancel.queued_checked_at = rt.fold.last_seq
    as_of = (rt.writer.branch_id, rt.fold.last_seq)
    for item in await controls.pending_controls(rt.writer.thread_id, as_of=as_of):
        if item.command != "cancel":
            continue  # stop_when_idle is not applied by this loop; it waits for one that does
        turn = rt.fold.turn
        if (
            turn is None
            or turn.cancel_event is not None
            or item.received_at < turn.input_event.time  # queued for a turn that ended
            or not _valid_principal(item.principal)  # not ours to record: dropped, never fatal
        ):
            await controls.consume_control(item.inbox_id, rt.fold.last_seq)
            continue
        data = {"reason": QUEUED_REASON, "scope": "turn"}
        actor = {"kind": "user", "principal": item.principal}
        await rt.writer.append([Draft("cancel_requested", data, actor)], consumes=[item.inbox_id])


def _valid_principal(wire: dict[str, Any]) -> bool:
    try:
        return Principal.from_wire(wire).to_wire() == wire  # no other key either
    except (KeyError, TypeError, ValueError):
        return False
