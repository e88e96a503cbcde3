"""``RunSandbox``: the sandbox of one run, bound to its branch, its lease and its fence.

The branch's session is opened on first use, through the ledger (``Owner``): an existing live
sandbox of the branch is attached (and kept alive longer), otherwise one is created under a key
committed first. Every call it makes passes the run's fence, so a run that lost its lease sends
nothing to its sandbox. Recovery asks it to prove a call's commands gone (``terminate``);
turn ends ask it for a snapshot when the workspace changed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from threads.sandbox.handle import SandboxHandle, terminate_all
from threads.sandbox.ledger import Owner
from threads.sandbox.protocol import (
    Sandbox,
    SandboxContext,
    SandboxError,
    SandboxSession,
    SnapshotData,
    Termination,
)
from threads.store.capabilities import resources_of
from threads.store.protocol import Lease, Store


class RunSandbox:
    def __init__(
        self,
        provider: Sandbox,
        store: Store,
        tenant_id: str,
        lease_of: Callable[[], Lease],
        fence: Callable[[], Awaitable[None]],
    ) -> None:
        self.provider = provider
        self.ctx = SandboxContext(fence)
        self.owner = Owner(
            resources_of(store), provider, store.clock, tenant_id, lease_of, self.ctx
        )
        self._session: SandboxSession | None = None
        self.last_manifest: str | None = None  # of the branch's last snapshot ("" for none)

    async def session(self) -> SandboxSession:
        if self._session is None:
            self._session = await self.owner.sandbox_session()
        return self._session

    async def settle_pending(self, recorded: Collection[str]) -> None:
        """Settle the branch's ledger rows a crash left ``pending`` (a snapshot taken just
        before the kill, say), whether or not this run goes on to use its sandbox: gc never
        touches a pending row, so a row its owner does not settle is left for good. Release
        the branch's live snapshots its log does not record (``recorded``: the snapshot ids
        of its ``snapshot`` events): a snapshot row lives as long as its snapshot, so one a
        crash cut off before its event would otherwise outlive every use."""
        await self.owner.settle_pending()
        await self.owner.release_unrecorded(recorded)

    async def read_file(self, path: str) -> bytes:
        """A workspace file's bytes, read outside any tool call (a compaction's restore)."""
        return await (await self.session()).read_file(path, self.ctx)

    def handle(self, effect_key: str) -> SandboxHandle:
        return SandboxHandle(self.session, self.ctx, effect_key)

    async def terminate(self, effect_key: str) -> Termination:
        """Prove the commands of the call ``effect_key`` gone, or answer ``unknown``. Only the
        branch's own sandbox can answer: when it is released the release proved it; when the
        ledger knows no sandbox of the branch (an imported thread, another store), its
        sandbox vanished or another store made it, nothing here can tell."""
        if self.provider.info.termination != "confirmed":
            return "unknown"
        try:
            session = self._session or await self.owner.attached()
        except SandboxError as exc:
            if exc.code in ("resource_unknown", "not_found", "permission_denied"):
                return "unknown"  # gone, or another store's: nothing here can tell
            raise
        if session is None:
            return "terminated" if await self.owner.all_released() else "unknown"
        self._session = session
        return await terminate_all(session, effect_key, self.ctx)

    async def snapshot_if_changed(self, last_manifest: str | None) -> SnapshotData | None:
        """A verified snapshot when this run used the sandbox and its workspace differs from
        ``last_manifest``; else None."""
        if self._session is None or "filesystem" not in self.provider.info.capture_classes:
            return None
        session = await self.session()
        if await session.manifest_hash(self.ctx) == last_manifest:
            return None
        return await self.owner.snapshot(session)
