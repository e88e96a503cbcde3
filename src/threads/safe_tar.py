"""Reading tar archives another hand may have written: the one way this project unpacks one.

An archive is read only uncompressed (``r:``) and each member is judged before anything is made
of it (``checked``): its name is relative and normalized (no absolute path, no ``..``, no empty
or NUL-bearing name), its type is a regular file, a directory or a symlink (a hard link is
accepted only to a regular file unpacked before it, and is written as a copy; devices, FIFOs and
anything else are refused), and it is not sparse, so the bytes a member unpacks to are bytes the
archive holds: nothing expands beyond the archive's own size. A symlink's target must be
relative and stay inside the tree read as written, unless the caller keeps links as they are
(``any_link_target``: a sandbox workspace, whose links are resolved inside the sandbox only and
never followed here).

``extract`` writes into an empty directory it alone is filling: it never writes through a
symlink (a member under a path an earlier member made a link is refused), never replaces an
entry (a name given twice is refused), and makes directories 0700 and files 0600 (0700 when the
archive marks them executable by their owner) whatever the umask. Every refusal and every
malformed archive is ``UnsafeArchiveError``; nothing else escapes but ``OSError`` from the disk.
"""

from __future__ import annotations

import io
import os
import posixpath
import stat
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

DIR_MODE = 0o700
FILE_MODE = 0o600
_COPY_BLOCK = 1 << 20


class UnsafeArchiveError(ValueError):
    """The archive is malformed, or holds a member that could escape its tree or expand."""


def members(
    data: bytes, *, any_link_target: bool = False
) -> Iterator[tuple[tarfile.TarFile, tarfile.TarInfo]]:
    """Every member of the uncompressed archive ``data``, each checked (``checked``)."""
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            while True:
                member = tar.next()
                if member is None:
                    return
                yield tar, checked(member, any_link_target=any_link_target)
    except tarfile.TarError as exc:
        raise UnsafeArchiveError(f"not a readable tar archive ({exc})") from None


def checked(member: tarfile.TarInfo, *, any_link_target: bool = False) -> tarfile.TarInfo:
    """``member`` when it is safe to unpack (see the module docstring); else
    ``UnsafeArchiveError``."""
    name = member.name
    if not name or "\0" in name or name.startswith("/") or _normal(name) != name:
        raise UnsafeArchiveError(f"member {name!r} is not a relative, normalized path")
    if name.split("/")[0] == "..":
        raise UnsafeArchiveError(f"member {name!r} leads outside the tree")
    if member.sparse is not None:
        raise UnsafeArchiveError(f"member {name!r} is sparse")
    if member.issym():
        target = member.linkname
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(name), target))
        escapes = target.startswith("/") or joined.split("/")[0] == ".."
        if not target or "\0" in target or (escapes and not any_link_target):
            raise UnsafeArchiveError(f"symlink {name!r} leads outside the tree ({target!r})")
    elif member.islnk():
        if _normal(member.linkname) != member.linkname or member.linkname.startswith(".."):
            raise UnsafeArchiveError(f"hard link {name!r} leads outside the tree")
    elif not (member.isreg() or member.isdir()):
        raise UnsafeArchiveError(f"member {name!r} is not a file, a directory or a symlink")
    return member


def _normal(name: str) -> str:
    return posixpath.normpath(name.removesuffix("/")) if name not in (".", "") else ""


def extract(data: bytes, root: Path, *, any_link_target: bool = False) -> None:
    """Unpack ``data`` into the empty directory ``root`` (see the module docstring)."""
    try:
        _extract(data, root, any_link_target)
    except tarfile.TarError as exc:  # a member's content cut short, say
        raise UnsafeArchiveError(f"not a readable tar archive ({exc})") from None


def _extract(data: bytes, root: Path, any_link_target: bool) -> None:
    links: set[str] = set()
    files: dict[str, Path] = {}
    given: set[str] = set()
    dirs: set[str] = set()
    for tar, member in members(data, any_link_target=any_link_target):
        name = _normal(member.name)
        parts = name.split("/")
        if any(_leaf("/".join(parts[:n]), links, files) for n in range(1, len(parts))):
            raise UnsafeArchiveError(f"member {name!r} lies under a symlink or a file")
        if name in given:
            raise UnsafeArchiveError(f"member {name!r} is given twice")
        given.add(name)
        _parents(root, parts[:-1], dirs)
        target = root / name
        if member.isdir():
            _parents(root, parts, dirs)
        elif name in dirs:
            raise UnsafeArchiveError(f"member {name!r} replaces a directory")
        elif member.issym():
            os.symlink(member.linkname, target)
            links.add(name)
        elif member.islnk():
            source = files.get(member.linkname)
            if source is None:
                raise UnsafeArchiveError(f"hard link {name!r} names no file unpacked before it")
            with open(source, "rb") as copied:
                _write(target, copied, source.stat().st_mode & stat.S_IXUSR != 0)
            files[name] = target
        else:
            content = tar.extractfile(member)
            if content is None:
                raise UnsafeArchiveError(f"member {name!r} has no content")
            _write(target, content, member.mode & stat.S_IXUSR != 0)
            files[name] = target


def _leaf(name: str, links: set[str], files: dict[str, Path]) -> bool:
    return name in links or name in files


def _parents(root: Path, parts: list[str], dirs: set[str]) -> None:
    """The directories ``parts`` leads through, each made 0700 unless made before."""
    for n in range(1, len(parts) + 1):
        name = "/".join(parts[:n])
        if name not in dirs:
            os.mkdir(root / name, DIR_MODE)
            os.chmod(root / name, DIR_MODE)
            dirs.add(name)


def _write(target: Path, content: IO[bytes], executable: bool) -> None:
    mode = DIR_MODE if executable else FILE_MODE
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(fd, "wb") as out:
        os.fchmod(out.fileno(), mode)
        while block := content.read(_COPY_BLOCK):
            out.write(block)
