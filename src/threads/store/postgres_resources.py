"""The resource ledger (``threads.store.resources``) kept in a Postgres store.

The ``resources`` table (the v6 columns) is created on first use. Every owner move runs in one
transaction that locks the owner's lease row and the resource row first (``FOR UPDATE``), so a
takeover or a gc claim can't slip between the check and the write; every gc move checks its
claim the same way. The statements are the SQLite engine's (``threads.store.resource_rows``).
"""

from __future__ import annotations

from threads.store.control_items import sql
from threads.store.identity import postgres_owner
from threads.store.pg_group import Conn
from threads.store.postgres import PostgresStore, _lease_row
from threads.store.postgres_tables import transaction
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
from threads.store.rows import require_live

RESOURCES_DDL = """
CREATE TABLE IF NOT EXISTS resources (
  resource_id text PRIMARY KEY,
  tenant_id text NOT NULL,
  owner_branch_id text NOT NULL,
  provider text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('sandbox','snapshot')),
  ref text,
  state text NOT NULL CHECK (state IN
    ('pending','live','releasing','released','release_failed','unknown')),
  operation_key text NOT NULL UNIQUE,
  acquired_at bigint NOT NULL,
  expires_at bigint,
  released_at bigint,
  release_outcome text,
  cleanup_claim text
);
CREATE INDEX IF NOT EXISTS resources_by_owner ON resources(owner_branch_id, state);
"""
# The cluster (its system identifier, set once by initdb) and the database this store lives in.
_PLACE = "SELECT (SELECT system_identifier FROM pg_control_system()), current_database()"


def _pg(statement: str) -> bytes:
    return sql(statement, "%s").encode()


class PostgresResources:
    """See the module docstring; ``threads.store.capabilities.resources_of`` makes one."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._identity: str | None = None

    async def owner_identity(self) -> str:
        if self._identity is None:
            async with self.store._conn() as conn:
                cursor = await conn.execute(_PLACE)
                row = await cursor.fetchone()
            assert row is not None
            self._identity = postgres_owner(row[0], row[1], self.store.schema)
        return self._identity

    async def _owner(self, conn: Conn, lease: Lease, tenant_id: str) -> None:
        row, now = await _lease_row(conn, lease.branch_id, self.store._now(), lock=True)
        require_live(row, lease, now)
        cursor = await conn.execute(_pg(OWNER_TENANT), (lease.branch_id,))
        require_tenant(await cursor.fetchone(), tenant_id)

    async def _row(self, conn: Conn, operation_key: str, *, lock: bool = False) -> Resource:
        query = SELECT_ROW + (" FOR UPDATE" if lock else "")
        cursor = await conn.execute(_pg(query), (operation_key,))
        return resource(await cursor.fetchone(), operation_key)

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
        async with transaction(self.store, RESOURCES_DDL) as conn:
            await self._owner(conn, lease, tenant_id)
            await conn.execute(_pg(INSERT_PENDING), (
                operation_key, tenant_id, lease.branch_id, provider, kind, operation_key, now,
            ))
            return await self._row(conn, operation_key)

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
        async with transaction(self.store, RESOURCES_DDL) as conn:
            row = await self._row(conn, operation_key, lock=True)
            require_authority(row, lease, claim)
            if lease is not None:
                await self._owner(conn, lease, row.tenant_id)
            await conn.execute(_pg(UPDATE_MOVE), move_args(row, move, ref, expires_at, now))
            return await self._row(conn, operation_key)

    async def resource_touch(self, operation_key: str, *, lease: Lease, expires_at: int) -> bool:
        async with transaction(self.store, RESOURCES_DDL) as conn:
            row = await self._row(conn, operation_key, lock=True)
            await self._owner(conn, lease, row.tenant_id)
            cursor = await conn.execute(_pg(TOUCH), (expires_at, operation_key, lease.branch_id))
            return cursor.rowcount == 1

    async def resource_claim(self, operation_key: str, claim: str, *, now: int) -> bool:
        async with transaction(self.store, RESOURCES_DDL) as conn:
            cursor = await conn.execute(_pg(CLAIM), (claim, operation_key, now))
            return cursor.rowcount == 1

    async def resource_claim_holds(self, operation_key: str, claim: str) -> bool:
        async with transaction(self.store, RESOURCES_DDL) as conn:
            cursor = await conn.execute(_pg(CLAIM_HOLDS), (operation_key, claim))
            return await cursor.fetchone() is not None

    async def resources(
        self, *, owner_branch_id: str | None = None, tenant_id: str | None = None
    ) -> list[Resource]:
        query, args = select_rows(owner_branch_id, tenant_id)
        async with transaction(self.store, RESOURCES_DDL) as conn:
            cursor = await conn.execute(_pg(query), args)
            return [Resource(*r) for r in await cursor.fetchall()]

    async def collectable_resources(self, *, now: int) -> list[Resource]:
        async with transaction(self.store, RESOURCES_DDL) as conn:
            cursor = await conn.execute(_pg(SELECT_COLLECTABLE + " ORDER BY resource_id"), (now,))
            return [Resource(*r) for r in await cursor.fetchall()]
