"""``threads.sandbox.local()``: a process sandbox on bubblewrap that needs no daemon.

The provider: each sandbox is a directory on the host named after its operation key (so a
repeated create finds the same one, and the lookup is final): ``workspace/`` is bound at
``/workspace``; ``supervisor/`` holds the records that prove a command's processes gone;
``owner`` names the store that made it (``SandboxContext.owner``). Commands, files and snapshots
of one sandbox are ``threads.sandbox.local_session``; snapshots are kept by
``threads.sandbox.snapshot_store``. A restore is verified against the manifest hash before it is
handed out; a release first proves every command of the sandbox stopped.

Invariants: a sandbox directory appears whole (made under a temporary name, its owner record
written first, then renamed into place), so every one carries its owner, and what a crash left
half made is deleted by the next create or lookup of its key; a sandbox another
store made is never attached, found, killed or deleted (``permission_denied``), and one made
before owners were recorded is another store's too. Every directory is 0700 and every file
this provider writes 0600, whatever the umask.
"""

from __future__ import annotations

import asyncio
import errno
import os
import shutil
import uuid
from pathlib import Path
from typing import Literal

from threads.log.hashing import sha256_hex
from threads.safe_tar import UnsafeArchiveError
from threads.sandbox import manifest as trees
from threads.sandbox.durable import fsync_dir, private_dir, write_durably
from threads.sandbox.limits import Limits
from threads.sandbox.local_session import PROVIDER, LocalSession
from threads.sandbox.manifest import extract
from threads.sandbox.minted import minted_pattern, require_minted
from threads.sandbox.owner_record import OWNER_FILE, foreign, read_owner
from threads.sandbox.protocol import (
    SandboxContext,
    SandboxError,
    SandboxInfo,
    SnapshotData,
    host_failure,
)
from threads.sandbox.snapshot_store import SnapshotStore, snapshot_id
from threads.sandbox.supervisor import Records, prove_gone

BWRAP = "/usr/bin/bwrap"


_SANDBOX_ID = minted_pattern("lsb-")


def _sandbox_id(operation_key: str) -> str:
    return f"lsb-{sha256_hex(operation_key.encode('utf-8'))[:32]}"


class LocalSandbox:
    """The provider; see the module docstring. Make one with ``threads.sandbox.local()``."""

    def __init__(self, root: Path, limits: Limits, bwrap: str = BWRAP) -> None:
        self.root = root
        self.limits = limits
        self.bwrap = bwrap
        self.snapshots = SnapshotStore(root / "snapshots")
        self._info = SandboxInfo(
            provider=PROVIDER,
            egress="enforced",
            capture_classes=("filesystem",),
            termination="confirmed",
            lookup_create="final",
            lookup_snapshot="final",
        )

    @property
    def info(self) -> SandboxInfo:
        return self._info

    def _session(self, sandbox_id: str, folder: Path) -> LocalSession:
        return LocalSession(
            sandbox_id, folder, limits=self.limits, bwrap=self.bwrap, snapshots=self.snapshots
        )

    def _dir(self, sandbox_id: str) -> Path:
        """The folder of one of this provider's ids; ``not_found`` for any other ref."""
        return self.root / "sandboxes" / require_minted(
            sandbox_id, _SANDBOX_ID, "a local sandbox id"
        )

    def sandbox_ids(self) -> list[str]:
        """The sandboxes that exist on this host now (what a leak count counts)."""
        folder = self.root / "sandboxes"
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if _SANDBOX_ID.fullmatch(p.name))

    def _owned(self, sandbox_id: str, folder: Path, ctx: SandboxContext) -> LocalSession:
        """The session of ``folder`` when ``ctx.owner`` made it; ``not_found`` when it is
        gone, ``permission_denied`` when another store made it."""
        recorded = read_owner(folder)
        if recorded is None and not (folder / "workspace").is_dir():
            raise SandboxError("not_found", f"sandbox {sandbox_id} is gone")
        if recorded != (ctx.owner or ""):
            raise foreign(f"sandbox {sandbox_id}")
        return self._session(sandbox_id, folder)

    async def create(self, operation_key: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        sandbox_id = _sandbox_id(operation_key)
        folder = self._dir(sandbox_id)
        if not folder.is_dir():
            try:
                await asyncio.to_thread(_make, folder, ctx.owner or "")
            except OSError as exc:
                raise host_failure(exc, f"sandbox {sandbox_id} could not be made") from None
        return self._owned(sandbox_id, folder, ctx)

    async def attach(self, ref: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        folder = self._dir(ref)
        if not (folder / "workspace").is_dir():
            raise SandboxError("not_found", f"sandbox {ref} is gone; start a new one")
        return self._owned(ref, folder, ctx)

    async def lookup(
        self, kind: Literal["sandbox", "snapshot"], operation_key: str, ctx: SandboxContext
    ) -> str | None:
        owner = ctx.owner or ""
        if kind == "sandbox":
            sandbox_id = _sandbox_id(operation_key)
            folder = self._dir(sandbox_id)
            _sweep_torn(folder)  # the key's create is over: what a crash cut short goes
            return sandbox_id if read_owner(folder) == owner else None
        snapshot = snapshot_id(operation_key)
        return snapshot if self.snapshots.exists(snapshot, owner) else None

    async def restore(
        self, snapshot: SnapshotData, operation_key: str, ctx: SandboxContext
    ) -> LocalSession:
        data = self.snapshots.archive_of(snapshot.snapshot_id)
        session = await self.create(operation_key, ctx)
        try:
            await asyncio.to_thread(_unpack, data, session.workspace)
            restored = trees.manifest_hash(session.workspace)
        except (OSError, UnsafeArchiveError) as exc:
            await self.release("sandbox", session.id, ctx)
            why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise SandboxError(
                "snapshot_restore_failed", f"snapshot {snapshot.snapshot_id} did not unpack: {why}"
            ) from None
        if restored != snapshot.manifest_hash:
            await self.release("sandbox", session.id, ctx)
            raise SandboxError(
                "snapshot_manifest_mismatch",
                f"snapshot {snapshot.snapshot_id} restored to manifest {restored}, not"
                f" {snapshot.manifest_hash}; the archive is not what was recorded",
            )
        return session

    async def release(
        self, kind: Literal["sandbox", "snapshot"], ref: str, ctx: SandboxContext
    ) -> Literal["released", "already_gone"]:
        await ctx.fence()
        if kind == "snapshot":
            return await asyncio.to_thread(self.snapshots.release, ref, ctx.owner or "")
        folder = self._dir(ref)
        if not folder.exists():
            return "already_gone"
        if read_owner(folder) != (ctx.owner or ""):
            raise foreign(f"sandbox {ref}")  # checked before any process is looked at
        for record in Records(folder / "supervisor").all():
            if prove_gone(record) == "unknown":
                raise SandboxError(
                    "release_failed",
                    f"a command in sandbox {ref} could not be proven stopped; run gc again",
                )
        try:
            shutil.rmtree(folder)
        except OSError as exc:
            raise SandboxError(
                "release_failed", f"sandbox {ref} could not be deleted ({exc.strerror}); run gc"
                " again"
            ) from None
        return "released"


def _make(folder: Path, owner: str) -> None:
    """Make the sandbox ``folder`` whole or not at all: built under a temporary name (its owner
    record first) and renamed into place. One a concurrent create made first is kept."""
    parent = private_dir(folder.parent)
    _sweep_torn(folder)
    building = parent / f".new-{folder.name}-{uuid.uuid4().hex}"
    try:
        private_dir(building)
        write_durably(building / OWNER_FILE, owner.encode("ascii"))
        private_dir(building / "workspace")
        private_dir(building / "supervisor")
        fsync_dir(building)
        try:
            os.rename(building, folder)
        except OSError as exc:
            if exc.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
        fsync_dir(parent)
    finally:
        shutil.rmtree(building, ignore_errors=True)


def _sweep_torn(folder: Path) -> None:
    """Delete what creates of ``folder``'s key left half made (a crash before the rename)."""
    for torn in folder.parent.glob(f".new-{folder.name}-*"):
        shutil.rmtree(torn, ignore_errors=True)


def _unpack(data: bytes, workspace: Path) -> None:
    """The archive ``data`` as the whole content of ``workspace`` (emptied first)."""
    shutil.rmtree(workspace)
    private_dir(workspace)
    extract(data, workspace)


def local(
    root: str | os.PathLike[str] | None = None,
    *,
    cpu_seconds: int = 60,
    memory_mb: int = 1024,
    pids: int = 256,
    file_mb: int = 1024,
) -> LocalSandbox:
    """A bubblewrap sandbox provider keeping its sandboxes under ``root`` (default
    ``~/.cache/threads/sandboxes``). Limits apply to each command."""
    from threads.errors import ConfigError

    if not os.access(BWRAP, os.X_OK):
        raise ConfigError(
            "capability_missing",
            f"the local sandbox needs bubblewrap at {BWRAP}; install it (apt-get install"
            " bubblewrap)",
        )
    folder = Path(root) if root is not None else Path.home() / ".cache" / "threads" / "sandboxes"
    private_dir(folder, tighten=root is None)  # a directory the user named keeps its mode
    return LocalSandbox(folder.resolve(), Limits(cpu_seconds, memory_mb, pids, file_mb))
