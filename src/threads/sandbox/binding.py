"""``RunSandbox``: the sandbox of one run, bound to its branch, its lease and its fence.

The branch's session is opened on first use, through the ledger (``Owner``): an existing live
sandbox of the branch is attached (and kept alive longer), otherwise one is created under a key
committed first. Every call it makes passes the run's fence, so a run that lost its lease sends
nothing to its sandbox. Recovery asks it to prove a call's commands gone (``terminate``);
turn ends ask it for a snapshot when the workspace changed.

A subagent that shares its parent's sandbox gets the parent's ``RunSandbox`` ``lent`` to its
run: the same session (opened by whichever of them uses it first), every call passing both
runs' fences. The sandbox stays the parent's: its ledger row is the parent branch's, held under
the parent's lease, so a borrower settles no ledger rows and takes no snapshots (the parent
snapshots the workspace at its own turn ends, the child's changes included).
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
        self._lender: RunSandbox | None = None  # whose sandbox this is, when it is lent

    def lent(self, fence: Callable[[], Awaitable[None]]) -> RunSandbox:
        """This sandbox as a subagent's run uses it: the same sandbox and session, every call
        passing ``fence`` (the child's lease) and this run's own."""
        borrowed = RunSandbox.__new__(RunSandbox)
        borrowed.provider, borrowed.owner = self.provider, self.owner
        borrowed.ctx = SandboxContext(_both(fence, self.ctx.fence))
        borrowed._session, borrowed.last_manifest, borrowed._lender = None, None, self
        return borrowed

    async def session(self) -> SandboxSession:
        if self._lender is not None:
            return await self._lender.session()
        if self._session is None:
            self._session = await self.owner.sandbox_session()
        return self._session

    async def settle_pending(self, recorded: Collection[str]) -> None:
        """Settle the branch's ledger rows a crash left ``pending`` (a snapshot taken just
        before the kill, say), whether or not this run goes on to use its sandbox: gc never
        touches a pending row, so a row its owner does not settle is left for good. Release
        the branch's live snapshots its log does not record (``recorded``: the snapshot ids
        of its ``snapshot`` events): a snapshot row lives as long as its snapshot, so one a
        crash cut off before its event would otherwise outlive every use. A borrowed sandbox
        has no rows of its own: its lender's run settled them."""
        if self._lender is not None:
            return
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
        sandbox vanished or another store made it, nothing here can tell. A borrower asks its
        lender, after its own fence."""
        if self._lender is not None:
            await self.ctx.fence()
            return await self._lender.terminate(effect_key)
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
        ``last_manifest``; else None (always for a borrower: its lender snapshots)."""
        if self._session is None or "filesystem" not in self.provider.info.capture_classes:
            return None
        session = await self.session()
        if await session.manifest_hash(self.ctx) == last_manifest:
            return None
        return await self.owner.snapshot(session)


def _both(
    first: Callable[[], Awaitable[None]], second: Callable[[], Awaitable[None]]
) -> Callable[[], Awaitable[None]]:
    async def fence() -> None:
        await first()
        await second()

    return fence
