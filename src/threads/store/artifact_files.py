"""Artifacts as content-addressed files, laid out as the reference lays them out.

A store directory keeps each artifact at ``artifacts/sha256/<first 2 hex>/<64 hex>``;
directories are 0700 and files 0600, and nothing about an artifact is kept in the database.
A put writes a temporary file (``mkstemp`` in ``artifacts/``), fsyncs it, hard-links it to its
address and fsyncs the shard directory, so an address either holds the complete bytes or does
not exist. When the address already exists its mtime is refreshed (a gc's grace counts from
the last put) and its bytes are checked, then fsynced with their directory (another writer may
have linked them and not synced yet); damaged bytes, or anything else at the address (a FIFO,
a symlink, a socket), are replaced by the good ones. A get checks the bytes against the address
(``artifact_corrupt``) before returning them.

Only a regular file is ever opened, and never in a way that can block: the path is lstat'ed
first, opened with ``O_NONBLOCK | O_NOFOLLOW`` and fstat'ed again (the same inode, still a
regular file), and at most its size (bounded by ``MAX_ARTIFACT_BYTES``) is read. Whatever else
sits at an address (a directory, a FIFO, a socket, a device, a symlink, a file that can't be
read or is larger than any artifact) is ``artifact_corrupt`` naming the address and what is
there; nothing at the address is ``artifact_missing`` (the store's to say).

A writer killed between its write and its link leaves its temporary file behind; ``sweep`` (run
when a store opens) removes such files once they are provably abandoned. The name carries its
writer (``holder.file_tag``): a file whose writer ran on this host and no longer runs goes at
once; one whose writer can't be judged here (another host, a name without a writer) goes only
once it is older than ``ABANDONED_AFTER_MS``. A live writer's file is never touched."""

from __future__ import annotations

import contextlib
import os
import re
import stat
import tempfile
from pathlib import Path

from threads.errors import StoreError
from threads.log.hashing import SHA256_HEX, sha256_hex
from threads.store.holder import file_tag, writer_gone

DIR_MODE = 0o700
FILE_MODE = 0o600
ABANDONED_AFTER_MS = 24 * 3600 * 1000  # a temp file no writer could still be writing
# The largest artifact file read back: as much as one import may carry, so what a store reads
# it can also move (and a file grown by damage never fills memory).
MAX_ARTIFACT_BYTES = 512 * 1024 * 1024
_READ_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1024 * 1024
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
        if self._refreshed(target, sha256):
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
                    _replace(tmp, target, sha256)  # damage gives way to the good bytes
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        _fsync_dir(target.parent)
        return sha256

    def get(self, sha256: str) -> bytes | None:
        """The bytes at ``sha256``'s address, checked; None when nothing is there. Anything
        but a readable regular file holding those bytes is ``artifact_corrupt``."""
        if not SHA256_HEX.fullmatch(sha256):
            return None
        path = self.path(sha256)
        data = _read_regular_file(path, sha256)
        if data is not None and sha256_hex(data) != sha256:
            raise _corrupt(sha256, path, f"holds {len(data)} bytes that do not match its hash")
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
        """Whether a regular file sits at ``sha256``'s address (its bytes unchecked)."""
        if not SHA256_HEX.fullmatch(sha256):
            return False
        try:
            return stat.S_ISREG(os.lstat(self.path(sha256)).st_mode)
        except OSError:
            return False

    @staticmethod
    def _refreshed(target: Path, sha256: str) -> bool:
        """Touch an existing address; False when it holds nothing, or anything but a regular
        file of the bytes it names. Good bytes are made durable here, with their name: the
        writer that linked them may not have synced its directory yet, and the event naming
        them commits once this returns."""
        try:
            fd = _open_regular(target, sha256)
        except StoreError:
            return False
        if fd is None:
            return False
        try:
            if sha256_hex(_read_all(fd, target, sha256)) != sha256:
                return False
            os.utime(fd)
            os.fsync(fd)
        except (OSError, StoreError):
            return False
        finally:
            os.close(fd)
        _fsync_dir(target.parent)
        return True


def _read_regular_file(path: Path, sha256: str) -> bytes | None:
    """The bytes of the regular file at ``path`` (the address of ``sha256``), never blocking
    (see the module docstring); None when nothing is there."""
    fd = _open_regular(path, sha256)
    if fd is None:
        return None
    try:
        return _read_all(fd, path, sha256)
    except OSError as exc:
        raise _corrupt(sha256, path, f"can't be read ({exc.strerror or exc})") from None
    finally:
        os.close(fd)


def _open_regular(path: Path, sha256: str) -> int | None:
    """A descriptor of the regular file at ``path``, or None when nothing is there; anything
    else there is ``artifact_corrupt``. Opening can't block: only a path lstat'ed as a regular
    file is opened, non-blocking and not following a symlink, and the descriptor is checked to
    be that same regular file (the path may have been swapped in between)."""
    try:
        seen = os.lstat(path)
    except FileNotFoundError:
        return None
    except OSError as exc:  # a shard "directory" that is a file, one that can't be searched
        raise _corrupt(sha256, path, f"can't be looked up ({exc.strerror or exc})") from None
    if not stat.S_ISREG(seen.st_mode):
        raise _corrupt(sha256, path, f"is {_kind(seen.st_mode)}, not a regular file")
    try:
        fd = os.open(path, _READ_FLAGS)
    except FileNotFoundError:
        return None
    except OSError as exc:  # ELOOP: swapped for a symlink; EACCES: no read permission
        raise _corrupt(sha256, path, f"can't be opened ({exc.strerror or exc})") from None
    opened = os.fstat(fd)
    if (opened.st_dev, opened.st_ino) != (seen.st_dev, seen.st_ino) or not stat.S_ISREG(
        opened.st_mode
    ):
        os.close(fd)
        raise _corrupt(sha256, path, "was replaced while it was being opened")
    if opened.st_size > MAX_ARTIFACT_BYTES:
        os.close(fd)
        raise _corrupt(
            sha256, path, f"holds {opened.st_size} bytes, more than any artifact"
            f" ({MAX_ARTIFACT_BYTES})",
        )
    return fd


def _read_all(fd: int, path: Path, sha256: str) -> bytes:
    """The file's bytes, reading no more than its size at open plus one (a file that grows
    while it is read is damaged, not followed)."""
    size = os.fstat(fd).st_size
    chunks: list[bytes] = []
    read = 0
    while read <= size:
        chunk = os.read(fd, min(_CHUNK, size + 1 - read))
        if not chunk:
            break
        chunks.append(chunk)
        read += len(chunk)
    if read > size:
        raise _corrupt(sha256, path, "grew while it was being read")
    return b"".join(chunks)


def _replace(tmp: str, target: Path, sha256: str) -> None:
    """Move the good bytes over whatever holds the address. A directory there can't be
    replaced, and is reported instead: it is not ours to remove."""
    try:
        os.replace(tmp, target)
    except IsADirectoryError:
        raise _corrupt(
            sha256, target, "is a directory, so the good bytes can't be put there"
        ) from None


def _kind(mode: int) -> str:
    kinds = [
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISLNK, "a symlink"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
    ]
    return next((name for test, name in kinds if test(mode)), "of an unknown kind")


def _corrupt(sha256: str, path: Path, what: str) -> StoreError:
    return StoreError(
        "artifact_corrupt",
        f"artifact {sha256} at {path} {what} (threads keeps each artifact as a regular file"
        " named by the sha256 of its bytes); move that path aside",
    )


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
