"""The resource ledger (``threads.store.resources``) kept in a SQLite store's ``threads.db``.

The ``resources`` table is the v6 one (``threads.store.sqlite_schema``). Every owner move runs in
one ``BEGIN IMMEDIATE`` transaction that checks the owner's lease first; every gc move checks
its claim the same way.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from typing import TypeVar

from threads.store.identity import sqlite_owner
from threads.store.protocol import Lease
from threads.store.resource_rows import (
    CLAIM,
    CLAIM_HOLDS,
    INSERT_PENDING,
    OWNER_TENANT,
    SELECT_COLLECTABLE,
    SELECT_ROW,
    TOUCH,
    UPDATE_MOVE,
    move_args,
    require_authority,
    require_tenant,
    resource,
    select_rows,
)
from threads.store.resources import Move, Resource, ResourceKind
from threads.store.sqlite import SQLiteStore, _check_lease

T = TypeVar("T")

class SQLiteResources:
    """See the module docstring; ``threads.store.capabilities.resources_of`` makes one."""

    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def owner_identity(self) -> str:
        return sqlite_owner(self.store)

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
            conn.execute(INSERT_PENDING, (
                operation_key, tenant_id, lease.branch_id, provider, kind, operation_key, now,
            ))
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
            require_authority(row, lease, claim)
            if lease is not None:
                _owner(conn, lease, row.tenant_id, now)
            conn.execute(UPDATE_MOVE, move_args(row, move, ref, expires_at, now))
            return _row(conn, operation_key)

        return await self._txn(apply)

    async def resource_touch(self, operation_key: str, *, lease: Lease, expires_at: int) -> bool:
        now = self.store.clock.now_ms()

        def touch(conn: sqlite3.Connection) -> bool:
            row = _row(conn, operation_key)
            _owner(conn, lease, row.tenant_id, now)
            cursor = conn.execute(TOUCH, (expires_at, operation_key, lease.branch_id))
            return cursor.rowcount == 1

        return await self._txn(touch)

    async def resource_claim(self, operation_key: str, claim: str, *, now: int) -> bool:
        def cas(conn: sqlite3.Connection) -> bool:
            return conn.execute(CLAIM, (claim, operation_key, now)).rowcount == 1

        return await self._txn(cas)

    async def resource_claim_holds(self, operation_key: str, claim: str) -> bool:
        def holds(conn: sqlite3.Connection) -> bool:
            return conn.execute(CLAIM_HOLDS, (operation_key, claim)).fetchone() is not None

        return await self._txn(holds)

    async def resources(
        self, *, owner_branch_id: str | None = None, tenant_id: str | None = None
    ) -> list[Resource]:
        sql, args = select_rows(owner_branch_id, tenant_id)

        def rows(conn: sqlite3.Connection) -> list[Resource]:
            return [Resource(*r) for r in conn.execute(sql, args)]

        return await self._txn(rows)

    async def collectable_resources(self, *, now: int) -> list[Resource]:
        def rows(conn: sqlite3.Connection) -> list[Resource]:
            sql = SELECT_COLLECTABLE + " ORDER BY resource_id"
            return [Resource(*r) for r in conn.execute(sql, (now,))]

        return await self._txn(rows)


def _owner(conn: sqlite3.Connection, lease: Lease, tenant_id: str, now: int) -> None:
    _check_lease(conn, lease, now)
    require_tenant(conn.execute(OWNER_TENANT, (lease.branch_id,)).fetchone(), tenant_id)


def _row(conn: sqlite3.Connection, operation_key: str) -> Resource:
    return resource(conn.execute(SELECT_ROW, (operation_key,)).fetchone(), operation_key)
