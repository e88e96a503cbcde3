"""Artifacts as content-addressed files, laid out as the reference lays them out.

A store directory keeps each artifact at ``artifacts/sha256/<first 2 hex>/<64 hex>``;
directories are 0700 and files 0600, and nothing about an artifact is kept in the database.
A put writes a temporary file (``mkstemp`` in ``artifacts/``), fsyncs it, hard-links it to its
address and fsyncs the shard directory, so an address either holds the complete bytes or does
not exist. When the address already exists its mtime is refreshed (a gc's grace counts from
the last put) and its bytes are checked, then fsynced with their directory (another writer may
have linked them and not synced yet); damaged bytes are replaced by the good ones. A get
checks the bytes against the address (``artifact_corrupt``) before returning them.

A writer killed between its write and its link leaves its temporary file behind; ``sweep`` (run
when a store opens) removes such files once they are provably abandoned. The name carries its
writer (``holder.file_tag``): a file whose writer ran on this host and no longer runs goes at
once; one whose writer can't be judged here (another host, a name without a writer) goes only
once it is older than ``ABANDONED_AFTER_MS``. A live writer's file is never touched."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from threads.errors import StoreError
from threads.log.hashing import SHA256_HEX, sha256_hex
from threads.store.holder import file_tag, writer_gone

DIR_MODE = 0o700
FILE_MODE = 0o600
ABANDONED_AFTER_MS = 24 * 3600 * 1000  # a temp file no writer could still be writing
# ``.<sha256>.<writer>.<mkstemp's random>.tmp``, or without the writer (an earlier release).
_TEMP = re.compile(r"^\.[0-9a-f]{64}\.(?:(?P<writer>[^.]+)\.)?[^.]+\.tmp$")


class ArtifactFiles:
    """The ``artifacts/`` directory of one store directory ``root``."""

    def __init__(self, root: Path) -> None:
        self.base = root / "artifacts"

    def path(self, sha256: str) -> Path:
        return self.base / "sha256" / sha256[:2] / sha256

    def put(self, data: bytes) -> str:
        """Store ``data`` at its address (see the module docstring); returns the sha256."""
        sha256 = sha256_hex(data)
        target = self.path(sha256)
        if target.exists() and self._refreshed(target, sha256):
            return sha256
        _make_dir(target.parent)
        fd, tmp = tempfile.mkstemp(
            prefix=f".{sha256}.{file_tag()}.", suffix=".tmp", dir=self.base
        )
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, target)
            except FileExistsError:
                if not self._refreshed(target, sha256):
                    os.replace(tmp, target)  # a damaged file gives way to the good bytes
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(target.parent)
        return sha256

    def get(self, sha256: str) -> bytes | None:
        """The bytes at ``sha256``'s address, checked; None when there is no such file."""
        if not SHA256_HEX.match(sha256):
            return None
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            return None
        if sha256_hex(data) != sha256:
            raise StoreError("artifact_corrupt", f"artifact {sha256} does not match its hash")
        return data

    def sweep(self, now_ms: int) -> int:
        """Remove the abandoned temporary files of puts (see the module docstring), judging
        age by ``now_ms``; returns how many went. Best effort: a file that can't be listed,
        read or removed (a read-only store) is left."""
        removed = 0
        try:
            entries = list(os.scandir(self.base))
        except OSError:
            return 0
        for entry in entries:
            match = _TEMP.match(entry.name)
            if match is None or not _abandoned(entry, match["writer"], now_ms):
                continue
            with contextlib.suppress(OSError):  # gone already, or not ours to remove
                os.unlink(entry.path)
                removed += 1
        return removed

    def holds(self, sha256: str) -> bool:
        return bool(SHA256_HEX.match(sha256)) and self.path(sha256).exists()

    @staticmethod
    def _refreshed(target: Path, sha256: str) -> bool:
        """Touch an existing address; False when its bytes are not what it names. Good bytes
        are made durable here, with their name: the writer that linked them may not have
        synced its directory yet, and the event naming them commits once this returns."""
        try:
            os.utime(target)
            with open(target, "rb") as f:
                if sha256_hex(f.read()) != sha256:
                    return False
                os.fsync(f.fileno())
        except FileNotFoundError:
            return False
        _fsync_dir(target.parent)
        return True


def _abandoned(entry: os.DirEntry[str], writer: str | None, now_ms: int) -> bool:
    gone = None if writer is None else writer_gone(writer)
    if gone is not None:  # its writer is judged on this host: its age does not matter
        return gone
    try:
        return entry.stat().st_mtime_ns // 1_000_000 < now_ms - ABANDONED_AFTER_MS
    except OSError:
        return False


def make_store_dirs(root: Path) -> None:
    """The store directory and its ``artifacts/`` (0700 when created here)."""
    _make_dir(root / "artifacts")


def _make_dir(path: Path) -> None:
    if path.is_dir():
        return
    _make_dir(path.parent)
    try:
        os.mkdir(path, DIR_MODE)
    except FileExistsError:
        return
    _fsync_dir(path.parent)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
