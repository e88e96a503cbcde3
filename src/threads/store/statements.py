"""Every statement both engines run, written once, and what an engine's dialect changes in it.

A statement is written with ``?`` placeholders and three tokens an engine fills in
(``Dialect.render``): ``{now}``, the lease clock's reading (SQLite: the caller's clock, passed as
a parameter; Postgres: the injected test clock when there is one, else the database's clock, so
hosts with skewed clocks agree), ``{lock}`` (Postgres locks the rows a write transaction reads
first, ``FOR UPDATE``; SQLite's ``BEGIN IMMEDIATE`` already holds the database's one write
lock) and ``{order}`` (the column that keeps branches in creation order: SQLite's ``rowid``,
Postgres's ``created``). Postgres takes ``%s`` placeholders, so a literal ``%`` is doubled.

Statements are sent as ``Query`` values and answered as ``Result`` values (``threads.store.flows``
yields them; each engine's driver runs them on its connection).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Any, Literal

from threads.store.layout import BRANCHES, EVENTS, RUN_RECEIPTS

Row = tuple[Any, ...]

# The database's clock in Unix ms; ``COALESCE`` lets an injected test clock's reading win.
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"


@dataclass(frozen=True, slots=True)
class Dialect:
    name: Literal["sqlite", "postgres"]
    placeholder: str
    now: str
    lock: str
    order: str
    # Writers serialize with row and advisory locks (Postgres: a first lease holder locks a
    # placeholder row, imports and queued controls take advisory locks); SQLite's one write
    # lock, taken by ``BEGIN IMMEDIATE``, already serializes them.
    locks: bool
    _rendered: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    def render(self, statement: str) -> str:
        """``statement`` in this engine's words (cached: statements are constants)."""
        rendered = self._rendered.get(statement)
        if rendered is None:
            text = statement.replace("{now}", self.now).replace("{lock}", self.lock)
            text = text.replace("{order}", self.order)
            if self.placeholder != "?":
                text = text.replace("%", "%%").replace("?", self.placeholder)
            rendered = self._rendered[statement] = text
        return rendered


SQLITE = Dialect("sqlite", "?", now="?", lock="", order="rowid", locks=False)
POSTGRES = Dialect(
    "postgres", "%s", now=f"COALESCE(?::bigint, {DB_NOW})", lock=" FOR UPDATE",
    order="created", locks=True,
)


@dataclass(frozen=True, slots=True)
class Query:
    """One statement and its parameters; ``many``: run once per row of ``args``."""

    sql: str
    args: Sequence[Any] = ()
    many: bool = False


@dataclass(frozen=True, slots=True)
class Result:
    rows: list[Row]
    rowcount: int

    def one(self) -> Row | None:
        return self.rows[0] if self.rows else None


def _values(count: int) -> str:
    return ", ".join("?" * count)


def _insert(table: str, columns: str, conflict: str = "") -> str:
    return f"INSERT INTO {table}({columns}) VALUES ({_values(columns.count(',') + 1)}){conflict}"


BRANCH_COLUMNS = (
    "branch_id, thread_id, tenant_id, parent_branch_id, fork_at_seq, state, head_seq,"
    " head_hash, head_verified, dropped_ref"
)
ROW_COLUMNS = "seq, event_id, type, type_version, critical, epoch, line"

INSERT_THREAD = "INSERT INTO threads(thread_id, tenant_id) VALUES (?, ?)"
INSERT_THREAD_ONCE = INSERT_THREAD + " ON CONFLICT (thread_id) DO NOTHING"
THREAD_TENANT = "SELECT tenant_id FROM threads WHERE thread_id = ?"
INSERT_BRANCH = _insert("branches", BRANCHES.column_names())  # SQLite's: no `created`
INSERT_EVENTS = _insert("events", EVENTS.column_names())
# ``INSERT_EVENTS`` of up to this many rows in one statement (``insert_events``): one step of
# the database instead of one per row (8 parameters a row, far below SQLite's 32,766).
EVENTS_AT_ONCE = 16


@cache
def insert_events(rows: int) -> str:
    """``INSERT_EVENTS`` for ``rows`` rows at once (1 ≤ rows ≤ ``EVENTS_AT_ONCE``)."""
    one = f"({_values(EVENTS.column_names().count(',') + 1)})"
    return f"INSERT INTO events({EVENTS.column_names()}) VALUES {', '.join([one] * rows)}"
INSERT_RECEIPT = _insert("run_receipts", RUN_RECEIPTS.column_names(), " ON CONFLICT DO NOTHING")

BRANCH = f"SELECT {BRANCH_COLUMNS} FROM branches WHERE branch_id = ?"
ROOT = f"SELECT {BRANCH_COLUMNS} FROM branches WHERE thread_id = ? AND parent_branch_id IS NULL"
BRANCHES_OF = f"SELECT {BRANCH_COLUMNS} FROM branches WHERE thread_id = ? ORDER BY {{order}}"
ROOTS = f"SELECT {BRANCH_COLUMNS} FROM branches WHERE parent_branch_id IS NULL ORDER BY {{order}}"
ROOTS_OF = (
    f"SELECT {BRANCH_COLUMNS} FROM branches WHERE parent_branch_id IS NULL AND tenant_id = ?"
    " ORDER BY {order}"
)
HEAD = "SELECT head_seq, head_hash, state FROM branches WHERE branch_id = ?"
HEADER_LINE = "SELECT header_line, head_seq FROM branches WHERE branch_id = ?"
SET_STATE = "UPDATE branches SET state = ? WHERE branch_id = ?"
MOVE_HEAD = "UPDATE branches SET head_seq = ?, head_hash = ?, state = 'ready' WHERE branch_id = ?"

ROWS = f"SELECT {ROW_COLUMNS} FROM events WHERE branch_id = ? ORDER BY seq"
LINES = "SELECT line FROM events WHERE branch_id = ? ORDER BY seq"
LINES_THROUGH = "SELECT line FROM events WHERE branch_id = ? AND seq <= ? ORDER BY seq"
LAST_EPOCH = "SELECT epoch FROM events WHERE branch_id = ? ORDER BY seq DESC LIMIT 1"
LAST_EPOCH_THROUGH = (
    "SELECT epoch FROM events WHERE branch_id = ? AND seq <= ? ORDER BY seq DESC LIMIT 1"
)
LATEST_REQUEST_LINE = (
    "SELECT line FROM events WHERE branch_id = ? AND type = 'model_request'"
    " ORDER BY seq DESC LIMIT 1"
)

# The lease row (holder_id, epoch, expires_at) and the lease clock's now (``{now}``).
LEASE = "SELECT holder_id, epoch, expires_at, {now} FROM leases WHERE branch_id = ?"
LEASE_LOCKED = LEASE + "{lock}"
# A row to lock even for a branch's first holder, so racing acquirers queue on it.
LEASE_PLACEHOLDER = (
    "INSERT INTO leases(branch_id, holder_id, epoch, expires_at) VALUES (?, '', 0, 0)"
    " ON CONFLICT (branch_id) DO NOTHING"
)
PUT_LEASE = (
    "INSERT INTO leases(branch_id, holder_id, epoch, expires_at) VALUES (?, ?, ?, ?)"
    " ON CONFLICT (branch_id) DO UPDATE SET holder_id = excluded.holder_id,"
    " epoch = excluded.epoch, expires_at = excluded.expires_at"
)
RENEW_LEASE = "UPDATE leases SET expires_at = ? WHERE branch_id = ?"
# Keep the row (and its epoch) so the next holder's epoch still increases.
RELEASE_LEASE = (
    "UPDATE leases SET expires_at = 0 WHERE branch_id = ? AND holder_id = ? AND epoch = ?"
)

RECEIPT = (
    f"SELECT {RUN_RECEIPTS.column_names()} FROM run_receipts"
    " WHERE tenant_id = ? AND operation = ? AND idempotency_key = ?"
)
# Receipts whose branch's head event is not a ``turn_completed``: runs a host may owe work.
UNFINISHED_RECEIPTS = (
    f"SELECT {', '.join('r.' + c for c in RUN_RECEIPTS.column_names().split(', '))}"
    " FROM run_receipts r JOIN branches b ON b.branch_id = r.branch_id"
    " JOIN events e ON e.branch_id = b.branch_id AND e.seq = b.head_seq"
    " WHERE e.type <> 'turn_completed' ORDER BY r.created_at"
)

# Root branches in state ``ready``, each with its live lease's holder id (NULL when there is no
# lease row or it expired); ``rows.free_roots`` keeps the claimable ones.
FREE_ROOTS = (
    f"SELECT {', '.join('b.' + c for c in BRANCH_COLUMNS.split(', '))},"
    " CASE WHEN l.expires_at > {now} THEN l.holder_id END"
    " FROM branches b LEFT JOIN leases l ON l.branch_id = b.branch_id"
    " WHERE b.parent_branch_id IS NULL AND b.state = 'ready' ORDER BY b.{order}"
)

# ---- control items (``threads.store.control_items``) -----------------------------------------

INBOX_COLUMNS = "inbox_id, tenant_id, thread_id, item, received_at"
WAITING = "channel = 'api' AND installation_id = 'local' AND consumed_seq IS NULL"
PENDING_ORDER = "received_at, inbox_id"  # oldest first
PENDING = (
    f"SELECT {INBOX_COLUMNS} FROM inbox WHERE thread_id = ? AND {WAITING}"
    f" ORDER BY {PENDING_ORDER}"
)
# The same for many threads at once; a Postgres group commit's statement reads them from
# ``PENDING_OF_ANY_FROM`` inside a larger select.
PENDING_OF_ANY_FROM = f"FROM inbox WHERE thread_id = ANY(?) AND {WAITING}"
PENDING_OF_ANY = f"SELECT {INBOX_COLUMNS} {PENDING_OF_ANY_FROM} ORDER BY {PENDING_ORDER}"
# The database assigns ``inbox_id``.
INSERT_CONTROL = (
    "INSERT INTO inbox(tenant_id, channel, installation_id, item_key, delivery_id, thread_id,"
    " item, received_at) VALUES (?, 'api', 'local', ?, ?, ?, ?, ?)"
)
# A transaction-scoped lock on a name (Postgres only: see ``Dialect.locks``).
ADVISORY_LOCK = "SELECT pg_advisory_xact_lock(hashtext(?))"
CONSUME = "UPDATE inbox SET consumed_seq = ? WHERE inbox_id = ? AND consumed_seq IS NULL"
