"""Forking a thread at a snapshot: a child branch that shares its parent's log up to the fork
point and goes on from there with its own sandbox.

Only a quiescent, unexpired ``snapshot`` event is a fork point (``no_snapshot_boundary``,
``snapshot_expired`` otherwise). The child is its own header plus a ``fork`` event at
``at_seq + 1`` naming the parent and the hash of the parent's snapshot line; parent rows are
referenced, never copied, and the parent is never written. The snapshot is restored first, into
a new sandbox, through the caller's ``restore`` capability; the child and its ``fork`` event are
one transaction, so a fork that fails (or is killed) leaves no child.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Literal

from threads.errors import LogError, NotFound
from threads.log.ids import uuid7
from threads.log.lines import first_event, make_header
from threads.store.protocol import BranchInfo, Store

Restore = Callable[[dict[str, Any]], Awaitable[str]]


async def fork_at(
    store: Store,
    parent: BranchInfo,
    at_event_id: str,
    restore: Restore,
    *,
    new_branch_id: str | None = None,
    knowledge_policy: Literal["pinned", "current"] = "pinned",
) -> str:
    """Create the child branch; returns its id. ``restore(snapshot_data)`` restores the
    snapshot into a new sandbox and returns that sandbox's id."""
    now = store.clock.now_ms()
    chain = await store.read_chain(parent.branch_id)
    fold = chain.fold(now)
    event = next((e for e in chain.events if e.event_id == at_event_id), None)
    if event is None:
        raise NotFound(f"no event {at_event_id} on branch {parent.branch_id}")
    if event.type != "snapshot" or event.seq not in {seq for seq, _, _ in fold.snapshots}:
        raise LogError(
            "no_snapshot_boundary",
            "a fork starts only at a quiescent snapshot; list them with thread.fork_points()",
            seq=event.seq,
        )
    expires_at = event.data["expires_at"]
    if expires_at is not None and expires_at <= now:
        raise LogError(
            "snapshot_expired", "this snapshot expired; fork at a newer one", seq=event.seq
        )
    sandbox_id = await restore(event.data)
    header = make_header(parent.thread_id, new_branch_id or uuid7(now), now)
    data = {
        "at_hash": event.hash,
        "knowledge_policy": knowledge_policy,
        "parent_branch_id": parent.branch_id,
        "reason": "snapshot",
        "sandbox_id": sandbox_id,
    }
    fork = first_event(header, "fork", data, {"kind": "host"}, seq=event.seq + 1, epoch=event.epoch)
    # One transaction: a crash leaves either no child or a child with its fork event.
    await store.create_branch(
        header,
        tenant_id=parent.tenant_id,
        parent_branch_id=parent.branch_id,
        fork_at_seq=event.seq,
        events=[fork],
    )
    return header.branch_id
