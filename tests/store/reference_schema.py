"""The reference's ``store.sql`` (store v6) as far as the specs give it, written here from the
specs alone (never from ``threads.store.layout``), so a test can run it over a directory this
project wrote, as the reference does on every open, or lay out a directory the way it does.

Sources: ``shared/spec/LOG-FORMAT.md`` §2, ``UPSTREAM-DIGEST.md`` §5, §2.4, §1.3, §1.6, and
issue 28 item 9 (``inbox.inbox_id`` and ``provider_audit.audit_id`` are ``INTEGER PRIMARY KEY``;
``inbox.delivery_id`` and ``thread_id`` nullable; an index ``teams_log_branch`` on ``teams``).
Types the specs do not state are TEXT for ids and names and INTEGER for seqs, counts and times;
the CHECKs are the value domains the digest states (whether store.sql states them as CHECKs is
not given).

What the specs do not give is modelled so that it can't match anything of ours by chance: the
tables named without columns (``UNKNOWN_LAYOUT``) get a column ``reference_only`` (their real
columns are unknown), and an index whose columns are unknown is put on that column or on the
columns the digest names nearest to it (said beside each).
"""

from __future__ import annotations

# Tables the specs give with their columns: {table: {column: (declared type, primary key
# position, 0 when not part of it)}}.
KNOWN_COLUMNS: dict[str, dict[str, tuple[str, int]]] = {}

_TABLES = """
threads (thread_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, UNIQUE (thread_id, tenant_id))
branches (branch_id TEXT PRIMARY KEY, thread_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
  parent_branch_id TEXT REFERENCES branches(branch_id), fork_at_seq INTEGER,
  header_line BLOB NOT NULL, state TEXT NOT NULL, head_seq INTEGER NOT NULL,
  head_hash TEXT NOT NULL, head_verified INTEGER NOT NULL, dropped_ref TEXT,
  FOREIGN KEY (thread_id, tenant_id) REFERENCES threads(thread_id, tenant_id))
events (branch_id TEXT NOT NULL REFERENCES branches(branch_id), seq INTEGER NOT NULL,
  event_id TEXT NOT NULL, type TEXT NOT NULL, type_version INTEGER NOT NULL,
  critical INTEGER NOT NULL, epoch INTEGER NOT NULL, line BLOB NOT NULL,
  PRIMARY KEY (branch_id, seq), UNIQUE (branch_id, event_id))
leases (branch_id TEXT PRIMARY KEY, holder_id TEXT NOT NULL, epoch INTEGER NOT NULL,
  expires_at INTEGER NOT NULL)
resources (resource_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,
  owner_branch_id TEXT NOT NULL, provider TEXT NOT NULL, kind TEXT NOT NULL, ref TEXT,
  state TEXT NOT NULL, operation_key TEXT NOT NULL UNIQUE, acquired_at INTEGER NOT NULL,
  expires_at INTEGER, released_at INTEGER, release_outcome TEXT, cleanup_claim TEXT)
budget_ledger (budget_id TEXT NOT NULL, limit_name TEXT NOT NULL CHECK (limit_name IN
  ('max_cost_nanos','max_input_tokens','max_output_tokens','max_model_requests')),
  attempt_key TEXT NOT NULL, amount INTEGER NOT NULL CHECK (amount >= 0),
  state TEXT NOT NULL CHECK (state IN ('reserved','settled')),
  PRIMARY KEY (budget_id, limit_name, attempt_key))
approvals (challenge_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, installation_id TEXT,
  thread_id TEXT NOT NULL, branch_id TEXT NOT NULL, call_id TEXT NOT NULL,
  args_hash TEXT NOT NULL, file_hashes BLOB NOT NULL, expires_at INTEGER NOT NULL,
  state TEXT NOT NULL, decided_by TEXT, decided_at INTEGER)
observer_cursors (observer TEXT NOT NULL, branch_id TEXT NOT NULL REFERENCES branches(branch_id),
  seq INTEGER NOT NULL, PRIMARY KEY (observer, branch_id))
tombstones (thread_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, deleted_at INTEGER NOT NULL)
run_receipts (tenant_id TEXT NOT NULL, operation TEXT NOT NULL, idempotency_key TEXT NOT NULL,
  principal_key TEXT NOT NULL, body_hash TEXT NOT NULL, thread_id TEXT NOT NULL,
  branch_id TEXT NOT NULL, run_id TEXT NOT NULL, created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, operation, idempotency_key))
inbox (inbox_id INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, channel TEXT NOT NULL,
  installation_id TEXT NOT NULL, item_key TEXT NOT NULL, delivery_id TEXT, thread_id TEXT,
  item BLOB NOT NULL, received_at INTEGER NOT NULL, consumed_seq INTEGER,
  UNIQUE (tenant_id, channel, installation_id, item_key))
channel_threads (tenant_id TEXT NOT NULL, channel TEXT NOT NULL, installation_id TEXT NOT NULL,
  address TEXT NOT NULL, thread_id TEXT NOT NULL,
  PRIMARY KEY (tenant_id, channel, installation_id, address))
questions (tenant_id TEXT NOT NULL, branch_id TEXT NOT NULL, call_id TEXT NOT NULL,
  expires_at INTEGER NOT NULL, state TEXT NOT NULL CHECK (state IN ('open','answered','expired')),
  decided_at INTEGER, PRIMARY KEY (branch_id, call_id))
memory_bindings (namespace TEXT NOT NULL, record_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
  agent TEXT NOT NULL, scope TEXT NOT NULL, PRIMARY KEY (namespace, record_id))
knowledge_bindings (namespace TEXT NOT NULL, record_id TEXT NOT NULL, tenant_id TEXT NOT NULL,
  agent TEXT NOT NULL, scope TEXT NOT NULL, PRIMARY KEY (namespace, record_id))
provider_audit (audit_id INTEGER PRIMARY KEY, tenant_id TEXT NOT NULL, kind TEXT NOT NULL,
  code TEXT NOT NULL, namespace TEXT NOT NULL, record_id TEXT NOT NULL, at INTEGER NOT NULL)
schedule_threads (tenant_id TEXT NOT NULL, schedule_id TEXT NOT NULL, thread_id TEXT NOT NULL,
  current INTEGER NOT NULL, created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, schedule_id, thread_id))
pending_wakes (branch_id TEXT NOT NULL, child_thread_id TEXT NOT NULL,
  PRIMARY KEY (branch_id, child_thread_id))
observers (name TEXT PRIMARY KEY, registered_at INTEGER NOT NULL)
observer_losses (observer TEXT NOT NULL, tenant_id TEXT NOT NULL, thread_id TEXT NOT NULL,
  unchecked_events INTEGER NOT NULL, deleted_at INTEGER NOT NULL, reported_at INTEGER,
  PRIMARY KEY (observer, thread_id, deleted_at))
"""
# Named by the digest without their columns (LOG-FORMAT §2 counts eight Teams tables; the
# digest names seven, so one is unknown even by name).
UNKNOWN_LAYOUT = (
    "schedule_occurrences", "teams", "team_members", "mail", "asks", "monitors",
    "operator_receipts", "team_feed",
)
# The indexes the specs name (or describe), as far as they give them.
_INDEXES = """
CREATE INDEX IF NOT EXISTS questions_due ON questions(state, expires_at);
-- named and conditioned by the digest; its columns are not given: the schedule's key
CREATE UNIQUE INDEX IF NOT EXISTS schedule_threads_current
  ON schedule_threads(tenant_id, schedule_id) WHERE current = 1;
-- "an index on unreported rows": its name and columns are not given
CREATE INDEX IF NOT EXISTS observer_losses_unreported_ref
  ON observer_losses(observer) WHERE reported_at IS NULL;
-- "a partial index on pending rows": its name, columns and condition are not given
CREATE INDEX IF NOT EXISTS schedule_occurrences_pending_ref
  ON schedule_occurrences(reference_only);
-- named by issue 28; the column it names is not given
CREATE INDEX IF NOT EXISTS teams_log_branch ON teams(reference_only);
"""
# What the newest reference Python expects beyond the v6 text (UPSTREAM-DIGEST §5 "Caution").
NEWER_INDEXES = """
CREATE UNIQUE INDEX IF NOT EXISTS branches_root ON branches(thread_id)
  WHERE parent_branch_id IS NULL;
CREATE INDEX IF NOT EXISTS run_receipts_by_principal
  ON run_receipts(tenant_id, operation, principal_key, created_at);
"""


def _create(spec: str) -> str:
    return f"CREATE TABLE IF NOT EXISTS {spec.strip()} STRICT;\n"


def _statements() -> list[str]:
    tables, current = [], ""
    for line in _TABLES.strip().splitlines():
        if not line.startswith("  ") and current:
            tables.append(current)
            current = ""
        current += line + "\n"
    tables.append(current)
    return tables


def _columns(spec: str) -> dict[str, tuple[str, int]]:
    body = spec[spec.index("(") + 1 : spec.rindex(")")]
    parts, depth, part = [], 0, ""
    for char in body:
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(part.strip())
            part = ""
        else:
            part += char
    parts.append(part.strip())
    key: list[str] = []
    columns: dict[str, str] = {}
    for part in parts:
        words = part.split()
        if words[0] == "PRIMARY":
            key = [c.strip() for c in part[part.index("(") + 1 : part.index(")")].split(",")]
        elif words[0] not in ("UNIQUE", "FOREIGN"):
            columns[words[0]] = words[1]
            if "PRIMARY KEY" in part:
                key = [words[0]]
    return {name: (kind, key.index(name) + 1 if name in key else 0)
            for name, kind in columns.items()}


for _spec in _statements():
    KNOWN_COLUMNS[_spec.split()[0]] = _columns(_spec)

REFERENCE_DDL = (
    "".join(_create(spec) for spec in _statements())
    + "".join(_create(f"{name} (reference_only TEXT)") for name in UNKNOWN_LAYOUT)
    + _INDEXES
    + "PRAGMA user_version = 6;\n"
)
