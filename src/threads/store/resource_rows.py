"""The resource ledger's statements and rules, shared by every engine (``?`` placeholders; the
Postgres engine swaps in its own with ``control_items.sql``).

Each engine runs these inside one transaction of its own: an owner move checks the owner's
lease (and that its branch is the row's tenant's) first, a gc move checks its claim, and the
UPDATE is guarded by the state it read, so a move decided on a stale read changes nothing.
"""

from __future__ import annotations

from typing import Any

from threads.errors import NotFoundError, StoreError
from threads.store.protocol import Lease
from threads.store.resources import RESOURCE_COLUMNS, Move, Resource, next_state

INSERT_PENDING = (
    "INSERT INTO resources(resource_id, tenant_id, owner_branch_id, provider, kind, state,"
    " operation_key, acquired_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)"
)
SELECT_ROW = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE operation_key = ?"
OWNER_TENANT = "SELECT tenant_id FROM branches WHERE branch_id = ?"
UPDATE_MOVE = (
    "UPDATE resources SET state = ?, ref = COALESCE(?, ref),"
    " expires_at = COALESCE(?, expires_at), released_at = ?, release_outcome = ?"
    " WHERE operation_key = ? AND state = ?"
)
TOUCH = (
    "UPDATE resources SET expires_at = ?, cleanup_claim = NULL"
    " WHERE operation_key = ? AND state = 'live' AND owner_branch_id = ?"
)
# A live row is collectable once it expired, or once no branch that can still run owns it.
COLLECTABLE = (
    "(state IN ('releasing', 'release_failed') OR (state = 'live' AND"
    " ((expires_at IS NOT NULL AND expires_at <= ?) OR NOT EXISTS (SELECT 1 FROM branches b"
    " WHERE b.branch_id = resources.owner_branch_id AND b.state <> 'fork_failed'))))"
)
CLAIM = "UPDATE resources SET cleanup_claim = ? WHERE operation_key = ? AND " + COLLECTABLE
CLAIM_HOLDS = (
    "SELECT 1 FROM resources WHERE operation_key = ? AND cleanup_claim = ?"
    " AND state IN ('releasing', 'release_failed', 'live')"
)
SELECT_COLLECTABLE = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE {COLLECTABLE}"


def select_rows(owner_branch_id: str | None, tenant_id: str | None) -> tuple[str, list[str]]:
    """``resources()``'s query and its arguments."""
    sql = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE 1 = 1"
    args: list[str] = []
    if owner_branch_id is not None:
        sql += " AND owner_branch_id = ?"
        args.append(owner_branch_id)
    if tenant_id is not None:
        sql += " AND tenant_id = ?"
        args.append(tenant_id)
    return sql + " ORDER BY resource_id", args


def resource(row: tuple[Any, ...] | None, operation_key: str) -> Resource:
    if row is None:
        raise NotFoundError(f"no resource with operation key {operation_key}")
    return Resource(*row)


def require_tenant(row: tuple[Any, ...] | None, tenant_id: str) -> None:
    """``row`` = ``OWNER_TENANT``'s answer for the owner lease's branch."""
    if row is None or row[0] != tenant_id:
        raise StoreError("stale_epoch", "the owner branch is not this tenant's")


def require_authority(row: Resource, lease: Lease | None, claim: str | None) -> None:
    """The mover is the row's owner branch (its lease checked apart) or gc holding its claim."""
    if lease is not None:
        if row.owner_branch_id != lease.branch_id:
            raise StoreError("stale_epoch", "this resource belongs to another branch")
        return
    if claim is None or row.cleanup_claim != claim:
        raise StoreError(
            "cleanup_claim_lost",
            f"resource {row.operation_key} is no longer claimed by this gc; another gc or its"
            " owner took it. Run gc again.",
        )


def move_args(
    row: Resource, move: Move, ref: str | None, expires_at: int | None, now: int
) -> tuple[Any, ...]:
    """``UPDATE_MOVE``'s arguments for ``move`` (refused when ``MOVES`` lacks it)."""
    state = next_state(row.state, move)
    released = state == "released"
    outcome = ("not_found" if move == "not_found" else "released") if released else None
    return (state, ref, expires_at, now if released else None, outcome, row.operation_key,
            row.state)
