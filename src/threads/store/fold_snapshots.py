"""Reading ``fold_snapshots`` rows back (``threads.store.snapshot_row`` writes them): a branch's
fold snapshot with the lines after it, or its listing summary, each with the branch as read in
the same read snapshot.

Judging a row (its hash, format and fold code) and the chain from its head hash on is the
opener's (``threads.store.fold_open``).
Invariant: a row is a projection, never a source: a store without it (a reference-written
directory, a row refused) answers every read by folding the log.
"""

from __future__ import annotations

from threads.store import flows
from threads.store import statements as sql
from threads.store.flows import Flow
from threads.store.protocol import BranchInfo, TailRead
from threads.store.snapshot_row import SnapshotKind, StoredSnapshot

_ROW = (
    "SELECT seq, head_hash, format, fold_code, sha256, body FROM fold_snapshots"
    " WHERE branch_id = ? AND kind = ?"
)
_LINES_AFTER = "SELECT line FROM events WHERE branch_id = ? AND seq > ? ORDER BY seq"
_LINES_BETWEEN = (
    "SELECT line FROM events WHERE branch_id = ? AND seq > ? AND seq <= ? ORDER BY seq"
)


def snapshot(branch_id: str, kind: SnapshotKind) -> Flow[StoredSnapshot | None]:
    row = yield from flows.one(_ROW, branch_id, kind)
    if row is None:
        return None
    seq, head_hash, format_, fold_code, sha256, body = row
    return StoredSnapshot(branch_id, kind, int(seq), str(head_hash), int(format_),
                          str(fold_code), str(sha256), bytes(body))


def tail_read(branch_id: str) -> Flow[TailRead | None]:
    """The branch, its header line, its fold snapshot and the lines after it (None: no
    snapshot, or one past the head)."""
    branch = yield from flows.branch(branch_id)
    stored = yield from snapshot(branch_id, "fold")
    if stored is None or stored.seq > branch.head_seq:
        return None
    row = yield from flows.one(sql.HEADER_LINE, branch_id)
    assert row is not None  # the branch was read above, in this snapshot
    lines = yield from flows.rows(_LINES_AFTER, branch_id, stored.seq)
    return TailRead(branch, bytes(row[0]), stored, [bytes(line) for (line,) in lines])


def lines_between(branch_id: str, after_seq: int, through_seq: int) -> Flow[list[bytes]]:
    """The branch's own stored lines after ``after_seq`` through ``through_seq``, unchecked."""
    lines = yield from flows.rows(_LINES_BETWEEN, branch_id, after_seq, through_seq)
    return [bytes(line) for (line,) in lines]


def summary(branch_id: str) -> Flow[tuple[BranchInfo, StoredSnapshot | None]]:
    """The branch and its summary row, read together."""
    branch = yield from flows.branch(branch_id)
    return branch, (yield from snapshot(branch_id, "summary"))

