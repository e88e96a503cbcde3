"""Workspace manifests and archives: what a snapshot is, byte for byte.

The manifest of a tree is the sorted list of its entries (path, kind, size, content hash, the
owner's execute bit, or a link target); its hash is the sha256 of that list's canonical JSON,
so two trees with the same manifest hash hold the same files. Archives are deterministic tars
(sorted, zeroed times and owners, regular files, directories and symlinks only) and are unpacked
by ``threads.safe_tar``: no absolute paths, no ``..``, nothing written through a link, no
devices, nothing sparse. A file is read only once it is opened without following a link or
blocking and proves to be a regular file, so a FIFO or a device swapped in for it is refused
(``NotRegularError``), never waited on.
"""

from __future__ import annotations

import errno
import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Literal, NotRequired, TypedDict

from threads import safe_tar
from threads.log.hashing import value_hash


class Entry(TypedDict):
    """A manifest entry: ``target`` for a symlink; ``executable``, ``sha256``, ``size`` for a
    file."""

    kind: Literal["dir", "file", "symlink"]
    path: str
    target: NotRequired[str]
    executable: NotRequired[bool]
    sha256: NotRequired[str]
    size: NotRequired[int]


def manifest(root: Path) -> list[Entry]:
    entries: list[Entry] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames.sort()
        here = Path(dirpath)
        for name in sorted([*dirnames, *filenames]):
            path = here / name
            rel = path.relative_to(root).as_posix()
            info = path.lstat()
            if stat.S_ISLNK(info.st_mode):
                entries.append({"kind": "symlink", "path": rel, "target": os.readlink(path)})
            elif stat.S_ISDIR(info.st_mode):
                entries.append({"kind": "dir", "path": rel})
            elif stat.S_ISREG(info.st_mode):
                entries.append(
                    {
                        "executable": bool(info.st_mode & stat.S_IXUSR),
                        "kind": "file",
                        "path": rel,
                        "sha256": _file_hash(path),
                        "size": info.st_size,
                    }
                )
            # Sockets, fifos and devices are not workspace content; a snapshot leaves them out.
    entries.sort(key=lambda e: e["path"])
    return entries


def manifest_hash(root: Path) -> str:
    return value_hash({"entries": manifest(root), "format": "threads.manifest/1"})


class NotRegularError(OSError):
    """A path that was a regular file is not one any more (a FIFO, a device, a link)."""


def open_regular(path: Path) -> int:
    """``path`` opened for reading without following a link or blocking, once it proves a
    regular file (``NotRegularError`` otherwise)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise NotRegularError(errno.ELOOP, "a symlink, not a regular file") from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRegularError(errno.EINVAL, "not a regular file")
    return fd


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with os.fdopen(open_regular(path), "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive(root: Path) -> bytes:
    """A deterministic tar of ``root``'s content (the same tree gives the same bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in manifest(root):
            info = tarfile.TarInfo(entry["path"])
            info.mtime = 0
            if entry["kind"] == "dir":
                info.type, info.mode = tarfile.DIRTYPE, 0o700
                tar.addfile(info)
            elif entry["kind"] == "symlink":
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, entry["target"], 0o777
                tar.addfile(info)
            else:
                with os.fdopen(open_regular(root / entry["path"]), "rb") as f:
                    info.size = os.fstat(f.fileno()).st_size
                    info.mode = 0o700 if entry["executable"] else 0o600
                    tar.addfile(info, f)
    return buffer.getvalue()


def extract(data: bytes, root: Path) -> None:
    """Unpack an archive into the empty directory ``root``; refuses anything unsafe
    (``threads.safe_tar.UnsafeArchiveError``). The workspace's links are kept as the sandbox made
    them (they resolve inside the sandbox; nothing here follows one)."""
    safe_tar.extract(data, root, any_link_target=True)
