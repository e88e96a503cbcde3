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
trip; what another process queues after that commit is seen at the next boundary. A cancel
queued while a tool ran must stop the next model request: that look (``cancel_queued``) is made
once the request's ``model_request`` (with the tool's result) commits, from that commit's own
read, and a request it stops is abandoned unsent. While a tool runs, ``watch_for_cancel`` looks
every ``CANCEL_POLL_S`` and sets the tool's ``ctx.cancelled`` when a cancel is queued, so a tool
that watches it (the sandbox tools do) stops instead of running to its own end.
"""

from __future__ import annotations

import asyncio

from threads.errors import StoreError
from threads.log.json_types import JsonObject
from threads.log.vocabulary import (
    CancelRequestedData,
    draft,
)
from threads.principal import Principal
from threads.run.runtime import Runtime
from threads.store.capabilities import controls_of
from threads.store.control_items import ControlItem, ControlItems

QUEUED_REASON = "cancel queued while another process ran the thread"
CANCEL_POLL_S = 1.0  # how often a running tool's run looks for a cancel queued elsewhere


async def apply_queued_cancels(rt: Runtime) -> None:
    controls = controls_of(rt.writer.store)
    if controls is None:
        return
    if rt.cancel.queued_checked_at == rt.fold.last_seq:
        return  # nothing happened since the last look: this is the same step boundary
    rt.cancel.queued_checked_at = rt.fold.last_seq
    for item in await _pending_at_head(rt, controls):
        if item.command != "cancel":
            continue  # stop_when_idle is not applied by this loop; it waits for one that does
        if not _cancels_turn(rt, item):
            await controls.consume_control(item.inbox_id, rt.fold.last_seq)
            continue
        data: CancelRequestedData = {"reason": QUEUED_REASON, "scope": "turn"}
        actor = Principal.from_wire(item.principal).actor()  # valid: ``_cancels_turn``
        await rt.writer.append([draft("cancel_requested", data, actor)], consumes=[item.inbox_id])


async def cancel_queued(rt: Runtime) -> bool:
    """Whether a cancel another process queued would cancel the open turn, as of the log's
    head (the look ``apply_queued_cancels`` makes next applies it); nothing is consumed."""
    controls = controls_of(rt.writer.store)
    if controls is None:
        return False
    items = await _pending_at_head(rt, controls)
    return any(item.command == "cancel" and _cancels_turn(rt, item) for item in items)


async def watch_for_cancel(rt: Runtime, cancelled: asyncio.Event) -> None:
    """While a tool runs: set ``cancelled`` (the tool's ``ctx.cancelled``) once another process
    queues a cancel for the open turn, looking every ``CANCEL_POLL_S`` with a fresh read (the
    log's head does not move while the tool runs). Runs until cancelled by its caller."""
    controls = controls_of(rt.writer.store)
    if controls is None:
        return
    while not cancelled.is_set():
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            items = await controls.pending_controls(rt.writer.thread_id)
        except StoreError:
            continue  # an unreachable store: the next look tries again
        if any(item.command == "cancel" and _cancels_turn(rt, item) for item in items):
            cancelled.set()


async def _pending_at_head(rt: Runtime, controls: ControlItems) -> list[ControlItem]:
    """The thread's pending items as of the log's head: what the append that made it read, when
    the store noted that, else a read."""
    as_of = (rt.writer.branch_id, rt.fold.last_seq)
    return await controls.pending_controls(rt.writer.thread_id, as_of=as_of)


def _cancels_turn(rt: Runtime, item: ControlItem) -> bool:
    """A cancel item is recorded only against the turn it was queued for, once, and only with
    a valid principal as its actor."""
    turn = rt.fold.turn
    return not (
        turn is None
        or turn.cancel_event is not None
        or item.received_at < turn.input_event.time  # queued for a turn that ended
        or not _valid_principal(item.principal)  # not ours to record: dropped, never fatal
    )


def _valid_principal(wire: JsonObject) -> bool:
    try:
        return Principal.from_wire(wire).to_wire() == wire  # no other key either
    except (KeyError, TypeError, ValueError):
        return False
