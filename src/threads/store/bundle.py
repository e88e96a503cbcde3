"""Bundles: a self-contained export (``threads export --bundle``, ``Thread.export(path,
bundle=True)``) that carries every artifact its branch references.

Format: a POSIX (ustar) tar holding ``log.jsonl`` first (the branch's export, byte for byte what
``threads export`` writes), then one ``artifacts/<sha256>`` member per artifact the resolved
chain references (request artifacts, large tool results, commits' result_ref, a torn tail kept
by an earlier import, provider call ids), named by the sha256 of its bytes.
Invariant: reading a bundle checks every member against its name's hash (``artifact_corrupt``)
and accepts no other member. (``threads.store.transfer`` gathers and stores the artifacts.)
"""

from __future__ import annotations

import io
import re
import tarfile

from threads.errors import StoreError
from threads.log.hashing import sha256_hex

BUNDLE_LOG = "log.jsonl"
_ARTIFACT = re.compile(r"^artifacts/([0-9a-f]{64})$")


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


def read_bundle(data: bytes) -> tuple[bytes, dict[str, bytes]]:
    """The export and the artifacts (by sha256) a bundle holds, each checked."""
    log: bytes | None = None
    artifacts: dict[str, bytes] = {}
    try:
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            for member in tar:
                if not member.isfile():
                    raise _refused(f"member {member.name!r} is not a file")
                content = _read(tar, member)
                match = _ARTIFACT.match(member.name)
                if member.name == BUNDLE_LOG and log is None:
                    log = content
                elif match is not None:
                    if sha256_hex(content) != match.group(1):
                        raise StoreError(
                            "artifact_corrupt",
                            f"bundle member {member.name} does not match its hash; the bundle"
                            " was damaged after it was written. Export it again.",
                        )
                    artifacts[match.group(1)] = content
                else:
                    raise _refused(f"unexpected member {member.name!r}")
    except tarfile.TarError as exc:
        raise _refused(f"it is not a readable tar archive ({exc})") from None
    if log is None:
        raise _refused(f"it holds no {BUNDLE_LOG}")
    return log, artifacts


def _add(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644  # no owner, no time: the same branch always bundles to the same bytes
    tar.addfile(info, io.BytesIO(data))


def _read(tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
    stream = tar.extractfile(member)
    if stream is None:
        raise _refused(f"member {member.name!r} has no content")
    return stream.read()


def _refused(why: str) -> StoreError:
    return StoreError(
        "invalid_argument", f"this bundle can't be imported: {why}. Export it again with --bundle."
    )
