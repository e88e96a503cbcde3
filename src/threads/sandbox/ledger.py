"""Owner-side use of the resource ledger: every create is written down before it is asked for.

``Owner`` is one branch's view, bound to its lease: ``settle_pending`` resolves rows a crash left
``pending`` by looking their keys up (found → ``live``, not found → ``released`` only when the
provider's lookup is final, else ``unknown`` for an operator); ``sandbox()`` attaches to the
branch's live sandbox or creates one under a fresh key; ``snapshot()`` and ``restore()`` do the
same for snapshots and forks. The ``pending`` row always commits before the provider call.

Every provider call carries the store's identity (``SandboxContext.owner``), so a copy of the
store never attaches, finds or frees what the original made. A live sandbox that is gone
(deleted underneath) or is another store's is never silently replaced: its row is settled
(``released``, or ``unknown`` for the other store's) and the call that needed it fails with
``not_found`` / ``permission_denied`` saying its workspace is lost here; the next call starts a
new sandbox. A sandbox row lives for ``lifetime_ms`` past its last use; a snapshot row for as
long as its snapshot does (the provider's own expiry), since a fork point must outlive idleness.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass, replace

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

    async def owned(self) -> SandboxContext:
        """The run's context, naming this store as the owner (``SandboxContext.owner``)."""
        return replace(self.ctx, owner=await self.resources.owner_identity())

    async def _live(self, key: str, kind: ResourceKind, ref: str, expires: int | None) -> None:
        """``key`` found live as ``ref``: a sandbox expires ``lifetime_ms`` from now (every use
        pushes it out), a snapshot when the provider says (``expires``; None: never by time)."""
        await self.resources.resource_move(
            key,
            "found",
            lease=self.lease_of(),
            ref=ref,
            expires_at=self.clock.now_ms() + self.lifetime_ms if kind == "sandbox" else expires,
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
                ref = await self.sandbox.lookup(row.kind, row.operation_key, await self.owned())
            except SandboxError:
                ref = None
                finality = "nonfinal"
        if ref is not None:
            await self._live(row.operation_key, row.kind, ref, None)
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

    async def release_unrecorded(self, recorded: Collection[str]) -> None:
        """Release the branch's live snapshots whose ids are not in ``recorded`` (the log's
        ``snapshot`` events): taken, then cut off by a crash before they were recorded."""
        for row in await self.resources.resources(owner_branch_id=self.branch_id):
            if (row.kind == "snapshot" and row.state == "live" and row.ref is not None
                    and row.ref not in recorded
                    and row.provider == self.sandbox.info.provider):
                await self.release(row.operation_key, "snapshot", row.ref)

    async def sandbox_session(self) -> SandboxSession:
        """The branch's sandbox: its live one (kept alive longer), or a new one when it has
        none. One that is gone or another store's is not replaced here: see ``attached``."""
        session = await self.attached()
        return session if session is not None else await self.create()

    async def attached(self) -> SandboxSession | None:
        """The branch's live sandbox, attached and kept alive longer; None when it has none.
        A live row whose sandbox is gone is settled ``released`` and reported ``not_found``;
        one another store made (this store is a copy sharing its sandbox root) is settled
        ``unknown``, left alone, and reported ``permission_denied``. Either way its workspace
        is lost to this branch, and what ran in it can't be known from here."""
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
                return await self.sandbox.attach(row.ref, await self.owned())
            except SandboxError as exc:
                if exc.code not in ("not_found", "permission_denied"):
                    raise
                await self._lost(row, exc)
        return None

    async def _lost(self, row: Resource, exc: SandboxError) -> None:
        """Settle the live row of a sandbox this branch can't use any more, then say so."""
        gone = exc.code == "not_found"
        await self.resources.resource_move(row.operation_key, "release", lease=self.lease_of())
        await self.resources.resource_move(
            row.operation_key, "not_found" if gone else "unresolved", lease=self.lease_of()
        )
        why = (
            "it was deleted outside threads"
            if gone
            else "another store made it (this store is a copy of that one, or that one of"
            " this, and they share the sandbox root); it was left alone"
        )
        raise SandboxError(
            "not_found" if gone else "permission_denied",
            f"this thread's sandbox {row.ref} is lost: {why}. Its workspace is not here and"
            " nothing was run; the next call starts a new, empty sandbox",
        ) from exc

    async def all_released(self) -> bool:
        """The branch had sandboxes and each one proves nothing runs in it any more: it was
        never made (released before it had a ref), or a release freed it. One that was found
        gone instead proves nothing (what ran in it can't be known)."""
        rows = [
            r for r in await self.resources.resources(owner_branch_id=self.branch_id)
            if r.kind == "sandbox" and r.provider == self.sandbox.info.provider
        ]
        return bool(rows) and all(
            r.state == "released" and (r.ref is None or r.release_outcome == "released")
            for r in rows
        )

    async def create(self) -> SandboxSession:
        ctx = await self.owned()
        session, _ = await self._make(lambda key: self.sandbox.create(key, ctx))
        return session

    async def restore(self, snapshot: SnapshotData) -> SandboxSession:
        """A new sandbox holding ``snapshot``; a restore whose answer was lost and that is
        found by its key is checked against the manifest before it is used."""
        ctx = await self.owned()
        session, found = await self._make(lambda key: self.sandbox.restore(snapshot, key, ctx))
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
            return await self.sandbox.attach(ref, await self.owned()), True
        await self._live(key, "sandbox", session.id, None)
        return session, False

    async def _after_failed_create(self, key: str, exc: SandboxError) -> str | None:
        """Settle the row of a create that raised; the ref when a lost answer is found."""
        if exc.code == "stale_epoch":
            return None  # a stale owner leaves the row pending for the branch's next owner
        if exc.code in LOST_ANSWER:
            rows = await self.resources.resources(owner_branch_id=self.branch_id)
            row = next(r for r in rows if r.operation_key == key)
            ref = await self._resolve_lost(row)
            if ref is None and await self._released(key):
                return None  # a final lookup found nothing: it never happened
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

    async def _released(self, key: str) -> bool:
        rows = await self.resources.resources(owner_branch_id=self.branch_id)
        return any(r.operation_key == key and r.state == "released" for r in rows)

    async def snapshot(self, session: SandboxSession) -> SnapshotData:
        """Capture, then prove the image restores to the same manifest in a scratch sandbox
        (itself ledgered and released) before anyone may record it."""
        key = await self._pending("snapshot")
        try:
            data = await session.snapshot(key, await self.owned())
        except SandboxError as exc:
            # A snapshot whose answer was lost is not used: found, it is released below.
            ref = await self._after_failed_create(key, exc)
            if ref is not None:
                await self.release(key, "snapshot", ref)
            raise
        await self._live(key, "snapshot", data.snapshot_id, data.expires_at)
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
            await self.sandbox.release(kind, ref, await self.owned())
        except SandboxError as exc:
            await self.resources.resource_move(key, "release_error", lease=self.lease_of())
            raise SandboxError("release_failed", exc.message) from exc
        await self.resources.resource_move(key, "released", lease=self.lease_of())
