"""Bundles: a self-contained export (``threads export --bundle``, ``Thread.export(path,
bundle=True)``) that carries every artifact its branch's log references.

Format: a POSIX (ustar) tar holding ``log.jsonl`` first (the branch's export, byte for byte what
``threads export`` writes), then one ``artifacts/<sha256>`` member per artifact the resolved
chain references (request artifacts, large tool results, commits' result_ref, a torn tail an
import recorded, provider call ids), named by the sha256 of its bytes, each once.
Invariant: reading a bundle accepts nothing but that layout, and never holds more than a bound
in memory: every member is a plain regular file (no sparse member, link, device, FIFO,
directory or pax header) named exactly ``log.jsonl`` or ``artifacts/<64 lowercase hex>``, each
once; the bytes actually read are counted against a bound per member and in total
(``import_too_large``); every artifact matches its name's hash (``artifact_corrupt``). Any other
shape is ``invalid_argument`` naming the member. (``threads.store.transfer`` decides which
artifacts to store: only those the log references.)
"""

from __future__ import annotations

import io
import re
import tarfile

from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store.artifact_files import MAX_ARTIFACT_BYTES

BUNDLE_LOG = "log.jsonl"
_ARTIFACT = re.compile(r"artifacts/([0-9a-f]{64})")  # fullmatch: no newline, no path tricks
_PLAIN_FILE = (tarfile.REGTYPE, tarfile.AREGTYPE)
_KINDS = {
    tarfile.GNUTYPE_SPARSE: "a sparse file",
    tarfile.LNKTYPE: "a hard link",
    tarfile.SYMTYPE: "a symlink",
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
    tarfile.DIRTYPE: "a directory",
    tarfile.CONTTYPE: "a contiguous file",
}
_CHUNK = 1024 * 1024


def is_bundle(data: bytes) -> bool:
    """A tar archive (its ustar magic), as opposed to a JSONL export."""
    return data[257:262] == b"ustar"


def write_bundle(log: bytes, artifacts: dict[str, bytes]) -> bytes:
    """The bundle of an export and its artifacts (by sha256), in the order given."""
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        _add(tar, BUNDLE_LOG, log)
        for sha256, data in artifacts.items():
            _add(tar, f"artifacts/{sha256}", data)
    return out.getvalue()


def read_bundle(data: bytes, *, max_bytes: int) -> tuple[bytes, dict[str, bytes]]:
    """The export and the artifacts (by sha256) a bundle holds, each checked (see the module
    docstring); at most ``max_bytes`` are read out of it in all."""
    log: bytes | None = None
    artifacts: dict[str, bytes] = {}
    budget = _Budget(max_bytes)
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if tar.pax_headers:  # a global header tar keeps aside, never applied here
                    raise _refused("it carries a pax global header; a bundle is plain ustar")
                sha256 = _checked_name(member, seen=artifacts, log_seen=log is not None)
                _check_plain_file(member)
                if sha256 is None:
                    log = budget.read(tar, member, limit=max_bytes)
                    continue
                content = budget.read(tar, member, limit=MAX_ARTIFACT_BYTES)
                if sha256_hex(content) != sha256:
                    raise StoreError(
                        "artifact_corrupt",
                        f"bundle member {member.name} does not match its hash; the bundle"
                        " was damaged after it was written. Export it again.",
                    )
                artifacts[sha256] = content
    except tarfile.TarError as exc:
        raise _refused(f"it is not a readable tar archive ({exc})") from None
    if log is None:
        raise _refused(f"it holds no {BUNDLE_LOG}")
    return log, artifacts


def _checked_name(member: tarfile.TarInfo, *, seen: dict[str, bytes], log_seen: bool) -> str | None:
    """The sha256 an artifact member is named by (None for the log); any other name, or a
    name met twice, is refused."""
    if member.name == BUNDLE_LOG:
        if log_seen:
            raise _refused(f"it holds {BUNDLE_LOG} twice")
        return None
    match = _ARTIFACT.fullmatch(member.name)
    if match is None:
        raise _refused(
            f"member {member.name!r} is neither {BUNDLE_LOG} nor artifacts/<sha256 in"
            " lowercase hex>"
        )
    if match.group(1) in seen:
        raise _refused(f"it holds member {member.name} twice")
    return match.group(1)


def _check_plain_file(member: tarfile.TarInfo) -> None:
    """A bundle member is a plain regular file whose bytes are the archive's own: no sparse
    map, no link, no special file, no pax header (which could rename or resize it)."""
    if member.type not in _PLAIN_FILE or member.sparse is not None:
        kind = "a sparse file" if member.sparse is not None else _KINDS.get(member.type)
        raise _refused(f"member {member.name!r} is {kind or 'not a plain file'}")
    if member.pax_headers:
        raise _refused(f"member {member.name!r} carries pax headers; a bundle is plain ustar")


class _Budget:
    """The bytes read out of one bundle, counted as they are read (never trusted from a
    header): a member past its own limit, or the bundle past its total, is refused."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.read_so_far = 0

    def read(self, tar: tarfile.TarFile, member: tarfile.TarInfo, *, limit: int) -> bytes:
        stream = tar.extractfile(member)
        if stream is None:
            raise _refused(f"member {member.name!r} has no content")
        chunks: list[bytes] = []
        size = 0
        while True:
            room = min(limit - size, self.total - self.read_so_far)
            chunk = stream.read(min(_CHUNK, room + 1))
            if not chunk:
                return b"".join(chunks)
            if len(chunk) > room:
                raise self._too_large(member, limit, member_full=room == limit - size)
            chunks.append(chunk)
            size += len(chunk)
            self.read_so_far += len(chunk)

    def _too_large(self, member: tarfile.TarInfo, limit: int, *, member_full: bool) -> StoreError:
        if member_full:
            where = f"member {member.name!r} expands past {limit} bytes, more than it may hold"
        else:
            where = f"its members expand past {self.total} bytes in all (at {member.name!r})"
        return StoreError(
            "import_too_large",
            f"this bundle can't be imported: {where}; nothing was imported. A bundle holds one"
            " branch's log and the artifacts it references: check the file (--max-bytes raises"
            " the total for a bundle that really is that large).",
        )


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644  # no owner, no time: the same branch always bundles to the same bytes
    tar.addfile(info, io.BytesIO(data))


def _refused(why: str) -> StoreError:
    return StoreError(
        "invalid_argument", f"this bundle can't be imported: {why}. Export it again with --bundle."
    )
