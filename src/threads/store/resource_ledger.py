"""The resource ledger (``threads.store.resources``) kept in a store's ``resources`` table, for
every engine: its statements, rules and flows, and ``ResourceLedger``, the view a store gives.

Every move runs in one transaction of its own (a Postgres store creates the table on first use):
an owner move checks the owner's lease (and that its branch is the row's tenant's) first, a gc
move checks its claim, and the UPDATE is guarded by the state it read, so a move decided on a
stale read changes nothing. On Postgres the lease row and the resource row are locked first
(``{lock}``), so a takeover or a gc claim can't slip between the check and the write; SQLite's
``BEGIN IMMEDIATE`` holds the one write lock throughout.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from threads.errors import NotFoundError, StoreError
from threads.store import flows
from threads.store.core import StoreCore
from threads.store.flows import Access, Flow, Now
from threads.store.layout import RESOURCES
from threads.store.protocol import Lease
from threads.store.resources import RESOURCE_COLUMNS, Move, Resource, ResourceKind, next_state
from threads.store.statements import Query

T = TypeVar("T")
_TABLES = (RESOURCES,)

INSERT_PENDING = (
    "INSERT INTO resources(resource_id, tenant_id, owner_branch_id, provider, kind, state,"
    " operation_key, acquired_at) VALUES (?, ?, ?, ?, ?, 'pending', ?, ?)"
)
SELECT_ROW = f"SELECT {RESOURCE_COLUMNS} FROM resources WHERE operation_key = ?"
SELECT_ROW_LOCKED = SELECT_ROW + "{lock}"
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


# ---- flows ---------------------------------------------------------------------------------


def _row(operation_key: str, *, lock: bool = False) -> Flow[Resource]:
    found = yield from flows.one(SELECT_ROW_LOCKED if lock else SELECT_ROW, operation_key)
    return resource(found, operation_key)


def _owner(lease: Lease, tenant_id: str, now: Now) -> Flow[None]:
    yield from flows.check_lease(lease, now, lock=True)
    require_tenant((yield from flows.one(OWNER_TENANT, lease.branch_id)), tenant_id)


def _pending(
    operation_key: str, *, tenant_id: str, provider: str, kind: ResourceKind, lease: Lease,
    now: Now, at: int,
) -> Flow[Resource]:
    yield from _owner(lease, tenant_id, now)
    yield Query(INSERT_PENDING, (
        operation_key, tenant_id, lease.branch_id, provider, kind, operation_key, at,
    ))
    return (yield from _row(operation_key))


def _move(
    operation_key: str, move: Move, *, lease: Lease | None, claim: str | None, ref: str | None,
    expires_at: int | None, now: Now, at: int,
) -> Flow[Resource]:
    row = yield from _row(operation_key, lock=True)
    require_authority(row, lease, claim)
    if lease is not None:
        yield from _owner(lease, row.tenant_id, now)
    yield Query(UPDATE_MOVE, move_args(row, move, ref, expires_at, at))
    return (yield from _row(operation_key))


def _touch(operation_key: str, lease: Lease, expires_at: int, now: Now) -> Flow[bool]:
    row = yield from _row(operation_key, lock=True)
    yield from _owner(lease, row.tenant_id, now)
    return (yield from flows.changed(TOUCH, expires_at, operation_key, lease.branch_id)) == 1


def _resources(query: str, *args: Any) -> Flow[list[Resource]]:
    return [Resource(*row) for row in (yield from flows.rows(query, *args))]


class ResourceLedger:
    """A store's ledger (``threads.store.capabilities.resources_of`` makes one per store)."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    async def _txn(self, make: Callable[[], Flow[T]]) -> T:
        return await self.store._transact(Access.WRITE, make, _TABLES)

    async def owner_identity(self) -> str:
        return await self.store.owner_identity()

    async def resource_pending(
        self,
        *,
        operation_key: str,
        tenant_id: str,
        provider: str,
        kind: ResourceKind,
        lease: Lease,
    ) -> Resource:
        at, now = self.store.clock.now_ms(), self.store._lease_now
        return await self._txn(
            lambda: _pending(operation_key, tenant_id=tenant_id, provider=provider, kind=kind,
                             lease=lease, now=now, at=at)
        )

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
        at, now = self.store.clock.now_ms(), self.store._lease_now
        return await self._txn(
            lambda: _move(operation_key, move, lease=lease, claim=claim, ref=ref,
                          expires_at=expires_at, now=now, at=at)
        )

    async def resource_touch(self, operation_key: str, *, lease: Lease, expires_at: int) -> bool:
        now = self.store._lease_now
        return await self._txn(lambda: _touch(operation_key, lease, expires_at, now))

    async def resource_claim(self, operation_key: str, claim: str, *, now: int) -> bool:
        changed = await self._txn(lambda: flows.changed(CLAIM, claim, operation_key, now))
        return changed == 1

    async def resource_claim_holds(self, operation_key: str, claim: str) -> bool:
        row = await self._txn(lambda: flows.one(CLAIM_HOLDS, operation_key, claim))
        return row is not None

    async def resources(
        self, *, owner_branch_id: str | None = None, tenant_id: str | None = None
    ) -> list[Resource]:
        query, args = select_rows(owner_branch_id, tenant_id)
        return await self._txn(lambda: _resources(query, *args))

    async def collectable_resources(self, *, now: int) -> list[Resource]:
        return await self._txn(
            lambda: _resources(SELECT_COLLECTABLE + " ORDER BY resource_id", now)
        )
