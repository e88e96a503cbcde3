"""The Sandbox protocol: what every sandbox provider (local bubblewrap, Docker, a fake) offers.

A provider (``Sandbox``) creates, restores, attaches and releases sandboxes by operation key, so
a create whose answer was lost can be found again by the same key. A ``SandboxSession`` runs
commands, moves files and takes snapshots inside one sandbox. Every call takes a
``SandboxContext`` and awaits ``ctx.fence()`` at its real send point: a refused fence means
nothing was sent (``stale_epoch`` for a run that lost its lease, ``cleanup_claim_lost`` for gc).
"""

from __future__ import annotations

import errno
import os
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol, runtime_checkable

from threads.errors import ThreadsError
from threads.log.json_types import JsonObject

SandboxErrorCode = Literal[
    "unavailable",
    "timeout",
    "not_found",
    "invalid_path",
    "permission_denied",
    "is_directory",
    "too_large",
    "no_space",
    "not_quiescent",
    "release_failed",
    "resource_unknown",
    "snapshot_expired",
    "snapshot_missing",
    "snapshot_restore_failed",
    "snapshot_manifest_mismatch",
    "stale_epoch",
    "cleanup_claim_lost",
]
Termination = Literal["terminated", "already_exited", "unknown"]
Finality = Literal["none", "nonfinal", "final"]
WORKSPACE = "/workspace"
DEFAULT_TIMEOUT_MS = 120_000


class SandboxError(ThreadsError):
    """A sandbox call failed with one of ``SandboxErrorCode``. ``unavailable`` and ``timeout``
    mean the answer was lost (the call may have happened); every other code means it did not."""

    def __init__(self, code: SandboxErrorCode, message: str, *, seq: int | None = None) -> None:
        super().__init__(code, message, seq=seq)


def host_failure(exc: OSError, what: str) -> SandboxError:
    """A host file operation that failed, as a ``SandboxError`` naming ``what`` (never the
    host path: the message may reach the sandbox's model). A full disk is ``no_space``."""
    reason = os.strerror(exc.errno) if exc.errno else type(exc).__name__
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return SandboxError("no_space", f"{what}: {reason} (the sandbox's disk is full)")
    if exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        return SandboxError("permission_denied", f"{what}: {reason}")
    if exc.errno == errno.ENOENT:
        return SandboxError("not_found", f"{what}: {reason}")
    return SandboxError("unavailable", f"{what}: {reason}")


@dataclass(frozen=True, slots=True)
class SandboxContext:
    """Who is calling and the fence that must pass before anything is sent.

    ``authority`` is ``owner`` (a run holding its branch's lease) or ``cleanup`` (gc holding a
    claim on a ledger row). ``fence()`` raises when that authority is gone. ``owner`` is which
    store is calling: what another store made is ``permission_denied``, never touched."""

    fence: Callable[[], Awaitable[None]]
    authority: Literal["owner", "cleanup"] = "owner"
    # The caller's store identity (``threads.store.identity``): a provider writes it beside
    # what it creates, and releases, attaches or finds again only what carries it. None is a
    # caller outside any store (a script), which owns only what it made with None.
    owner: str | None = None


async def _open_fence() -> None:
    return None


OPEN_CONTEXT = SandboxContext(_open_fence)
"""A context whose fence never refuses: for using a sandbox outside any run (scripts, tests)."""


@dataclass(frozen=True, slots=True)
class SandboxInfo:
    """What a provider can promise. ``termination="confirmed"`` means ``terminate`` answers from
    proof; ``unconfirmed`` makes every in-doubt ``sandbox_local`` call park. ``lookup_create``
    ``final`` means a create not found by its key was never made."""

    provider: str
    egress: Literal["enforced", "unenforced"]
    capture_classes: tuple[str, ...]
    termination: Literal["confirmed", "unconfirmed"]
    lookup_create: Finality
    lookup_snapshot: Finality


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int
    stdout: bytes
    stderr: bytes


class ExecOutput(Protocol):
    """A running command: stream ``stdout``/``stderr`` while it runs, then ``wait()``."""

    def stdout(self) -> AsyncIterator[bytes]: ...

    def stderr(self) -> AsyncIterator[bytes]: ...

    async def wait(self) -> int:
        """The exit code; ``SandboxError("timeout")`` once the deadline passed (the command
        was stopped, and may have partly run)."""
        ...

    async def collect(self) -> ExecResult:
        """Wait and return everything it wrote (for callers that don't stream)."""
        ...


@dataclass(frozen=True, slots=True)
class FileEntry:
    path: str  # absolute, under /workspace
    kind: Literal["file", "dir", "symlink"]
    size: int


@dataclass(frozen=True, slots=True)
class SnapshotData:
    """A captured, verified snapshot: what the ``snapshot`` event records."""

    snapshot_id: str
    provider: str
    sandbox_id: str
    capture_class: str
    expires_at: int | None
    manifest_hash: str
    quiesced: Mapping[str, Sequence[str]] = field(default_factory=dict)

    def event_data(self) -> JsonObject:
        quiesced: JsonObject = {k: list(v) for k, v in self.quiesced.items()}
        return {
            "capture_class": self.capture_class,
            "expires_at": self.expires_at,
            "manifest_hash": self.manifest_hash,
            "provider": self.provider,
            "quiesced": quiesced,
            "sandbox_id": self.sandbox_id,
            "snapshot_id": self.snapshot_id,
        }


def snapshot_data(event: Mapping[str, object]) -> SnapshotData:
    """The ``SnapshotData`` a ``snapshot`` event's data records."""
    expires = event.get("expires_at")
    quiesced = event.get("quiesced")
    return SnapshotData(
        snapshot_id=str(event["snapshot_id"]),
        provider=str(event["provider"]),
        sandbox_id=str(event["sandbox_id"]),
        capture_class=str(event["capture_class"]),
        expires_at=expires if isinstance(expires, int) else None,
        manifest_hash=str(event["manifest_hash"]),
        quiesced=quiesced if isinstance(quiesced, dict) else {},
    )


@runtime_checkable
class SandboxSession(Protocol):
    """One live sandbox. Paths are absolute and normalized (else ``invalid_path``)."""

    @property
    def id(self) -> str: ...

    async def exec(
        self,
        argv: Sequence[str],
        ctx: SandboxContext,
        *,
        process_key: str | None = None,
        cwd: str = WORKSPACE,
        env: Mapping[str, str] | None = None,
        timeout_ms: int = DEFAULT_TIMEOUT_MS,
        stdin: bytes | None = None,
    ) -> ExecOutput:
        """Start ``argv`` with only ``env`` in its environment (nothing is inherited).
        ``process_key`` (a call's effect key) names the command durably, for ``terminate``."""
        ...

    async def terminate(self, process_key: str, ctx: SandboxContext) -> Termination:
        """Stop the command started under ``process_key`` and prove its processes are gone:
        ``terminated`` / ``already_exited`` are proofs, ``unknown`` is not."""
        ...

    async def read_file(self, path: str, ctx: SandboxContext) -> bytes: ...

    async def write_file(self, path: str, data: bytes, ctx: SandboxContext) -> None: ...

    async def list_files(self, path: str, ctx: SandboxContext) -> list[FileEntry]: ...

    async def snapshot(self, operation_key: str, ctx: SandboxContext) -> SnapshotData:
        """A quiescent snapshot of the workspace (``not_quiescent`` while anything runs)."""
        ...

    async def manifest_hash(self, ctx: SandboxContext) -> str:
        """The workspace's manifest hash now (what a snapshot of it would record)."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """A sandbox provider. Creates are idempotent per operation key."""

    @property
    def info(self) -> SandboxInfo: ...

    async def create(self, operation_key: str, ctx: SandboxContext) -> SandboxSession: ...

    async def restore(
        self, snapshot: SnapshotData, operation_key: str, ctx: SandboxContext
    ) -> SandboxSession:
        """A fresh sandbox holding the snapshot's workspace, verified against its manifest
        hash (``snapshot_manifest_mismatch``, the new sandbox released first)."""
        ...

    async def attach(self, ref: str, ctx: SandboxContext) -> SandboxSession:
        """The live sandbox ``ref`` (``not_found`` when it is gone, ``permission_denied``
        when another store made it)."""
        ...

    async def release(
        self, kind: Literal["sandbox", "snapshot"], ref: str, ctx: SandboxContext
    ) -> Literal["released", "already_gone"]:
        """Free ``ref`` once nothing runs in it; ``permission_denied`` (nothing touched) when
        it is not ``ctx.owner``'s."""
        ...

    async def lookup(
        self, kind: Literal["sandbox", "snapshot"], operation_key: str, ctx: SandboxContext
    ) -> str | None:
        """The ref a create (or snapshot) under ``operation_key`` made for ``ctx.owner``, or
        None if it made none (what it made for another store is not found here)."""
        ...
