"""Garbage collection of sandboxes and snapshots no branch needs any more (``threads gc``).

gc holds no branch lease. For each collectable row (``releasing``, ``release_failed``, or
``live`` and expired or owned by no branch that can still run) it writes a fresh claim by
compare-and-set, moves the row to ``releasing`` under that claim, and releases it through a
context whose fence is "the row still carries my claim". A run that touches its live row voids
the claim, so gc never frees what a run is using. ``pending`` and ``unknown`` rows are never
touched: only their owner (or an operator) can tell what they are.

Every release carries the store's identity (``SandboxContext.owner``): a provider frees only
what this store made. A row naming a sandbox another store made (this store is a copy of that
one, sharing its sandbox root) is left alone: nothing of it is killed or deleted, and the row
becomes ``unknown`` (``report.not_owned``) for an operator.

Orphans: a provider that can list what it made (``Labelled``: Docker lists its labelled
containers) has each one this store made whose ledger row is ``released`` removed (and, when
an operator asks, each one this store has no row for).
Such a container can never be needed: a row is written ``pending`` before its create is asked
for, and ``released`` is final. The fence of each removal re-reads the row, so a row that turned
up (another store's runs share the daemon?) stops it. Containers of a ``pending``, ``unknown``
or live row are never touched here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from threads.clock import Clock
from threads.errors import StoreError
from threads.log.ids import uuid7
from threads.sandbox.protocol import Sandbox, SandboxContext, SandboxError
from threads.store.resources import Resource, ResourceStore


@dataclass
class GcReport:
    released: list[str] = field(default_factory=list)
    already_gone: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    unknown: list[str] = field(default_factory=list)
    lost_claims: list[str] = field(default_factory=list)
    skipped_pending: int = 0
    skipped_unknown: int = 0
    no_provider: list[str] = field(default_factory=list)
    orphans_removed: list[str] = field(default_factory=list)
    foreign_left: list[str] = field(default_factory=list)
    not_owned: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        out = [
            f"released {len(self.released)}, already gone {len(self.already_gone)},"
            f" failed {len(self.failed)} (gc retries them), unknown {len(self.unknown)},"
            f" taken back by a run or another gc {len(self.lost_claims)}",
            f"left alone: {self.skipped_pending} pending, {self.skipped_unknown} unknown"
            " (only their owner or an operator can settle them)",
            f"orphans removed (their ledger row is released): {len(self.orphans_removed)}",
        ]
        if self.not_owned:
            out.append(
                f"left alone: {len(self.not_owned)} sandbox(es) or snapshot(s) another store"
                " made (this store is a copy of it, or it of this one, sharing the sandbox"
                " root); their rows are now unknown: " + ", ".join(sorted(self.not_owned))
            )
        if self.foreign_left:
            out.append(
                f"left alone: {len(self.foreign_left)} threads container(s) this store has no"
                " row for (another store's runs on the same engine, or this store's rows were"
                " lost): " + ", ".join(sorted(self.foreign_left))
                + "; --docker-remove-unknown removes them"
            )
        if self.no_provider:
            providers = ", ".join(sorted(set(self.no_provider)))
            out.append(f"no provider configured here for: {providers}")
        return out


async def collect(
    resources: ResourceStore,
    sandboxes: Mapping[str, Sandbox],
    clock: Clock,
    *,
    remove_unknown: bool = False,
) -> GcReport:
    """Release what no live branch needs (see the README's ``threads gc``). A labelled sandbox
    this store has no row for is someone else's until an operator says otherwise
    (``remove_unknown``): another store's runs may use the same engine."""
    report = GcReport()
    owner = await resources.owner_identity()
    now = clock.now_ms()
    for row in await resources.resources():
        if row.state == "pending":
            report.skipped_pending += 1
        elif row.state == "unknown":
            report.skipped_unknown += 1
    for row in await resources.collectable_resources(now=now):
        sandbox = sandboxes.get(row.provider)
        if sandbox is None:
            report.no_provider.append(row.provider)
            continue
        await _collect_one(resources, sandbox, row, clock=clock, owner=owner, report=report)
    for sandbox in sandboxes.values():
        if isinstance(sandbox, Labelled):
            await _remove_orphans(
                resources, sandbox, owner, report, remove_unknown=remove_unknown
            )
    return report


@runtime_checkable
class Labelled(Protocol):
    """A provider that can list every sandbox it made, with the operation key it was made
    under and the store that made it (``threads.docker.DockerSandbox``)."""

    async def labelled(self, ctx: SandboxContext) -> list[tuple[str, str, str]]: ...


async def _remove_orphans(
    resources: ResourceStore, sandbox: Sandbox, owner: str, report: GcReport, *,
    remove_unknown: bool,
) -> None:
    """Remove every listed sandbox this store made whose ledger row is released (and, when
    asked, those with no row here); report the row-less ones left alone."""
    assert isinstance(sandbox, Labelled)

    def orphaned(rows: list[Resource], key: str, made_by: str) -> bool:
        row = next((r for r in rows if r.operation_key == key), None)
        if row is None:
            return remove_unknown
        return row.state == "released" and made_by == owner

    ctx = SandboxContext(_listing, authority="cleanup", owner=owner)
    listed = await sandbox.labelled(ctx)
    rows = await resources.resources()
    known = {r.operation_key for r in rows}
    for ref, key, made_by in listed:
        if not orphaned(rows, key, made_by):
            if key not in known:
                report.foreign_left.append(ref)
            continue

        async def still_orphaned(key: str = key, made_by: str = made_by) -> None:
            if not orphaned(await resources.resources(), key, made_by):
                raise SandboxError("cleanup_claim_lost", f"a ledger row for {key} turned up")

        # The container's own owner: one with no row here may be another store's, removed
        # only because an operator asked (--docker-remove-unknown).
        removal = SandboxContext(still_orphaned, "cleanup", owner=made_by)
        try:
            await sandbox.release("sandbox", ref, removal)
        except SandboxError:
            continue  # left for the next gc
        report.orphans_removed.append(ref)


async def _listing() -> None:
    return None  # listing only reads; each removal has its own fence


async def _collect_one(
    resources: ResourceStore, sandbox: Sandbox, row: Resource, *, clock: Clock, owner: str,
    report: GcReport,
) -> None:
    key = row.operation_key
    claim = uuid7(clock.now_ms())
    if not await resources.resource_claim(key, claim, now=clock.now_ms()):
        report.lost_claims.append(key)
        return

    async def fence() -> None:
        if not await resources.resource_claim_holds(key, claim):
            raise SandboxError("cleanup_claim_lost", f"gc's claim on {key} was taken back")

    ctx = SandboxContext(fence, authority="cleanup", owner=owner)
    try:
        if row.state == "live":
            await resources.resource_move(key, "gc_release", claim=claim)
        elif row.state == "release_failed":
            await resources.resource_move(key, "gc_retry", claim=claim)
        if row.ref is None:
            await resources.resource_move(key, "not_found", claim=claim)
            report.already_gone.append(key)
            return
        try:
            outcome = await sandbox.release(row.kind, row.ref, ctx)
        except SandboxError as exc:
            if exc.code == "cleanup_claim_lost":
                report.lost_claims.append(key)
                return
            if exc.code == "permission_denied":  # another store's: never ours to free
                await resources.resource_move(key, "unresolved", claim=claim)
                report.not_owned.append(row.ref)
                return
            await resources.resource_move(key, "release_error", claim=claim)
            report.failed.append(key)
            return
        if outcome == "already_gone":
            final = sandbox.info.lookup_create == "final"
            await resources.resource_move(key, "not_found" if final else "unresolved", claim=claim)
            (report.already_gone if final else report.unknown).append(key)
            return
        await resources.resource_move(key, "released", claim=claim)
        report.released.append(key)
    except StoreError as exc:
        if exc.code != "cleanup_claim_lost":
            raise
        report.lost_claims.append(key)
