"""What a store does on its connection, written once for every engine, as flows: generators that
yield each statement (``Query``) and are sent its answer (``Result``), ending with what the
caller gets. An engine's driver runs a flow inside the transaction its ``Access`` asks for:
SQLite's on its store thread (or in place), Postgres's on a pooled connection, awaiting each
statement. The decisions between statements are the shared ones of ``threads.store.rows``.

Invariant: a flow does no I/O of its own and never catches a database error, so it runs the
same under either driver; a statement that breaks a key or a constraint ends the flow with the
driver's ``ConstraintError`` (the caller names it), and anything else the driver's coded error.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from enum import Enum
from typing import Any, TypeVar

from threads.errors import NotFoundError, StoreError
from threads.log.lines import Event, Header
from threads.log.vocabulary import ArtifactRef
from threads.store import statements as sql
from threads.store.holder import succeeding
from threads.store.protocol import BranchInfo, Lease, LeaseState, Segment, StoredRow
from threads.store.receipts import RunReceipt, key_taken, receipt_from_row
from threads.store.rows import (
    branch_from_row,
    dropped_ref_text,
    event_rows,
    free_roots,
    next_epoch,
    require_free,
    require_live,
    same_segment,
    segment_head,
    stored_row,
)
from threads.store.snapshot_row import PUT as PUT_SNAPSHOT
from threads.store.snapshot_row import StoredSnapshot
from threads.store.statements import Dialect, Query, Result, Row

T = TypeVar("T")
Flow = Generator[Query, Result, T]
# The lease clock's reading for a statement (``{now}``), read when the statement is made, inside
# its transaction; None: the database's clock decides.
Now = Callable[[], int | None]


class Access(Enum):
    """The transaction a flow needs (each engine's driver decides how it gets it)."""

    READ = "read"  # a few rows a run reads between its steps
    SCAN = "scan"  # one read statement, or reads that need no common snapshot
    SNAPSHOT = "snapshot"  # reads that must all see one commit
    WRITE = "write"  # a write transaction, never repeated after a lost connection
    WRITE_AGAIN = "write_again"  # a write transaction that is safe to repeat
    STATEMENT = "statement"  # one write statement, in a transaction of its own


class ConstraintError(StoreError):
    """A statement broke a key or a constraint: the engine's integrity error, coded (a caller
    that knows what the key means names it better, as ``create_branch`` does)."""

    def __init__(self, detail: str) -> None:
        super().__init__(
            "invalid_argument",
            f"the store refused a write that breaks one of its keys or constraints ({detail});"
            " nothing of it was written",
        )


def rows(statement: str, *args: Any) -> Flow[list[Row]]:
    return (yield Query(statement, args)).rows


def one(statement: str, *args: Any) -> Flow[Row | None]:
    return (yield Query(statement, args)).one()


def changed(statement: str, *args: Any) -> Flow[int]:
    """The number of rows ``statement`` changed."""
    return (yield Query(statement, args)).rowcount


# ---- branches ------------------------------------------------------------------------------


def branch(branch_id: str) -> Flow[BranchInfo]:
    row = yield from one(sql.BRANCH, branch_id)
    if row is None:
        raise NotFoundError(f"no branch {branch_id} in this store")
    return branch_from_row(row)


def root(thread_id: str) -> Flow[BranchInfo]:
    row = yield from one(sql.ROOT, thread_id)
    if row is None:
        raise NotFoundError(f"no thread {thread_id} in this store")
    return branch_from_row(row)


def branches(statement: str, *args: Any) -> Flow[list[BranchInfo]]:
    return [branch_from_row(row) for row in (yield from rows(statement, *args))]


def free_threads(now: Now) -> Flow[list[BranchInfo]]:
    return free_roots((yield from rows(sql.FREE_ROOTS, now())))


def create_branch(
    header: Header,
    *,
    tenant_id: str,
    parent_branch_id: str | None,
    fork_at_seq: int | None,
    state: str,
    head: tuple[int, str],
    events: Sequence[Event],
    receipt: RunReceipt | None,
) -> Flow[None]:
    if parent_branch_id is None:
        yield Query(sql.INSERT_THREAD, (header.thread_id, tenant_id))
    yield Query(sql.INSERT_BRANCH, (
        header.branch_id, header.thread_id, tenant_id, parent_branch_id, fork_at_seq,
        header.line, state, *head, True, None,
    ))
    if events:
        yield Query(sql.INSERT_EVENTS, event_rows(header.branch_id, events), many=True)
    if receipt is not None:
        yield from insert_receipt(receipt)


def store_segment(
    dialect: Dialect,
    segment: Segment,
    *,
    tenant_id: str,
    parent_branch_id: str | None,
    head_verified: bool,
    dropped_ref: ArtifactRef | None,
    state: str,
    snapshots: Sequence[StoredSnapshot] = (),
) -> Flow[bool]:
    """Import one segment's exact bytes; False when an identical branch is stored already."""
    header = segment.header
    if dialect.locks:  # concurrent imports of one branch queue, so the loser compares
        yield Query(sql.ADVISORY_LOCK, (header.branch_id,))
    row = yield from one(sql.HEADER_LINE, header.branch_id)
    if row is not None:
        stored = yield from lines(header.branch_id, None)
        return same_segment(segment, bytes(row[0]), stored)
    if parent_branch_id is None:
        yield Query(sql.INSERT_THREAD_ONCE, (header.thread_id, tenant_id))
    owner = yield from one(sql.THREAD_TENANT, header.thread_id)
    if owner is not None and owner[0] != tenant_id:  # a schema without the tenant foreign key
        raise StoreError("forbidden", f"thread {header.thread_id} is another tenant's")
    yield Query(sql.INSERT_BRANCH, (
        header.branch_id, header.thread_id, tenant_id, parent_branch_id, segment.fork_at_seq,
        header.line, state, *segment_head(segment), head_verified, dropped_ref_text(dropped_ref),
    ))
    if segment.events:
        yield Query(sql.INSERT_EVENTS, event_rows(header.branch_id, segment.events), many=True)
    if snapshots:
        yield Query(PUT_SNAPSHOT, [row.row() for row in snapshots], many=True)
    return True


# ---- stored lines --------------------------------------------------------------------------


def lines(branch_id: str, through_seq: int | None) -> Flow[list[bytes]]:
    if through_seq is None:
        found = yield from rows(sql.LINES, branch_id)
    else:
        found = yield from rows(sql.LINES_THROUGH, branch_id, through_seq)
    return [bytes(line) for (line,) in found]


def stored_chain(
    branch_id: str,
) -> Flow[tuple[BranchInfo, list[tuple[BranchInfo, bytes, list[bytes]]]]]:
    """The resolved chain's stored bytes, segment by segment, without any check."""
    target = yield from branch(branch_id)
    lineage: list[tuple[BranchInfo, int | None]] = [(target, None)]
    while lineage[-1][0].parent_branch_id is not None:
        child = lineage[-1][0]
        assert child.parent_branch_id is not None
        lineage.append(((yield from branch(child.parent_branch_id)), child.fork_at_seq))
    stored = []
    for info, cut in reversed(lineage):
        row = yield from one(sql.HEADER_LINE, info.branch_id)
        assert row is not None
        stored.append((info, bytes(row[0]), (yield from lines(info.branch_id, cut))))
    return target, stored


def stored_rows(branch_id: str) -> Flow[list[StoredRow]]:
    return [stored_row(row) for row in (yield from rows(sql.ROWS, branch_id))]


# ---- leases --------------------------------------------------------------------------------


def lease_row(branch_id: str, now: Now, *, lock: bool) -> Flow[tuple[Row | None, int]]:
    """The lease row (holder_id, epoch, expires_at), and "now" as the lease clock reads it in
    the same statement, inside the transaction. No row: None, and the clock's reading when
    there is one (0 for the database's clock: a Postgres branch has its row from its first
    acquire on), which no lease passes."""
    at = now()
    row = yield from one(sql.LEASE_LOCKED if lock else sql.LEASE, at, branch_id)
    if row is None:
        return None, at or 0
    return row[:3], int(row[3])


def read_lease(branch_id: str, now: Now) -> Flow[LeaseState | None]:
    row, read_at = yield from lease_row(branch_id, now, lock=False)
    if row is None or row[0] == "":  # '' is the placeholder row a first acquire locks
        return None
    return LeaseState(branch_id, row[0], int(row[1]), int(row[2]), read_at)


def check_lease(lease: Lease, now: Now, *, lock: bool = False) -> Flow[None]:
    row, read_at = yield from lease_row(lease.branch_id, now, lock=lock)
    require_live(row, lease, read_at)


def chain_epoch(info: BranchInfo) -> Flow[int]:
    """The epoch of the last event on the branch's resolved chain (0 when it has none)."""
    row = yield from one(sql.LAST_EPOCH, info.branch_id)
    if row is not None:
        return int(row[0])
    if info.parent_branch_id is None:
        return 0
    row = yield from one(sql.LAST_EPOCH_THROUGH, info.parent_branch_id, info.fork_at_seq)
    return 0 if row is None else int(row[0])


def acquire(
    dialect: Dialect, branch_id: str, holder_id: str, ttl_ms: int, now: Now
) -> Flow[Lease]:
    info = yield from branch(branch_id)
    if dialect.locks:
        yield Query(sql.LEASE_PLACEHOLDER, (branch_id,))
    row, read_at = yield from lease_row(branch_id, now, lock=True)
    require_free(row, holder_id, read_at)
    if row is not None and row[0]:
        holder_id = succeeding(holder_id, row[0], int(row[1]))  # what is proven stays proven
    lease_epoch = row[1] if row is not None else 0
    epoch = next_epoch(lease_epoch, (yield from chain_epoch(info)))
    lease = Lease(branch_id, holder_id, epoch, read_at + ttl_ms)
    yield Query(sql.PUT_LEASE, (branch_id, holder_id, epoch, lease.expires_at))
    return lease


def renew(lease: Lease, ttl_ms: int, now: Now) -> Flow[Lease]:
    row, read_at = yield from lease_row(lease.branch_id, now, lock=True)
    require_live(row, lease, read_at)
    renewed = Lease(lease.branch_id, lease.holder_id, lease.epoch, read_at + ttl_ms)
    yield Query(sql.RENEW_LEASE, (renewed.expires_at, lease.branch_id))
    return renewed


def release(lease: Lease) -> Flow[None]:
    yield Query(sql.RELEASE_LEASE, (lease.branch_id, lease.holder_id, lease.epoch))


# ---- receipts ------------------------------------------------------------------------------


def insert_receipt(receipt: RunReceipt) -> Flow[None]:
    if (yield from changed(sql.INSERT_RECEIPT, *receipt.row())) != 1:
        raise key_taken(receipt)  # rolls the transaction (and its append) back


def receipt(tenant_id: str, operation: str, idempotency_key: str) -> Flow[RunReceipt | None]:
    row = yield from one(sql.RECEIPT, tenant_id, operation, idempotency_key)
    return None if row is None else receipt_from_row(row)


def unfinished_receipts() -> Flow[list[RunReceipt]]:
    return [receipt_from_row(row) for row in (yield from rows(sql.UNFINISHED_RECEIPTS))]
