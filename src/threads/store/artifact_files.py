"""Artifacts as content-addressed files, laid out as the reference lays them out.

A store directory keeps each artifact at ``artifacts/sha256/<first 2 hex>/<64 hex>``;
directories are 0700 and files 0600, and nothing about an artifact is kept in the database.
A put writes a temporary file (``mkstemp`` in ``artifacts/``), fsyncs it, hard-links it to its
address and fsyncs the shard directory, so an address either holds the complete bytes or does
not exist. When the address already exists its mtime is refreshed (a gc's grace counts from
the last put) and its bytes are checked; damaged bytes are replaced by the good ones. A get
checks the bytes against the address (``artifact_corrupt``) before returning them.
"""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
from pathlib import Path

from threads.errors import StoreError
from threads.log.hashing import sha256_hex

DIR_MODE = 0o700
FILE_MODE = 0o600
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


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
        fd, tmp = tempfile.mkstemp(prefix=f".{sha256}.", suffix=".tmp", dir=self.base)
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
        if not _SHA256.match(sha256):
            return None
        try:
            data = self.path(sha256).read_bytes()
        except FileNotFoundError:
            return None
        if sha256_hex(data) != sha256:
            raise StoreError("artifact_corrupt", f"artifact {sha256} does not match its hash")
        return data

    def holds(self, sha256: str) -> bool:
        return bool(_SHA256.match(sha256)) and self.path(sha256).exists()

    @staticmethod
    def _refreshed(target: Path, sha256: str) -> bool:
        """Touch an existing address; False when its bytes are not what it names."""
        try:
            os.utime(target)
            return sha256_hex(target.read_bytes()) == sha256
        except FileNotFoundError:
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
