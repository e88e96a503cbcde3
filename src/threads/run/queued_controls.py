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

Once its turn is over, or parked (on an approval, a question, a child or an effect), a run
still holds the thread while it waits for background subagents that have not reported
(``threads.run.background.settle``). It looks every ``CANCEL_POLL_S`` then too
(``wait_for_waiting_cancel``), and once a child ends, and applies a cancel it finds as
``Thread.cancel`` on a thread no run holds would record it (``apply_waiting_cancel``). With no
turn open: one queued after one of those children was spawned, recorded as
``cancel_requested{scope: thread}`` unless a barrier covers every unreported child already.
With the turn parked: one queued for that turn, recorded as its ``cancel_requested{scope:
turn}`` (the waiting run then carries it out at once, as the next run would have). Either way
every unfinished descendant no run holds is barred.
"""

from __future__ import annotations

import asyncio
from typing import Literal

from threads.errors import StoreError
from threads.log.json_types import JsonObject
from threads.log.vocabulary import (
    CancelRequestedData,
    draft,
)
from threads.principal import Principal
from threads.run.runtime import Runtime
from threads.run.tree_cancel import (
    cancel_descendants,
    unreported_spawns,
    unreported_uncovered,
)
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
        await _record(rt, item, "turn")


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


async def waiting_cancel_item(rt: Runtime) -> ControlItem | None:
    """For a run waiting for its background children (fresh read): with its turn parked, the
    first cancel queued for that turn; with no turn open and a child unreported, the first
    cancel queued since one of the unreported children was spawned; by a valid principal.
    Else None."""
    controls = controls_of(rt.writer.store)
    if controls is None:
        return None
    fold = rt.fold
    if fold.turn is not None:
        if fold.turn.cancel_event is not None:
            return None  # barred already: the run carries that barrier out
        items = await controls.pending_controls(rt.writer.thread_id)
        return next((item for item in items
                     if item.command == "cancel" and _cancels_turn(rt, item)), None)
    spawns = unreported_spawns(fold)
    if not spawns:
        return None
    since = min(e.time for e in spawns)
    items = await controls.pending_controls(rt.writer.thread_id)
    return next((item for item in items if item.command == "cancel"
                 and item.received_at >= since and _valid_principal(item.principal)), None)


async def wait_for_waiting_cancel(rt: Runtime) -> ControlItem:
    """Look every ``CANCEL_POLL_S`` until ``waiting_cancel_item`` finds one; an unreachable
    store is looked at again. Runs until cancelled by its caller otherwise."""
    while True:
        await asyncio.sleep(CANCEL_POLL_S)
        try:
            item = await waiting_cancel_item(rt)
        except StoreError:
            continue
        if item is not None:
            return item


async def apply_waiting_cancel(rt: Runtime, item: ControlItem) -> None:
    """Record the queued cancel (actor the principal who asked) in the append that consumes
    the item: on the parked turn, its barrier (``scope: turn``); with no turn open, ``scope:
    thread``, or the item consumed alone when a barrier already covers every unreported child.
    Then bar the unfinished descendants no run holds (the waiting run bars those it runs
    itself as it stops them)."""
    controls = controls_of(rt.writer.store)
    assert controls is not None  # ``waiting_cancel_item`` found the item
    principal = Principal.from_wire(item.principal)  # valid: ``waiting_cancel_item``
    if rt.fold.turn is not None:
        await _record(rt, item, "turn")
    elif unreported_uncovered(rt.fold):
        await _record(rt, item, "thread")
    else:
        await controls.consume_control(item.inbox_id, rt.fold.last_seq)
    await cancel_descendants(rt.writer.store, rt.fold, principal.to_wire())


async def _record(rt: Runtime, item: ControlItem, scope: Literal["turn", "thread"]) -> None:
    """The item's ``cancel_requested`` (actor the principal who queued it, a valid one), in
    the append that consumes it."""
    data: CancelRequestedData = {"reason": QUEUED_REASON, "scope": scope}
    actor = Principal.from_wire(item.principal).actor()
    await rt.writer.append([draft("cancel_requested", data, actor)], consumes=[item.inbox_id])


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
