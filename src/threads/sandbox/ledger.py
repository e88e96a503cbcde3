"""Owner-side use of the resource ledger: every create is written down before it is asked for.

``Owner`` is one branch's view, bound to its lease: ``settle_pending`` resolves rows a crash left
``pending`` by looking their keys up (found → ``live``, not found → ``released`` only when the
provider's lookup is final, else ``unknown`` for an operator); ``sandbox()`` attaches to the
branch's live sandbox or creates one under a fresh key; ``snapshot()`` and ``restore()`` do the
same for snapshots and forks. The ``pending`` row always commits before the provider call.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from threads.clock import Clock
from threads.log.ids import uuid7
from threads.sandbox.protocol import (
    Sandbox,
    SandboxContext,
    SandboxError,
    SandboxSession,
    SnapshotData,
)
from threads.store.protocol import Lease
from threads.store.resources import Resource, ResourceKind, ResourceStore

DEFAULT_LIFETIME_MS = 24 * 60 * 60 * 1000  # an idle sandbox is gc's after a day
LOST_ANSWER = ("unavailable", "timeout")


@dataclass(frozen=True, slots=True)
class Owner:
    resources: ResourceStore
    sandbox: Sandbox
    clock: Clock
    tenant_id: str
    lease_of: Callable[[], Lease]
    ctx: SandboxContext
    lifetime_ms: int = DEFAULT_LIFETIME_MS

    @property
    def branch_id(self) -> str:
        return self.lease_of().branch_id

    async def _pending(self, kind: ResourceKind) -> str:
        key = uuid7(self.clock.now_ms())
        await self.resources.resource_pending(
            operation_key=key,
            tenant_id=self.tenant_id,
            provider=self.sandbox.info.provider,
            kind=kind,
            lease=self.lease_of(),
        )
        return key

    async def _live(self, key: str, ref: str) -> None:
        await self.resources.resource_move(
            key,
            "found",
            lease=self.lease_of(),
            ref=ref,
            expires_at=self.clock.now_ms() + self.lifetime_ms,
        )

    async def _resolve_lost(self, row: Resource) -> str | None:
        """A create whose answer was lost: find it by its key. Returns its ref when found."""
        await self.ctx.fence()
        finality = (
            self.sandbox.info.lookup_create
            if row.kind == "sandbox"
            else self.sandbox.info.lookup_snapshot
        )
        ref = None
        if finality != "none":
            try:
                ref = await self.sandbox.lookup(row.kind, row.operation_key)
            except SandboxError:
                ref = None
                finality = "nonfinal"
        if ref is not None:
            await self._live(row.operation_key, ref)
            return ref
        await self.resources.resource_move(
            row.operation_key,
            "not_found" if finality == "final" else "unresolved",
            lease=self.lease_of(),
        )
        return None

    async def settle_pending(self) -> list[Resource]:
        """Resolve every row of this branch a crash left ``pending``; returns what they became.
        A found snapshot was never recorded in the log, so nothing needs it: it is released. So
        is a found sandbox while the branch has a live one: a branch works in one sandbox, and
        a second can only be the scratch a snapshot was being proven in."""
        settled = []
        rows = await self.resources.resources(owner_branch_id=self.branch_id)
        working = any(r.kind == "sandbox" and r.state == "live" for r in rows)
        for row in rows:
            if row.state != "pending" or row.provider != self.sandbox.info.provider:
                continue
            ref = await self._resolve_lost(row)
            if ref is not None and (row.kind == "snapshot" or working):
                await self.release(row.operation_key, row.kind, ref)
            elif ref is not None:
                working = True  # the sandbox a lost create made is the branch's own
            settled.append(row)
        return settled

    async def sandbox_session(self) -> SandboxSession:
        """The branch's sandbox: its live one (kept alive longer), or a new one."""
        try:
            session = await self.attached()
        except SandboxError as exc:
            if exc.code != "resource_unknown":
                raise
            session = None  # its sandbox vanished: the row is released, a new one made
        return session if session is not None else await self.create()

    async def attached(self) -> SandboxSession | None:
        """The branch's live sandbox, attached and kept alive longer; None when it has none.
        A live row whose sandbox is not there any more is released and reported as
        ``resource_unknown``: what ran in it can't be known from here."""
        await self.settle_pending()
        for row in await self.resources.resources(owner_branch_id=self.branch_id):
            if row.kind != "sandbox" or row.state != "live" or row.ref is None:
                continue
            expires = self.clock.now_ms() + self.lifetime_ms
            if not await self.resources.resource_touch(
                row.operation_key, lease=self.lease_of(), expires_at=expires
            ):
                continue  # gc took it between the read and the touch
            try:
                return await self.sandbox.attach(row.ref, self.ctx)
            except SandboxError as exc:
                if exc.code != "not_found":
                    raise
                await self.release(row.operation_key, "sandbox", row.ref)
                raise SandboxError(
                    "resource_unknown", f"sandbox {row.ref} of this branch is gone"
                ) from exc
        return None

    async def all_released(self) -> bool:
        """The branch had sandboxes and every one was released (a release proves that nothing
        runs in it any more)."""
        rows = [
            r for r in await self.resources.resources(owner_branch_id=self.branch_id)
            if r.kind == "sandbox" and r.provider == self.sandbox.info.provider
        ]
        return bool(rows) and all(r.state == "released" for r in rows)

    async def create(self) -> SandboxSession:
        session, _ = await self._make(lambda key: self.sandbox.create(key, self.ctx))
        return session

    async def restore(self, snapshot: SnapshotData) -> SandboxSession:
        """A new sandbox holding ``snapshot``; a restore whose answer was lost and that is
        found by its key is checked against the manifest before it is used."""
        session, found = await self._make(
            lambda key: self.sandbox.restore(snapshot, key, self.ctx)
        )
        if found and await session.manifest_hash(self.ctx) != snapshot.manifest_hash:
            row = await self._row_of(session.id)
            await self.release(row.operation_key, "sandbox", session.id)
            raise SandboxError(
                "snapshot_manifest_mismatch",
                f"the sandbox restored from {snapshot.snapshot_id} does not hold its manifest",
            )
        return session

    async def _make(
        self, make: Callable[[str], Awaitable[SandboxSession]]
    ) -> tuple[SandboxSession, bool]:
        """Commit the pending row, ask the provider, record what it made (or settle the row).
        True with the session when it was found by its key after its answer was lost."""
        key = await self._pending("sandbox")
        try:
            session = await make(key)
        except SandboxError as exc:
            ref = await self._after_failed_create(key, exc)
            if ref is None:
                raise
            return await self.sandbox.attach(ref, self.ctx), True
        await self._live(key, session.id)
        return session, False

    async def _after_failed_create(self, key: str, exc: SandboxError) -> str | None:
        """Settle the row of a create that raised; the ref when a lost answer is found."""
        if exc.code == "stale_epoch":
            return None  # a stale owner leaves the row pending for the branch's next owner
        if exc.code in LOST_ANSWER:
            rows = await self.resources.resources(owner_branch_id=self.branch_id)
            row = next(r for r in rows if r.operation_key == key)
            ref = await self._resolve_lost(row)
            if ref is None:
                raise SandboxError(
                    "resource_unknown",
                    f"the create under key {key} may or may not have happened; the ledger row"
                    " waits for an operator",
                ) from exc
            return ref
        # A typed failure means nothing was created.
        await self.resources.resource_move(key, "not_found", lease=self.lease_of())
        return None

    async def snapshot(self, session: SandboxSession) -> SnapshotData:
        """Capture, then prove the image restores to the same manifest in a scratch sandbox
        (itself ledgered and released) before anyone may record it."""
        key = await self._pending("snapshot")
        try:
            data = await session.snapshot(key, self.ctx)
        except SandboxError as exc:
            # A snapshot whose answer was lost is not used: found, it is released below.
            ref = await self._after_failed_create(key, exc)
            if ref is not None:
                await self.release(key, "snapshot", ref)
            raise
        await self._live(key, data.snapshot_id)
        try:
            scratch = await self.restore(data)
        except SandboxError:
            await self.release(key, "snapshot", data.snapshot_id)
            raise
        scratch_row = await self._row_of(scratch.id)
        await self.release(scratch_row.operation_key, "sandbox", scratch.id)
        return data

    async def _row_of(self, ref: str) -> Resource:
        rows = await self.resources.resources(owner_branch_id=self.branch_id)
        return next(r for r in rows if r.ref == ref and r.state == "live")

    async def release(self, key: str, kind: ResourceKind, ref: str) -> None:
        await self.resources.resource_move(key, "release", lease=self.lease_of())
        try:
            await self.sandbox.release(kind, ref, self.ctx)
        except SandboxError as exc:
            await self.resources.resource_move(key, "release_error", lease=self.lease_of())
            raise SandboxError("release_failed", exc.message) from exc
        await self.resources.resource_move(key, "released", lease=self.lease_of())
