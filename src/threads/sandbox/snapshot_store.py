"""Where the local sandbox keeps snapshots: ``archives/<sha256>.tar`` (content-addressed, so
identical workspaces share one archive) and ``refs/<snapshot_id>.json`` naming an archive and the
manifest hash it restores to.

Invariant: an archive is deleted only when no ref names it (a release deletes every such one,
so an archive whose keep was killed before its ref was written goes too); keeping and releasing
hold one ``flock`` so the two never interleave, and every file is written durably. Whoever takes
the lock first deletes the temporary files of a writer killed mid-write (none can be writing).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from threads.log.hashing import sha256_hex
from threads.sandbox.durable import remove_orphaned_temps, write_durably
from threads.sandbox.protocol import SandboxError


class SnapshotStore:
    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def exists(self, snapshot_id: str) -> bool:
        return self._ref(snapshot_id).exists()

    def _ref(self, snapshot_id: str) -> Path:
        return self.folder / "refs" / f"{snapshot_id}.json"

    def _archive(self, sha: str) -> Path:
        return self.folder / "archives" / f"{sha}.tar"

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        (self.folder / "refs").mkdir(parents=True, exist_ok=True)
        (self.folder / "archives").mkdir(exist_ok=True)
        with open(self.folder / ".lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            remove_orphaned_temps(self.folder / "refs")
            remove_orphaned_temps(self.folder / "archives")
            yield

    def keep(self, snapshot_id: str, data: bytes, manifest: str) -> None:
        sha = sha256_hex(data)
        with self._lock():
            write_durably(self._archive(sha), data)
            ref = json.dumps({"archive": sha, "manifest_hash": manifest}).encode("utf-8")
            write_durably(self._ref(snapshot_id), ref)

    def archive_of(self, snapshot_id: str) -> bytes:
        try:
            ref = json.loads(self._ref(snapshot_id).read_bytes())
            data = self._archive(ref["archive"]).read_bytes()
        except (OSError, ValueError, KeyError):
            raise SandboxError(
                "snapshot_missing", f"snapshot {snapshot_id} is not on this host"
            ) from None
        if sha256_hex(data) != ref["archive"]:
            raise SandboxError("snapshot_restore_failed", f"snapshot {snapshot_id} is corrupt")
        return data

    def release(self, snapshot_id: str) -> Literal["released", "already_gone"]:
        with self._lock():
            path = self._ref(snapshot_id)
            if _archive_named(path) is None:
                return "already_gone"
            path.unlink()
            named = {_archive_named(ref) for ref in path.parent.glob("*.json")}
            if None in named:  # a ref that can't be read might name any archive: keep them
                return "released"
            # its archive once no ref names it, and any a keep killed before its ref left
            for archive in (self.folder / "archives").glob("*.tar"):
                if archive.stem not in named:
                    archive.unlink(missing_ok=True)
        return "released"


def _archive_named(ref: Path) -> str | None:
    """The archive ``ref`` names; None when it is gone or can't be read."""
    try:
        return str(json.loads(ref.read_bytes())["archive"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
