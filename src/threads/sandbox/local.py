"""``threads.sandbox.local()``: a process sandbox on bubblewrap that needs no daemon.

The provider: each sandbox is a directory on the host named after its operation key (so a
repeated create finds the same one, and the lookup is final): ``workspace/`` is bound at
``/workspace``; ``supervisor/`` holds the records that prove a command's processes gone.
Commands, files and snapshots of one sandbox are ``threads.sandbox.local_session``; snapshots
are kept by ``threads.sandbox.snapshot_store``. A restore is verified against the manifest hash
before it is handed out; a release first proves every command of the sandbox stopped.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Literal

from threads.log.hashing import sha256_hex
from threads.sandbox import manifest as trees
from threads.sandbox.limits import Limits
from threads.sandbox.local_session import PROVIDER, LocalSession
from threads.sandbox.minted import minted_pattern, require_minted
from threads.sandbox.protocol import (
    SandboxContext,
    SandboxError,
    SandboxInfo,
    SnapshotData,
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
        return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []

    async def create(self, operation_key: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        sandbox_id = _sandbox_id(operation_key)
        folder = self._dir(sandbox_id)
        (folder / "workspace").mkdir(parents=True, exist_ok=True)
        (folder / "supervisor").mkdir(exist_ok=True)
        return self._session(sandbox_id, folder)

    async def attach(self, ref: str, ctx: SandboxContext) -> LocalSession:
        await ctx.fence()
        folder = self._dir(ref)
        if not (folder / "workspace").is_dir():
            raise SandboxError("not_found", f"sandbox {ref} is gone; start a new one")
        return self._session(ref, folder)

    async def lookup(self, kind: Literal["sandbox", "snapshot"], operation_key: str) -> str | None:
        if kind == "sandbox":
            sandbox_id = _sandbox_id(operation_key)
            return sandbox_id if self._dir(sandbox_id).is_dir() else None
        snapshot = snapshot_id(operation_key)
        return snapshot if self.snapshots.exists(snapshot) else None

    async def restore(
        self, snapshot: SnapshotData, operation_key: str, ctx: SandboxContext
    ) -> LocalSession:
        data = self.snapshots.archive_of(snapshot.snapshot_id)
        session = await self.create(operation_key, ctx)
        workspace = session.workspace
        try:
            shutil.rmtree(workspace)
            workspace.mkdir()
            trees.extract(data, workspace)
            restored = trees.manifest_hash(workspace)
        except (OSError, ValueError) as exc:
            await self.release("sandbox", session.id, ctx)
            raise SandboxError(
                "snapshot_restore_failed", f"snapshot {snapshot.snapshot_id} did not unpack: {exc}"
            ) from exc
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
            return self.snapshots.release(ref)
        folder = self._dir(ref)
        if not folder.exists():
            return "already_gone"
        for record in Records(folder / "supervisor").all():
            if prove_gone(record) == "unknown":
                raise SandboxError(
                    "release_failed",
                    f"a command in sandbox {ref} could not be proven stopped; run gc again",
                )
        shutil.rmtree(folder)
        return "released"


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
    folder.mkdir(parents=True, exist_ok=True)
    return LocalSandbox(folder.resolve(), Limits(cpu_seconds, memory_mb, pids, file_mb))
