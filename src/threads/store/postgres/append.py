"""A Postgres append as data (``AppendRequest``), and the one statement a group of them commits
in (``GroupStatement``).

The statement is a single autocommit command, so the group is one round trip and one
transaction, with no session left idle in a transaction between round trips. It locks every
member's lease and branch rows (``FOR UPDATE ... SKIP LOCKED``), judges each member in SQL by
exactly the checks ``require_live`` and ``require_head`` make in Python, writes the members that
passed (artifacts, request deltas, events, new heads) and returns, per locked member, its
locked row and whether it passed, and the pending control items of the group's threads.
Invariants: nothing is written for a member that did not pass or whose rows were locked
elsewhere; a failing command (a constraint, a lost connection) writes nothing of anyone. The
row locks never wait (``SKIP LOCKED``); artifacts and request deltas go in in sha256 order, so
two groups sharing some wait for each other in one order (a deadlock the server still finds
fails the command, and its members then run alone).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from threads.log.lines import Event
from threads.store.postgres.columns import ByteaColumn, Column, Int4Column, Int8Column, TextColumn
from threads.store.postgres.deltas import Planned
from threads.store.protocol import Lease, PendingArtifact
from threads.store.receipts import RunReceipt
from threads.store.request_deltas import COLUMNS as DELTA_COLUMNS
from threads.store.rows import artifact_ref, event_rows
from threads.store.snapshot_row import SNAPSHOT_COLUMNS, SNAPSHOT_UPDATE, StoredSnapshot
from threads.store.statements import (
    INBOX_COLUMNS,
    PENDING_OF_ANY_FROM,
    PENDING_ORDER,
    POSTGRES,
)

# The lease clock (``threads.store.statements``): an injected test clock's reading, else the
# database's.
LEASE_NOW = POSTGRES.render("{now}")


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One ``Store.append`` call, as its arguments."""

    branch_id: str
    events: Sequence[Event]
    expected_seq: int
    lease: Lease
    artifacts: Sequence[PendingArtifact] = ()  # all but requests, which go in ``requests``
    receipt: RunReceipt | None = None
    consumes: Sequence[str] = ()  # inbox ids of control items this append applies
    finishes_fork: bool = False  # a new child's fork event: the branch is forking, not ready
    requests: Planned | None = None  # request artifacts, kept as deltas
    snapshots: Sequence[StoredSnapshot] = ()  # fold snapshot rows at the batch's last event


def artifact_row(artifact: PendingArtifact) -> tuple[str, str, int, bytes]:
    ref = artifact_ref(artifact.data, artifact.media_type)
    return ref["sha256"], artifact.media_type, len(artifact.data), artifact.data


# The members, one row each (one per branch: a group's reads do not see its own writes).
_MEMBERS = (
    "member AS MATERIALIZED (SELECT * FROM unnest(%b::text[], %b::text[], %b::bigint[],"
    " %b::bigint[], %b::bigint[], %b::text[], %b::bigint[], %b::text[])"
    " AS m(branch_id, holder_id, epoch, expected_seq, first_seq, prev_hash, head_seq, head_hash))"
)
_LOCKED = (
    f"locked AS MATERIALIZED (SELECT l.branch_id, l.holder_id, l.epoch, l.expires_at,"
    f" {LEASE_NOW} AS now, b.head_seq, b.head_hash, b.state"
    " FROM leases l JOIN branches b ON b.branch_id = l.branch_id"
    " WHERE l.branch_id IN (SELECT branch_id FROM member) FOR UPDATE OF l, b SKIP LOCKED)"
)
# ``require_live`` (holder, epoch, unexpired) and ``require_head`` (head seq, ready, and the
# first event chains to the head), term by term.
_PASSED = (
    "passed AS MATERIALIZED (SELECT m.branch_id, m.head_seq, m.head_hash"
    " FROM member m JOIN locked k ON k.branch_id = m.branch_id"
    " WHERE k.holder_id = m.holder_id AND k.epoch = m.epoch AND k.expires_at > k.now"
    " AND k.head_seq = m.expected_seq AND k.state = 'ready'"
    " AND (m.first_seq IS NULL OR (m.prev_hash = k.head_hash AND m.first_seq = k.head_seq + 1)))"
)
_ARTIFACTS = (
    "artifacts_in AS (INSERT INTO artifacts(sha256, media_type, bytes, data)"
    " SELECT DISTINCT ON (a.sha256) a.sha256, a.media_type, a.bytes, a.data"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::bigint[], %b::bytea[])"
    " AS a(branch_id, sha256, media_type, bytes, data)"
    " WHERE a.branch_id IN (SELECT branch_id FROM passed) ORDER BY a.sha256"
    " ON CONFLICT (sha256) DO NOTHING)"
)
_DELTA_SELECTED = ", ".join(f"d.{name}" for name in DELTA_COLUMNS.split(", "))
_DELTAS = (
    f"deltas_in AS (INSERT INTO request_deltas({DELTA_COLUMNS})"
    f" SELECT DISTINCT ON (d.sha256) {_DELTA_SELECTED}"
    " FROM unnest(%b::text[], %b::text[], %b::text[], %b::integer[], %b::integer[],"
    " %b::bytea[], %b::text[], %b::integer[])"
    f" AS d(branch_id, {DELTA_COLUMNS})"
    " WHERE d.branch_id IN (SELECT branch_id FROM passed) ORDER BY d.sha256"
    " ON CONFLICT (sha256) DO NOTHING)"
)
_EVENTS = (
    "events_in AS (INSERT INTO events(branch_id, seq, event_id, type, type_version, critical,"
    " epoch, line) SELECT v.* FROM unnest(%b::text[], %b::bigint[], %b::text[], %b::text[],"
    " %b::integer[], %b::integer[], %b::bigint[], %b::bytea[])"
    " AS v(branch_id, seq, event_id, type, type_version, critical, epoch, line)"
    " WHERE v.branch_id IN (SELECT branch_id FROM passed))"
)
_SNAPSHOTS = (
    f"snapshots_in AS (INSERT INTO fold_snapshots({SNAPSHOT_COLUMNS}) SELECT s.*"
    " FROM unnest(%b::text[], %b::text[], %b::bigint[], %b::text[], %b::integer[], %b::text[],"
    f" %b::text[], %b::bytea[]) AS s({SNAPSHOT_COLUMNS})"
    " WHERE s.branch_id IN (SELECT branch_id FROM passed)"
    f" ON CONFLICT (branch_id, kind) DO UPDATE SET {SNAPSHOT_UPDATE})"
)
_HEADS = (
    "heads AS (UPDATE branches b SET head_seq = p.head_seq, head_hash = p.head_hash"
    " FROM passed p WHERE b.branch_id = p.branch_id AND p.head_seq IS NOT NULL)"
)
_INBOX_NULLS = ", ".join(f"NULL AS {name}" for name in INBOX_COLUMNS.split(", "))
_HEAD_ROWS = (
    "SELECT 0 AS part, k.branch_id, k.holder_id, k.epoch, k.expires_at, k.now, k.head_seq,"
    " k.head_hash, k.state, k.branch_id IN (SELECT branch_id FROM passed) AS passed,"
    f" {_INBOX_NULLS} FROM locked k"
)
_INBOX_ROWS = (
    " UNION ALL SELECT 1, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,"
    f" {INBOX_COLUMNS} {POSTGRES.render(PENDING_OF_ANY_FROM)} ORDER BY part, {PENDING_ORDER}"
)
# The kind of each array the parts above cast (text[], bigint[], integer[], bytea[]), in order.
_MEMBER_KINDS = (
    TextColumn, TextColumn, Int8Column, Int8Column, Int8Column, TextColumn, Int8Column, TextColumn
)
_ARTIFACT_KINDS = (TextColumn, TextColumn, TextColumn, Int8Column, ByteaColumn)
_DELTA_KINDS = (
    TextColumn, TextColumn, TextColumn, Int4Column, Int4Column, ByteaColumn, TextColumn, Int4Column
)
_EVENT_KINDS = (
    TextColumn, Int8Column, TextColumn, TextColumn, Int4Column, Int4Column, Int8Column, ByteaColumn
)
_SNAPSHOT_KINDS = (
    TextColumn, TextColumn, Int8Column, TextColumn, Int4Column, TextColumn, TextColumn, ByteaColumn
)
_HEAD_FIELDS = slice(2, 9)  # holder_id .. state: the row ``_judge`` takes
_INBOX_FIELDS = slice(10, None)


class GroupStatement:
    """The statement for ``requests`` (one per branch) and its parameters; ``read`` takes its
    rows apart."""

    def __init__(self, requests: Sequence[AppendRequest], now: int | None, inbox: bool) -> None:
        members = [_member(r) for r in requests]
        parts, params = [_MEMBERS], _columns(members, _MEMBER_KINDS)
        parts.append(_LOCKED)
        params.append(now)
        parts.append(_PASSED)
        artifacts = [(r.branch_id, *artifact_row(a)) for r in requests for a in r.artifacts]
        if artifacts:
            parts.append(_ARTIFACTS)
            params += _columns(artifacts, _ARTIFACT_KINDS)
        deltas = [(r.branch_id, *row) for r in requests if r.requests
                  for row in r.requests.rows or ()]
        if deltas:
            parts.append(_DELTAS)
            params += _columns(deltas, _DELTA_KINDS)
        events = [row for r in requests for row in event_rows(r.branch_id, r.events)]
        if events:
            parts.append(_EVENTS)
            params += _columns(events, _EVENT_KINDS)
            parts.append(_HEADS)
        snapshots = [s.row() for r in requests for s in r.snapshots]
        if snapshots:
            parts.append(_SNAPSHOTS)
            params += _columns(snapshots, _SNAPSHOT_KINDS)
        query = "WITH " + ", ".join(parts) + " " + _HEAD_ROWS
        if inbox:
            query += _INBOX_ROWS
            params.append(sorted({r.events[-1].thread_id for r in requests if r.events}))
        self.query = query.encode()
        self.params = params

    @staticmethod
    def read(
        rows: Sequence[tuple[Any, ...]],
    ) -> tuple[dict[str, tuple[tuple[Any, ...], bool]], list[tuple[Any, ...]]]:
        """({branch_id: (locked row as ``_judge`` takes it, passed)}, pending inbox rows)."""
        heads = {row[1]: (row[_HEAD_FIELDS], bool(row[9])) for row in rows if row[0] == 0}
        return heads, [row[_INBOX_FIELDS] for row in rows if row[0] == 1]


def _member(r: AppendRequest) -> tuple[Any, ...]:
    """What ``_MEMBERS`` takes of one append (its chain's ends are NULL when it has no events)."""
    lease = (r.branch_id, r.lease.holder_id, r.lease.epoch, r.expected_seq)
    if not r.events:
        return (*lease, None, None, None, None)
    first, last = r.events[0], r.events[-1]
    return (*lease, first.seq, first.prev_hash, last.seq, last.hash)


def _columns(rows: list[tuple[Any, ...]], kinds: tuple[type[Column], ...]) -> list[Any]:
    """``rows`` as one array parameter per column, of the column's kind (the casts of the
    statement's ``unnest``, which takes them back apart)."""
    if not rows:
        return [kind(()) for kind in kinds]
    return [kind(column) for kind, column in zip(kinds, zip(*rows, strict=True), strict=True)]
