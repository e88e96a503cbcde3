"""The resource ledger: every sandbox and snapshot a run creates, so it can be found and freed.

A row is written ``pending`` under its operation key *before* the provider is asked to create
anything, so a create whose answer a crash lost is found again by that key. Rows move only by
``MOVES`` (every other move is refused, ``released`` is final, nothing returns to ``pending``).
Owner moves are checked against the owner branch's live lease, in the same transaction;
cleanup moves (gc) against the row's ``cleanup_claim``, set by compare-and-set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Protocol

from threads.errors import StoreError
from threads.store.protocol import Lease

ResourceKind = Literal["sandbox", "snapshot"]
ResourceState = Literal["pending", "live", "releasing", "released", "release_failed", "unknown"]
Move = Literal[
    "found",
    "not_found",
    "unresolved",
    "release",
    "released",
    "release_error",
    "retry",
    "gc_release",
    "gc_retry",
]

MOVES: dict[tuple[str, str], ResourceState] = {
    ("pending", "found"): "live",
    ("pending", "not_found"): "released",
    ("pending", "unresolved"): "unknown",
    ("unknown", "found"): "live",
    ("unknown", "not_found"): "released",
    ("live", "release"): "releasing",
    ("live", "gc_release"): "releasing",
    ("releasing", "released"): "released",
    ("releasing", "not_found"): "released",
    ("releasing", "unresolved"): "unknown",
    ("releasing", "release_error"): "release_failed",
    ("release_failed", "retry"): "releasing",
    ("release_failed", "gc_retry"): "releasing",
}
COLLECTABLE: tuple[ResourceState, ...] = ("releasing", "release_failed", "live")

RESOURCE_COLUMNS = (
    "resource_id, tenant_id, owner_branch_id, provider, kind, ref, state, operation_key,"
    " acquired_at, expires_at, released_at, release_outcome, cleanup_claim"
)


@dataclass(frozen=True, slots=True)
class Resource:
    resource_id: str
    tenant_id: str
    owner_branch_id: str
    provider: str
    kind: ResourceKind
    ref: str | None
    state: ResourceState
    operation_key: str
    acquired_at: int
    expires_at: int | None
    released_at: int | None
    release_outcome: str | None
    cleanup_claim: str | None


def next_state(current: str, move: str) -> ResourceState:
    """Where ``move`` takes a row in state ``current``; a move ``MOVES`` lacks is refused."""
    target = MOVES.get((current, move))
    if target is None:
        raise StoreError(
            "invalid_argument",
            f"a {current} resource can't take the move {move!r}; it was changed by someone"
            " else (re-read the row and decide again)",
        )
    return target


class ResourceStore(Protocol):
    """What a store engine provides for the ledger."""

    async def owner_identity(self) -> str:
        """This store as the owner of what its rows name: the same for the store where it
        lives, another for any copy of it (``threads.store.identity``). A provider frees
        only what carries this identity."""
        ...

    async def resource_pending(
        self,
        *,
        operation_key: str,
        tenant_id: str,
        provider: str,
        kind: ResourceKind,
        lease: Lease,
    ) -> Resource:
        """Insert the ``pending`` row, checking ``lease`` is the owner branch's live lease."""
        ...

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
        """Apply ``move`` as the owner (``lease``) or as gc (``claim`` must still be the row's).
        ``stale_epoch`` / ``cleanup_claim_lost`` when that authority is gone."""
        ...

    async def resource_touch(self, operation_key: str, *, lease: Lease, expires_at: int) -> bool:
        """The owner uses a live row again: push its expiry out and void any gc claim on it.
        False when it is no longer live (gc got there first)."""
        ...

    async def resource_claim(self, operation_key: str, claim: str, *, now: int) -> bool:
        """gc's compare-and-set: write ``claim`` if the row is still collectable now."""
        ...

    async def resource_claim_holds(self, operation_key: str, claim: str) -> bool: ...

    async def resources(
        self, *, owner_branch_id: str | None = None, tenant_id: str | None = None
    ) -> list[Resource]: ...

    async def collectable_resources(self, *, now: int) -> list[Resource]:
        """Rows gc may take: releasing, release_failed, and live rows that expired or whose
        owner branch no longer runs (gone, or a failed fork)."""
        ...
