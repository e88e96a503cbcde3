"""``threads.db``'s pragmas, its version check, and its tables created or upgraded in place.

The tables are ``threads.store.layout``'s (the store v6 ones the digest gives, plus ours). A
store is opened only if its ``user_version`` is 6 (0 means empty: the tables are created); any
other version, and a version-6 database in the layout of a release that kept artifacts inside
``threads.db`` (an ``artifacts`` table), is ``unsupported_format``: stores are not migrated.

One earlier layout of ours is upgraded in place instead (``_upgrade``): the one with TEXT ids in
``inbox`` and ``provider_audit`` and guessed columns for the tables the digest names without
columns, which the reference could not open. What it changes loses nothing: the guessed tables
were never written (they are dropped only when empty and exactly as we made them), and an inbox
row's id is named by no log line or other row (a control item is applied by its key), so the
rows are copied under new integer ids in the order they were received. It runs in one
``BEGIN IMMEDIATE`` transaction and looks again once it holds the lock, so two processes
opening one directory at once upgrade it once; a directory that holds anything else it would
drop is refused (``unsupported_format``) and left as it is, and one this process can't write
(a read-only copy) is read as it is.
"""

from __future__ import annotations

import re
import sqlite3
import time

from threads.errors import StoreError
from threads.store.layout import (
    FOLD_SNAPSHOTS,
    INBOX,
    PROVIDER_AUDIT,
    REQUEST_DELTAS,
    SCHEMA_VERSION,
    SQLITE_TABLES,
    Table,
    ddl,
)
from threads.store.rows import unsupported_schema

MIN_SQLITE = (3, 39, 0)
WAL_RETRIES = 500  # how often switching to WAL is retried while another opener holds a lock
WAL_RETRY_S = 0.010

V6_DDL = ddl("sqlite", *SQLITE_TABLES)  # what an empty database is given
DELTAS_DDL = ddl("sqlite", REQUEST_DELTAS)  # ours alone: a reference-written store lacks it
SNAPSHOTS_DDL = ddl("sqlite", FOLD_SNAPSHOTS)  # ours alone too

# The earlier layout's guessed tables (the columns it gave them), which it never wrote.
_GUESSED = {
    "schedule_occurrences": ("tenant_id", "schedule_id", "occurrence_at", "pending", "retired",
                             "reason"),
    "teams": ("team_id", "tenant_id", "thread_id", "created_at"),
    "team_members": ("team_id", "member", "thread_id"),
    "mail": ("mail_id", "team_id", "sender", "recipient", "sent_seq", "claimed_by",
             "claimed_at"),
    "asks": ("ask_id", "team_id", "asker", "target", "state"),
    "monitors": ("team_id", "member", "branch_id"),
    "operator_receipts": ("tenant_id", "team_id", "idempotency_key", "request_id",
                          "created_at"),
    "team_feed": ("team_id", "seq", "thread_id", "event_seq"),
}
# Tables the earlier layout keyed by a TEXT id where v6 has a row id (the id, the table).
_REKEYED = ((INBOX, "inbox_id"), (PROVIDER_AUDIT, "audit_id"))
_TEXT_ID = re.compile(r"\b(inbox_id|audit_id)\s+TEXT\b", re.IGNORECASE)


def configure(conn: sqlite3.Connection, *, on_disk: bool, busy_timeout_ms: int) -> None:
    """The reference's pragmas: WAL (retried while another opener holds a lock),
    ``synchronous=FULL``, ``fullfsync``, ``checkpoint_fullfsync``, ``foreign_keys``."""
    if sqlite3.sqlite_version_info < MIN_SQLITE:
        raise StoreError(
            "unsupported_format",
            f"this Python links SQLite {sqlite3.sqlite_version}; the store needs 3.39 or newer",
        )
    if on_disk:
        _wal(conn)
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA fullfsync=ON")
    conn.execute("PRAGMA checkpoint_fullfsync=ON")
    conn.execute("PRAGMA foreign_keys=ON")
    conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")


def _wal(conn: sqlite3.Connection) -> None:
    for attempt in range(WAL_RETRIES):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as exc:
            locked = "locked" in str(exc) or "busy" in str(exc)
            if not locked or attempt == WAL_RETRIES - 1:
                raise
            time.sleep(WAL_RETRY_S)


def init_schema(conn: sqlite3.Connection) -> bool:
    """Create the tables on an empty database; check the layout of one that has them (and
    upgrade our earlier one). A store in the current layout is only read here: opening it
    never waits for (or takes) the write lock a running writer holds. Returns whether
    ``request_deltas`` exists (a store the reference wrote lacks it until our first request
    artifact creates it)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        tables = _tables(conn)
        if not _earlier_layout(tables):
            return _require_layout(tables)
    if version not in (0, SCHEMA_VERSION):
        raise unsupported_schema(version)
    try:
        return _create_or_upgrade(conn)
    except sqlite3.OperationalError as exc:
        if version == 0 or not _read_only(exc):
            raise
        # A copy that can't be written (a backup opened read-only) is read as it is: its
        # earlier layout differs only in tables a read never touches, and a write fails anyway.
        return _require_layout(_tables(conn))


def _read_only(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) == sqlite3.SQLITE_READONLY or (
        "readonly" in str(exc)
    )


def _create_or_upgrade(conn: sqlite3.Connection) -> bool:
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another opener won
        if version == 0:
            _execute(conn, V6_DDL)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise unsupported_schema(version)
        elif _earlier_layout(_tables(conn)):
            _require_layout(_tables(conn))
            _upgrade(conn)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return _require_layout(_tables(conn))


def _tables(conn: sqlite3.Connection) -> dict[str, str]:
    """Each table's name and the ``CREATE TABLE`` text it was made with."""
    return {
        str(name): str(sql or "")
        for name, sql in conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'table'")
    }


def _earlier_layout(tables: dict[str, str]) -> bool:
    """Whether the store is in our earlier layout: its inbox or audit ids are TEXT."""
    return any(_TEXT_ID.search(tables.get(t.name, "")) for t, _ in _REKEYED)


def _require_layout(tables: dict[str, str]) -> bool:
    if "artifacts" in tables or "budget_ledger" not in tables:
        raise StoreError(
            "unsupported_format",
            "this store says version 6 but has the layout of an earlier threads-py release"
            " (artifacts inside threads.db). Export its threads with that release"
            " (threads export --bundle) and import them into a new store.",
        )
    return REQUEST_DELTAS.name in tables


def _upgrade(conn: sqlite3.Connection) -> None:
    """Our earlier layout made v6, in the caller's transaction (see the module docstring)."""
    for name, columns in _GUESSED.items():
        have = tuple(row[1] for row in conn.execute(f"PRAGMA table_info({name})"))
        if have != columns:
            continue  # absent, or another writer's table: not ours to touch
        if conn.execute(f"SELECT 1 FROM {name} LIMIT 1").fetchone() is not None:
            raise StoreError(
                "unsupported_format",
                f"this store's {name} table holds rows, in a layout threads-py once created"
                " but never wrote to; it can't be brought to store v6 in place. Export its"
                " threads (threads export --bundle) and import them into a new store.",
            )
        conn.execute(f"DROP TABLE {name}")
    tables = _tables(conn)
    for table, key in _REKEYED:
        if _TEXT_ID.search(tables.get(table.name, "")):
            _rekey(conn, table, key)
    _execute(conn, V6_DDL)  # anything else the layout has and this store lacks


def _rekey(conn: sqlite3.Connection, table: Table, key: str) -> None:
    """``table`` rebuilt with a row id as ``key``, its rows copied in their id order."""
    old = f"{table.name}_earlier"
    conn.execute(f"ALTER TABLE {table.name} RENAME TO {old}")
    for (index,) in conn.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ? AND sql IS NOT NULL",
        (old,),
    ).fetchall():
        conn.execute(f"DROP INDEX {index}")  # its name is the new table's to take
    _execute(conn, table.ddl("sqlite"))
    columns = ", ".join(c.name for c in table.columns if c.name != key)
    order = "received_at, inbox_id" if table is INBOX else "at, audit_id"
    conn.execute(
        f"INSERT INTO {table.name}({columns}) SELECT {columns} FROM {old} ORDER BY {order}"
    )
    conn.execute(f"DROP TABLE {old}")


def _execute(conn: sqlite3.Connection, script: str) -> None:
    """Each statement of ``script`` in the caller's transaction (``executescript`` would
    commit it)."""
    for statement in script.split(";"):
        if statement.strip():
            conn.execute(statement)


def create_deltas_table(conn: sqlite3.Connection) -> None:
    """``request_deltas``, in the caller's transaction (it rolls back with it)."""
    _execute(conn, DELTAS_DDL)


def create_snapshots_table(conn: sqlite3.Connection) -> None:
    """``fold_snapshots``, in the caller's transaction (it rolls back with it)."""
    _execute(conn, SNAPSHOTS_DDL)


def has_deltas_table(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, REQUEST_DELTAS)


def has_snapshots_table(conn: sqlite3.Connection) -> bool:
    return _has_table(conn, FOLD_SNAPSHOTS)


def _has_table(conn: sqlite3.Connection, table: Table) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table.name,)
    ).fetchone()
    return row is not None
