"""The resource ledger (``threads.store.resources``) kept in a SQLite store's ``threads.db``.

The ``resources`` table is the v6 one (``threads.store.sqlite_schema``). Every owner move runs in
one ``BEGIN IMMEDIATE`` transaction that checks the owner's lease first; every gc move checks
its claim the same way.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

from threads.errors import ConfigError, NotFound, StoreError
from threads.store.protocol import Lease
from threads.store.resources import (
    RESOURCE_COLUMNS,
    Move,
    Resource,
    ResourceKind,
    next_state,
)
from threads.store.sqlite import SQLiteStore, _check_lease
from threads.store.sqlite_tables import one_per_store

T = TypeVar("T")

class SQLiteResources:
    """See the module docstring; ``resources_of(store)`` makes one."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def _txn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await self.store._run(self.store._txn(fn))

    async def resource_pending(
        self,
        *,
        operation_key: str,
        tenant_id: str,
        provider: str,
        kind: ResourceKind,
        lease: Lease,
    ) -> Resource:
        now = self.store.clock.now_ms()

        def insert(conn: sqlite3.Connection) -> Resource:
            _owner(conn, lease, tenant_id, now)
            conn.execute(
                "INSERT INTO resources(resource_id, tenant_id, owner_branch_id, provider, kind,"
                " state, operation_key, acquired_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)",
                (operation_key, tenant_id, lease.branch_id, provider, kind, operation_key, now),
            )
            return _row(conn, operation_key)

        return await self._txn(insert)

    async def resource_move(
        self,
        operation_key: str,
        move: Move,
        *,
        lease: Lease | None = None,
        claim: str | None = None,
        ref: str | None = None,
        expires_at: int | None = None,
    ) -> Resource:
        now = self.store.clock.now_ms()

        def apply(conn: sqlite3.Connection) -> Resource:
            row = _row(conn, operation_key)
            if lease is not None:
                if row.owner_branch_id != lease.branch_id:
                    raise StoreError("stale_epoch", "this resource belongs to another branch")
                _owner(conn, lease, row.tenant_id, now)
            elif claim is None or row.cleanup_claim != claim:
                raise StoreError(
                    "cleanup_claim_lost",
                    f"resource {operation_key} is no longer claimed by this gc; another gc or"
                    " its owner took it. Run gc again.",
                )
            state = next_state(row.state, move)
            released = state == "released"
            conn.execute(
                "UPDATE resources SET state = ?, ref = COALESCE(?, ref),"
                " expires_at = COALESCE(?, expires_at), released_at = ?,"
                " release_outcome = ? WHERE operation_key = ? AND state = ?",
                (
                    state,
                    ref,
                    expires_at,
                    now if released else None,
                    ("not_found" if move == "not_found" else "released") if released else None,
                    operation_key,
                    row.state,
                ),
            )
            return _row(conn, operation_key)

        return await self._txn(apply)

    async def resource_touch(self, operation_key: str, *, lease: Lease, expires_at: int) -> bool:
        now = self.store.clock.now_ms()

        def touch(conn: sqlite3.Connection) -> bool:
            row = _row(conn, operation_key)
            _owner(conn, lease, row.tenant_id, now)
            cursor = conn.execute(
                "UPDATE resources SET expires_at = ?, cleanup_claim = NULL"
                " WHERE operation_key = ? AND state = 'live' AND owner_branch_id = ?",
                (expires_at, operation_key, lease.branch_id),
            )
            return cursor.rowcount == 1

        return await self._txn(touch)

    async def resource_claim(self, operation_key: str, claim: str, *, now: int) -> bool:
        def cas(conn: sqlite3.Connection) -> bool:
            cursor = conn.execute(
                "UPDATE resources SET cleanup_claim = ? WHERE operation_key = ? AND "
                + _COLLECTABLE,
                (claim, operation_key, now),
            )
            return cursor.rowcount == 1

        return await self._txn(cas)

    async def resource_claim_holds(self, operation_key: str, claim: str) -> bool:
        def holds(conn: sqlite3.Connection) -> bool:
            found = conn.execute(
                "SELECT 1 FROM resources WHERE operation_key = ? AND cleanup_claim = ?"
                " AND state IN ('releasing', 'release_failed', 'live')",
                (operation_key, claim),
            ).fetchone()
            return found is not None

        return await self._txn(holds)

    async def resources(
        self, *, owner_branch_id: str | None = None, tenant_id: str | None = None
    ) -> list[Resource]:
        def rows(conn: sqlite3.Connection) -> list[Resource]:
            sql = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE 1 = 1"
            args: list[str] = []
            if owner_branch_id is not None:
                sql += " AND owner_branch_id = ?"
                args.append(owner_branch_id)
            if tenant_id is not None:
                sql += " AND tenant_id = ?"
                args.append(tenant_id)
            return [_resource(r) for r in conn.execute(sql + " ORDER BY resource_id", args)]

        return await self._txn(rows)

    async def collectable_resources(self, *, now: int) -> list[Resource]:
        def rows(conn: sqlite3.Connection) -> list[Resource]:
            sql = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE " + _COLLECTABLE
            return [_resource(r) for r in conn.execute(sql + " ORDER BY resource_id", (now,))]

        return await self._txn(rows)


_LEDGERS: weakref.WeakKeyDictionary[SQLiteStore, SQLiteResources] = weakref.WeakKeyDictionary()

# A live row is collectable once it expired, or once no branch that can still run owns it.
_COLLECTABLE = (
    "(state IN ('releasing', 'release_failed') OR (state = 'live' AND"
    " ((expires_at IS NOT NULL AND expires_at <= ?) OR NOT EXISTS (SELECT 1 FROM branches b"
    " WHERE b.branch_id = resources.owner_branch_id AND b.state <> 'fork_failed'))))"
)


def resources_of(store: object) -> SQLiteResources:
    """The ledger of ``store``. Only the SQLite store keeps one so far."""
    if not isinstance(store, SQLiteStore):
        raise ConfigError(
            "capability_missing",
            "sandboxes need the resource ledger, which only the SQLite store keeps so far;"
            " use threads.sqlite(...) for agents with a sandbox",
        )
    return one_per_store(_LEDGERS, store, SQLiteResources)


def _owner(conn: sqlite3.Connection, lease: Lease, tenant_id: str, now: int) -> None:
    _check_lease(conn, lease, now)
    row = conn.execute(
        "SELECT tenant_id FROM branches WHERE branch_id = ?", (lease.branch_id,)
    ).fetchone()
    if row is None or row[0] != tenant_id:
        raise StoreError("stale_epoch", "the owner branch is not this tenant's")


def _row(conn: sqlite3.Connection, operation_key: str) -> Resource:
    row = conn.execute(
        f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE operation_key = ?", (operation_key,)
    ).fetchone()
    if row is None:
        raise NotFound(f"no resource with operation key {operation_key}")
    return _resource(row)


def _resource(row: tuple[Any, ...]) -> Resource:
    return Resource(*row)
