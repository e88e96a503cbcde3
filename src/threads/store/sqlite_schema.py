"""The layout of ``threads.db``: the store v6 tables, the connection pragmas, the version check.

The reference implementation embeds its ``store.sql`` (``PRAGMA user_version = 6``) byte for
byte. We do not have that text, only a digest of it (``shared/spec/UPSTREAM-DIGEST.md`` §5,
§2.4, §1.3 and ``LOG-FORMAT.md`` §2), so ``V6_DDL`` below is written from the digest: the
table and column names, keys, the composite foreign key from ``branches`` to ``threads``, and
the CHECKs it states. Where the digest names a table without its columns (the team index
tables, ``schedule_occurrences``) the columns are our best reading and say so. One table is
ours alone: ``request_deltas`` (see ``threads.store.request_deltas``), which a v6 reader
ignores; the reference keeps no artifacts in the database, and neither do we otherwise.

A store is opened only if its ``user_version`` is 6 (0 means empty: the tables are created);
any other version, and a version-6 database that is not this layout (an ``artifacts`` table,
written by earlier threads-py releases), is ``unsupported_format``: stores are not migrated.
"""

from __future__ import annotations

import sqlite3
import time

from threads.errors import StoreError
from threads.store.request_deltas import table_ddl
from threads.store.rows import SCHEMA_VERSION, unsupported_schema

MIN_SQLITE = (3, 39, 0)
WAL_RETRIES = 500  # how often switching to WAL is retried while another opener holds a lock
WAL_RETRY_S = 0.010

# The v6 tables (see the module docstring for where each column comes from).
V6_DDL = """
CREATE TABLE IF NOT EXISTS threads (
  thread_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  UNIQUE (thread_id, tenant_id)
) STRICT;
CREATE TABLE IF NOT EXISTS branches (
  branch_id TEXT PRIMARY KEY,
  thread_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  parent_branch_id TEXT REFERENCES branches(branch_id),
  fork_at_seq INTEGER CHECK (fork_at_seq IS NULL OR fork_at_seq >= 0),
  header_line BLOB NOT NULL,
  state TEXT NOT NULL CHECK (state IN
    ('forking','ready','inspection_only','read_only','corrupt','fork_failed')),
  head_seq INTEGER NOT NULL CHECK (head_seq >= 0),
  head_hash TEXT NOT NULL,
  head_verified INTEGER NOT NULL DEFAULT 1 CHECK (head_verified IN (0, 1)),
  dropped_ref TEXT,
  FOREIGN KEY (thread_id, tenant_id) REFERENCES threads(thread_id, tenant_id)
) STRICT;
CREATE INDEX IF NOT EXISTS branches_by_thread ON branches(thread_id);
CREATE TABLE IF NOT EXISTS events (
  branch_id TEXT NOT NULL REFERENCES branches(branch_id),
  seq INTEGER NOT NULL CHECK (seq >= 1),
  event_id TEXT NOT NULL,
  type TEXT NOT NULL,
  type_version INTEGER NOT NULL CHECK (type_version >= 1),
  critical INTEGER NOT NULL CHECK (critical IN (0, 1)),
  epoch INTEGER NOT NULL CHECK (epoch >= 1),
  line BLOB NOT NULL,
  PRIMARY KEY (branch_id, seq),
  UNIQUE (branch_id, event_id)
) STRICT;
CREATE TABLE IF NOT EXISTS leases (
  branch_id TEXT PRIMARY KEY,
  holder_id TEXT NOT NULL,
  epoch INTEGER NOT NULL CHECK (epoch >= 1),
  expires_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS resources (
  resource_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  owner_branch_id TEXT NOT NULL,
  provider TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('sandbox','snapshot')),
  ref TEXT,
  state TEXT NOT NULL CHECK (state IN
    ('pending','live','releasing','released','release_failed','unknown')),
  operation_key TEXT NOT NULL UNIQUE,
  acquired_at INTEGER NOT NULL,
  expires_at INTEGER,
  released_at INTEGER,
  release_outcome TEXT CHECK (release_outcome IS NULL OR
    release_outcome IN ('released','not_found')),
  cleanup_claim TEXT
) STRICT;
CREATE INDEX IF NOT EXISTS resources_by_owner ON resources(owner_branch_id, state);
CREATE TABLE IF NOT EXISTS budget_ledger (
  budget_id TEXT NOT NULL,
  limit_name TEXT NOT NULL CHECK (limit_name IN
    ('max_cost_nanos','max_input_tokens','max_output_tokens','max_model_requests')),
  attempt_key TEXT NOT NULL,
  amount INTEGER NOT NULL CHECK (amount >= 0),
  state TEXT NOT NULL CHECK (state IN ('reserved','settled')),
  PRIMARY KEY (budget_id, limit_name, attempt_key)
) STRICT;
CREATE TABLE IF NOT EXISTS approvals (
  challenge_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  installation_id TEXT,
  thread_id TEXT NOT NULL,
  branch_id TEXT NOT NULL,
  call_id TEXT NOT NULL,
  args_hash TEXT NOT NULL,
  file_hashes BLOB NOT NULL,
  expires_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('open','granted','denied','expired')),
  decided_by TEXT,
  decided_at INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS observer_cursors (
  observer TEXT NOT NULL,
  branch_id TEXT NOT NULL REFERENCES branches(branch_id),
  seq INTEGER NOT NULL CHECK (seq >= 0),
  PRIMARY KEY (observer, branch_id)
) STRICT;
CREATE TABLE IF NOT EXISTS tombstones (
  thread_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  deleted_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS run_receipts (
  tenant_id TEXT NOT NULL,
  operation TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  principal_key TEXT NOT NULL,
  body_hash TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  branch_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, operation, idempotency_key)
) STRICT;
CREATE TABLE IF NOT EXISTS inbox (
  inbox_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  installation_id TEXT NOT NULL,
  item_key TEXT NOT NULL,
  delivery_id TEXT,
  thread_id TEXT,
  item BLOB NOT NULL,
  received_at INTEGER NOT NULL,
  consumed_seq INTEGER,
  UNIQUE (tenant_id, channel, installation_id, item_key)
) STRICT;
CREATE TABLE IF NOT EXISTS channel_threads (
  tenant_id TEXT NOT NULL,
  channel TEXT NOT NULL,
  installation_id TEXT NOT NULL,
  address TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, channel, installation_id, address)
) STRICT;
CREATE TABLE IF NOT EXISTS questions (
  tenant_id TEXT NOT NULL,
  branch_id TEXT NOT NULL,
  call_id TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('open','answered','expired')),
  decided_at INTEGER,
  PRIMARY KEY (branch_id, call_id)
) STRICT;
CREATE INDEX IF NOT EXISTS questions_due ON questions(state, expires_at);
CREATE TABLE IF NOT EXISTS memory_bindings (
  namespace TEXT NOT NULL,
  record_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  scope TEXT NOT NULL,
  PRIMARY KEY (namespace, record_id)
) STRICT;
CREATE TABLE IF NOT EXISTS knowledge_bindings (
  namespace TEXT NOT NULL,
  record_id TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  agent TEXT NOT NULL,
  scope TEXT NOT NULL,
  PRIMARY KEY (namespace, record_id)
) STRICT;
CREATE TABLE IF NOT EXISTS provider_audit (
  audit_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('memory','knowledge')),
  code TEXT NOT NULL CHECK (code IN ('scope_violation')),
  namespace TEXT NOT NULL,
  record_id TEXT NOT NULL,
  at INTEGER NOT NULL
) STRICT;
-- The digest names schedule_occurrences' tenant, pending, retired and reason fields and a
-- partial index on pending rows, the key columns are our reading.
CREATE TABLE IF NOT EXISTS schedule_occurrences (
  tenant_id TEXT NOT NULL,
  schedule_id TEXT NOT NULL,
  occurrence_at INTEGER NOT NULL,
  pending INTEGER NOT NULL CHECK (pending IN (0, 1)),
  retired INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)),
  reason TEXT,
  PRIMARY KEY (tenant_id, schedule_id, occurrence_at)
) STRICT;
CREATE INDEX IF NOT EXISTS schedule_occurrences_pending
  ON schedule_occurrences(occurrence_at) WHERE pending = 1;
CREATE TABLE IF NOT EXISTS schedule_threads (
  tenant_id TEXT NOT NULL,
  schedule_id TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  current INTEGER NOT NULL CHECK (current IN (0, 1)),
  created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, schedule_id, thread_id)
) STRICT;
CREATE UNIQUE INDEX IF NOT EXISTS schedule_threads_current
  ON schedule_threads(tenant_id, schedule_id) WHERE current = 1;
CREATE TABLE IF NOT EXISTS pending_wakes (
  branch_id TEXT NOT NULL,
  child_thread_id TEXT NOT NULL,
  PRIMARY KEY (branch_id, child_thread_id)
) STRICT;
CREATE TABLE IF NOT EXISTS observers (
  name TEXT PRIMARY KEY,
  registered_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS observer_losses (
  observer TEXT NOT NULL,
  tenant_id TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  unchecked_events INTEGER NOT NULL CHECK (unchecked_events >= 0),
  deleted_at INTEGER NOT NULL,
  reported_at INTEGER,
  PRIMARY KEY (observer, thread_id, deleted_at)
) STRICT;
CREATE INDEX IF NOT EXISTS observer_losses_unreported
  ON observer_losses(observer) WHERE reported_at IS NULL;
-- The team index tables: the digest names them (all rebuildable from the logs, mail claim
-- columns rebuilt as null) but not their columns, so these columns are our reading.
CREATE TABLE IF NOT EXISTS teams (
  team_id TEXT PRIMARY KEY,
  tenant_id TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS team_members (
  team_id TEXT NOT NULL,
  member TEXT NOT NULL,
  thread_id TEXT NOT NULL,
  PRIMARY KEY (team_id, member)
) STRICT;
CREATE TABLE IF NOT EXISTS mail (
  mail_id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  sender TEXT NOT NULL,
  recipient TEXT NOT NULL,
  sent_seq INTEGER NOT NULL,
  claimed_by TEXT,
  claimed_at INTEGER
) STRICT;
CREATE TABLE IF NOT EXISTS asks (
  ask_id TEXT PRIMARY KEY,
  team_id TEXT NOT NULL,
  asker TEXT NOT NULL,
  target TEXT NOT NULL,
  state TEXT NOT NULL
) STRICT;
CREATE TABLE IF NOT EXISTS monitors (
  team_id TEXT NOT NULL,
  member TEXT NOT NULL,
  branch_id TEXT NOT NULL,
  PRIMARY KEY (team_id, member)
) STRICT;
CREATE TABLE IF NOT EXISTS operator_receipts (
  tenant_id TEXT NOT NULL,
  team_id TEXT NOT NULL,
  idempotency_key TEXT NOT NULL,
  request_id TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, team_id, idempotency_key)
) STRICT;
CREATE TABLE IF NOT EXISTS team_feed (
  team_id TEXT NOT NULL,
  seq INTEGER NOT NULL,
  thread_id TEXT NOT NULL,
  event_seq INTEGER NOT NULL,
  PRIMARY KEY (team_id, seq)
) STRICT;
"""

# Ours alone (``threads.store.request_deltas``): request artifacts kept as deltas.
DELTAS_DDL = table_ddl("BLOB", " STRICT")


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
    """Create the tables on an empty database; check the layout of one that has them. A store
    that has them is only read here: opening one never waits for (or takes) the write lock a
    running writer holds. Returns whether ``request_deltas`` exists (a store the reference
    wrote lacks it until our first request artifact creates it)."""
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version == SCHEMA_VERSION:
        return _require_layout(conn)
    if version != 0:
        raise unsupported_schema(version)
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]  # another opener won
        if version == 0:
            for statement in (V6_DDL + DELTAS_DDL).split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION:
            raise unsupported_schema(version)
        conn.execute("COMMIT")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return _require_layout(conn)


def _require_layout(conn: sqlite3.Connection) -> bool:
    tables = {
        name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")
    }
    if "artifacts" in tables or "budget_ledger" not in tables:
        raise StoreError(
            "unsupported_format",
            "this store says version 6 but has the layout of an earlier threads-py release"
            " (artifacts inside threads.db). Export its threads with that release"
            " (threads export --bundle) and import them into a new store.",
        )
    return "request_deltas" in tables


def has_deltas_table(conn: sqlite3.Connection) -> bool:
    row = conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'request_deltas'"
    ).fetchone()
    return row is not None
