"""Forking a thread at a snapshot: a child branch that shares its parent's log up to the fork
point and goes on from there with its own sandbox.

Only a quiescent, unexpired ``snapshot`` event is a fork point (``no_snapshot_boundary``,
``snapshot_expired`` otherwise). The child is its own header plus a ``fork`` event at
``at_seq + 1`` naming the parent and the hash of the parent's snapshot line; parent rows are
referenced, never copied, and the parent is never written. The snapshot is restored first, into
a new sandbox, through the caller's ``restore`` capability; a fork that fails leaves no child,
and a restore's ``SandboxError`` (``resource_unknown`` among them) names the fork point's seq.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from typing import Literal, cast

from threads.errors import ConfigError, LogError, NotFoundError, StoreError
from threads.log.ids import uuid7
from threads.log.lines import make_header
from threads.log.vocabulary import ForkData, data_of, draft
from threads.log.vocabulary import SnapshotData as WireSnapshot
from threads.run.drafts import HOST
from threads.run.writer import BranchWriter
from threads.sandbox.ledger import Owner
from threads.sandbox.protocol import (
    Sandbox,
    SandboxContext,
    SandboxError,
    SandboxErrorCode,
    snapshot_data,
)
from threads.store.capabilities import resources_of
from threads.store.protocol import BranchInfo, Store

Restore = Callable[[WireSnapshot], Awaitable[str]]
FORK_LEASE_TTL_MS = 10_000


async def fork_at(
    store: Store,
    parent: BranchInfo,
    at_event_id: str,
    restore: Restore | Sandbox,
    *,
    new_branch_id: str | None = None,
    knowledge_policy: Literal["pinned", "current"] = "pinned",
) -> str:
    """Create the child branch; returns its id. ``restore`` is the sandbox provider the
    snapshot is restored with (ledgered, owned by the child), or a function that restores
    ``snapshot_data`` itself and returns the new sandbox's id."""
    now = store.clock.now_ms()
    chain = await store.read_chain(parent.branch_id)
    fold = chain.fold(now)
    event = next((e for e in chain.events if e.event_id == at_event_id), None)
    if event is None:
        raise NotFoundError(f"no event {at_event_id} on branch {parent.branch_id}")
    if event.type != "snapshot" or event.seq not in {seq for seq, _, _ in fold.snapshots}:
        raise LogError(
            "no_snapshot_boundary",
            "a fork starts only at a quiescent snapshot; list them with thread.fork_points()",
            seq=event.seq,
        )
    snapshot = data_of(event, "snapshot")
    expires_at = snapshot["expires_at"]
    if expires_at is not None and expires_at <= now:
        raise LogError(
            "snapshot_expired", "this snapshot expired; fork at a newer one", seq=event.seq
        )
    if isinstance(restore, Sandbox) and restore.info.provider != snapshot["provider"]:
        raise ConfigError(
            "invalid_config",
            f"the snapshot was taken by the {snapshot['provider']!r} sandbox provider; fork"
            f" it with that provider, not {restore.info.provider!r}",
        )
    header = make_header(parent.thread_id, new_branch_id or uuid7(now), now)
    await store.create_branch(
        header,
        tenant_id=parent.tenant_id,
        parent_branch_id=parent.branch_id,
        fork_at_seq=event.seq,
        state="forking",
    )
    lease = await store.acquire_lease(header.branch_id, uuid7(now), FORK_LEASE_TTL_MS)
    writer = BranchWriter(
        store, lease, (await store.read_chain(header.branch_id)).fold(now),
        ttl_ms=FORK_LEASE_TTL_MS,
    )
    writer.start_renewal()  # a slow restore keeps the child's lease, so no one gives it up
    try:
        try:
            sandbox_id = await _restore(store, parent, writer, restore, snapshot)
        except SandboxError as exc:
            # The failure is the fork point's: name its seq (a lost restore the ledger can't
            # settle is ``resource_unknown`` at the snapshot it restored).
            raise SandboxError(cast(SandboxErrorCode, exc.code), exc.message,
                               seq=event.seq) from exc
        data: ForkData = {
            "at_hash": event.hash,
            "knowledge_policy": knowledge_policy,
            "parent_branch_id": parent.branch_id,
            "reason": "snapshot",
            "sandbox_id": sandbox_id,
        }
        # One transaction: the fork event, and the child becoming ready. A crash before it
        # leaves a ``forking`` child, which ``abandon_interrupted_forks`` fails once its lease
        # lapsed (gc then releases its sandbox); never a ready child without its fork event.
        await writer.append([draft("fork", data, HOST)], finishes_fork=True)
    except BaseException:
        # Never resume an interrupted fork: the child is marked failed and never runs, and
        # gc releases whatever sandbox it was given.
        with contextlib.suppress(StoreError):
            await store.set_branch_state(header.branch_id, "fork_failed")
        raise
    finally:
        await writer.close()  # hands the child's lease back
    return header.branch_id


async def _restore(
    store: Store, parent: BranchInfo, writer: BranchWriter, restore: Restore | Sandbox,
    snapshot: WireSnapshot,
) -> str:
    if not isinstance(restore, Sandbox):
        return await restore(snapshot)
    owner = Owner(
        resources_of(store), restore, store.clock, parent.tenant_id, lambda: writer.lease,
        SandboxContext(writer.check),
    )
    session = await owner.restore(snapshot_data(snapshot))
    return session.id


async def abandon_interrupted_forks(store: Store) -> list[str]:
    """Fail every child a crash left ``forking`` (its lease lapsed or never taken): it has no
    fork event and never runs, and the sandbox it was restoring into becomes gc's. Returns the
    branch ids it failed. A fork still restoring (its lease renewed) is left alone."""
    failed: list[str] = []
    for root in await store.list_threads():
        for branch in await store.list_branches(root.thread_id):
            if branch.state != "forking":
                continue
            lease = await store.read_lease(branch.branch_id)
            if lease is not None and lease.live:
                continue
            await store.set_branch_state(branch.branch_id, "fork_failed")
            failed.append(branch.branch_id)
    return failed
