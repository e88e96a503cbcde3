"""Where the local sandbox keeps snapshots: ``archives/<sha256>.tar`` (content-addressed, so
identical workspaces share one archive) and ``refs/<snapshot_id>.json`` naming an archive, the
manifest hash it restores to, and the store that took it (its ``owner``).

Invariant: an archive is deleted only when no ref names it (a release deletes every such one,
so an archive whose keep was killed before its ref was written goes too); keeping and releasing
hold one ``flock`` so the two never interleave (waited for at most ``LOCK_S``), and every file
is written durably, 0600 in 0700 directories. Whoever takes the lock first deletes the
temporary files of a writer killed mid-write (none can be writing). A keep that fails (a full
disk) removes what it wrote before it raises. A ref is released only by its owner
(``permission_denied`` for anyone else), and a ref that names no owner (written before owners
were recorded) by no store.
Only ids this store mints (``snapshot_id``) and archive names that are a sha256 become paths:
an id read from a log or a ledger row is checked first (``threads.sandbox.minted``), and a ref
naming anything else names no archive.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from threads.log.hashing import SHA256_HEX, sha256_hex
from threads.sandbox.durable import FILE_MODE, private_dir, remove_orphaned_temps, write_durably
from threads.sandbox.minted import minted_pattern, require_minted
from threads.sandbox.protocol import SandboxError, host_failure

_SNAPSHOT_ID = minted_pattern("lss-")
LOCK_S = 30.0  # the longest a keep or a release waits for another one to finish
LOCK_POLL_S = 0.01


def snapshot_id(operation_key: str) -> str:
    """The id of the snapshot taken under ``operation_key`` (the same one for every retry)."""
    return f"lss-{sha256_hex(operation_key.encode('utf-8'))[:32]}"


class SnapshotStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def exists(self, snapshot_id: str, owner: str = "") -> bool:
        """A snapshot ``owner`` took under this id is here."""
        try:
            return _owner_named(self._ref(snapshot_id)) == owner
        except SandboxError:  # not one of this store's ids
            return False

    def _ref(self, snapshot_id: str) -> Path:
        """The ref file of one of this store's ids; ``snapshot_missing`` for any other id."""
        require_minted(snapshot_id, _SNAPSHOT_ID, "a local snapshot id", "snapshot_missing")
        return self.folder / "refs" / f"{snapshot_id}.json"

    def _archive(self, sha: str) -> Path:
        return self.folder / "archives" / f"{sha}.tar"

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        private_dir(self.folder / "refs")
        private_dir(self.folder / "archives")
        lock_path = self.folder / ".lock"
        with open(os.open(lock_path, os.O_RDWR | os.O_CREAT, FILE_MODE), "r+b") as lock:
            os.fchmod(lock.fileno(), FILE_MODE)
            _take(lock.fileno())
            remove_orphaned_temps(self.folder / "refs")
            remove_orphaned_temps(self.folder / "archives")
            yield

    def keep(self, snapshot_id: str, data: bytes, manifest: str, owner: str = "") -> None:
        """Keep ``data`` as snapshot ``snapshot_id`` of ``owner``; on a failure (``no_space``
        and the like) nothing it wrote is left."""
        sha, ref_path = sha256_hex(data), self._ref(snapshot_id)
        try:
            with self._lock():
                archive = self._archive(sha)
                new = not archive.exists()
                try:
                    if new or _read(archive) != data:
                        write_durably(archive, data)
                    ref = {"archive": sha, "manifest_hash": manifest, "owner": owner}
                    write_durably(ref_path, json.dumps(ref).encode("utf-8"))
                except OSError:
                    if new:
                        archive.unlink(missing_ok=True)
                    raise
        except OSError as exc:
            raise host_failure(exc, f"snapshot {snapshot_id} could not be kept") from None

    def archive_of(self, snapshot_id: str) -> bytes:
        sha = _archive_named(self._ref(snapshot_id))
        data = None if sha is None else _read(self._archive(sha))
        if sha is None or data is None:
            raise SandboxError("snapshot_missing", f"snapshot {snapshot_id} is not on this host")
        if sha256_hex(data) != sha:
            raise SandboxError("snapshot_restore_failed", f"snapshot {snapshot_id} is corrupt")
        return data

    def release(self, snapshot_id: str, owner: str = "") -> Literal["released", "already_gone"]:
        with self._lock():
            path = self._ref(snapshot_id)
            if _archive_named(path) is None:
                return "already_gone"
            if _owner_named(path) != owner:
                raise SandboxError(
                    "permission_denied",
                    f"snapshot {snapshot_id} was taken by another store (a copy of this one, or"
                    " the one this store was copied from); it is left alone",
                )
            path.unlink()
            named = {_archive_named(ref) for ref in path.parent.glob("*.json")}
            if None in named:  # a ref that can't be read might name any archive: keep them
                return "released"
            # its archive once no ref names it, and any a keep killed before its ref left
            for archive in (self.folder / "archives").glob("*.tar"):
                if archive.stem not in named:
                    archive.unlink(missing_ok=True)
        return "released"


def _take(fd: int) -> None:
    """The store's lock, waited for at most ``LOCK_S`` (a holder frozen mid-keep must not
    wedge every other keep and release): ``unavailable`` past it."""
    deadline = time.monotonic() + LOCK_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise SandboxError(
                    "unavailable",
                    f"the snapshot store stayed locked for {LOCK_S:g} s (a process holding it"
                    " is stopped or stuck); try again",
                ) from None
            time.sleep(LOCK_POLL_S)


def _read(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except OSError:
        return None


def _archive_named(ref: Path) -> str | None:
    """The archive ``ref`` names (a sha256); None when it is gone, can't be read, or names
    anything else."""
    try:
        named = json.loads(ref.read_bytes())["archive"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return named if isinstance(named, str) and SHA256_HEX.fullmatch(named) else None


def _owner_named(ref: Path) -> str | None:
    """The owner ``ref`` records; None when it is gone, can't be read, or records none."""
    try:
        owner = json.loads(ref.read_bytes())["owner"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return owner if isinstance(owner, str) else None
