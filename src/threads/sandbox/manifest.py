"""Workspace manifests and archives: what a snapshot is, byte for byte.

The manifest of a tree is the sorted list of its entries (path, kind, size, content hash, the
owner's execute bit, or a link target); its hash is the sha256 of that list's canonical JSON,
so two trees with the same manifest hash hold the same files. Archives are deterministic tars
(sorted, zeroed times and owners) and are extracted with the ``data`` filter: no absolute
paths, no ``..``, no links leaving the tree, no devices.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile
from pathlib import Path
from typing import Any

from threads.log.hashing import value_hash


def manifest(root: Path) -> list[dict[str, Any]]:
    entries: list[dict[str, Any]] = []
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
    entries.sort(key=lambda e: str(e["path"]))
    return entries


def manifest_hash(root: Path) -> str:
    return value_hash({"entries": manifest(root), "format": "threads.manifest/1"})


def _file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def archive(root: Path) -> bytes:
    """A deterministic tar of ``root``'s content (the same tree gives the same bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for entry in manifest(root):
            path = root / entry["path"]
            info = tar.gettarinfo(str(path), arcname=entry["path"])
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            if info.isfile():
                with open(path, "rb") as f:
                    tar.addfile(info, f)
            else:
                tar.addfile(info)
    return buffer.getvalue()


def extract(data: bytes, root: Path) -> None:
    """Unpack an archive into the empty directory ``root``; refuses anything unsafe."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r") as tar:
        tar.extractall(root, filter="data")
