"""Cancel over a subagent tree: a cancel of a thread reaches every unfinished descendant.

A thread's own cancel is its ``cancel_requested``; then each child it spawned that has no
``agent_finished`` gets ``cancel_requested{scope: tree, reason: "ancestor cancelled"}`` (actor
host, with the canceller's principal), and so on down, whether the child's turn is open or
closed. A child already barred gets nothing new, a finished one nothing at all, and a child
whose thread was never created is never started (its parent's run records it cancelled).
A child another process is running now is skipped here: the parent's run bars it before it runs
it again (``ChildRun.cancelled_by``).
"""

from __future__ import annotations

from threads.errors import NotFoundError, StoreError
from threads.log.event_types import (
    Actor,
)
from threads.log.event_types import (
    Principal as WirePrincipal,
)
from threads.log.fold import Fold
from threads.log.fold.features import CHILD_RUNNING
from threads.log.lines import Event
from threads.log.vocabulary import (
    CancelRequestedData,
    data_of,
    draft,
)
from threads.run.control import control_writer
from threads.store.protocol import Store

TREE_REASON = "ancestor cancelled"


def barred(fold: Fold) -> bool:
    """The thread already carries a barrier that stops it: a thread cancel, one on its open
    turn, or (no turn open) a thread or tree cancel recorded earlier."""
    if fold.thread_cancelled:
        return True
    if fold.turn is not None:
        return fold.turn.cancel_event is not None
    return fold.wakes.cancel_seq > 0


def barrier_in_force(fold: Fold) -> Event | None:
    """The ``cancel_requested`` a new cancel would only repeat, if there is one: the open
    turn's barrier; with no turn open, the last thread or tree barrier when it covers every
    child that has not reported, else the thread's latest word when it is a cancel (a thread
    or tree barrier recorded after the last turn ended, or that turn's own barrier when it
    ended cancelled). None when a cancel would record something new, or finds nothing."""
    if fold.turn is not None:
        return fold.turn.cancel_event
    uncovered = unreported_uncovered(fold)
    if uncovered:
        return None
    ended_cancelled = False
    for event in reversed(fold.events):
        if event.type == "cancel_requested" and (
            event.seq == fold.wakes.cancel_seq or ended_cancelled
        ):
            return event
        if event.type == "turn_completed" and uncovered is None:
            if ended_cancelled or data_of(event, "turn_completed")["reason"] != "cancelled":
                return None
            ended_cancelled = True
    return None


def unreported_spawns(fold: Fold) -> list[Event]:
    """The ``agent_spawned`` events of the thread's children that have not reported."""
    unreported = {c.child_thread_id for c in fold.features.children.values()
                  if c.status == CHILD_RUNNING}
    return [e for e in fold.events if e.type == "agent_spawned"
            and data_of(e, "agent_spawned")["child_thread_id"] in unreported]


def unreported_uncovered(fold: Fold) -> bool | None:
    """With no turn open: None when every child has reported (nothing to cancel); else whether
    a child that has not reported was spawned after the thread's last cancel (a new
    ``cancel_requested{scope: thread}`` is needed; False: one covers them all already)."""
    spawns = unreported_spawns(fold)
    if not spawns:
        return None
    return any(e.seq > fold.wakes.cancel_seq for e in spawns)


async def bar(
    store: Store, branch_id: str, principal: WirePrincipal, *, reason: str = TREE_REASON
) -> Fold:
    """Append the tree cancel to a child's branch unless it is barred already; its fold."""
    async with control_writer(store, branch_id) as writer:
        if not barred(writer.fold):
            data: CancelRequestedData = {"reason": reason, "scope": "tree"}
            actor: Actor = {"kind": "host", "principal": principal}
            await writer.append([draft("cancel_requested", data, actor)])
        return writer.fold


async def cancel_descendants(store: Store, fold: Fold, principal: WirePrincipal) -> None:
    """Bar every unfinished child of the thread ``fold`` is of, then theirs, recursively."""
    for child in fold.features.children.values():
        if child.status != CHILD_RUNNING:
            continue
        try:
            branch = await store.root_branch(child.child_thread_id)
            child_fold = await bar(store, branch.branch_id, principal)
        except NotFoundError:
            continue  # never created: never started
        except StoreError as exc:
            if exc.code != "branch_busy":
                raise
            continue  # a run holds it: its parent's run bars it before running it again
        await cancel_descendants(store, child_fold, principal)
