"""Export and import of branches as JSONL (spec §1 "Export/import"), on any ``Store``.

An export is every ancestor segment through its fork point, then the branch's own segment,
each stored line byte-identical plus ``\\n``, then the branch's Head line. An import admits and
chains every line and enforces the semantic rules (``Fold``) before anything is stored, then
stores each segment's exact bytes under its parent.
Invariants: export(import(x)) == x for every complete export; a torn final chunk is never
stored as a line, only kept as an artifact named by the branch's ``dropped_ref`` (the branch is
then ``head_verified=False``); re-importing identical lines is a no-op, different ones are
``seq_conflict``.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from threads.errors import LogError, NotFoundError, StoreError
from threads.log.lines import Event, Head
from threads.log.reduce import Fold
from threads.log.refs import referenced_artifacts
from threads.log.verify import Segment as VerifiedSegment
from threads.log.verify import verify_export
from threads.store.bundle import is_bundle, read_bundle, write_bundle
from threads.store.protocol import ArtifactRef, Segment, Store

TORN_MEDIA_TYPE = "application/octet-stream"
MAX_IMPORT_BYTES = 512 * 1024 * 1024  # an import reads at most this much (import_too_large)


@dataclass(frozen=True, slots=True)
class ImportResult:
    thread_id: str
    branch_id: str  # the branch the export's Head names (its last segment)
    head_seq: int
    events: int  # events on the resolved chain, ancestors included
    status: str  # the fold's status of the imported chain
    head_verified: bool
    stored: bool  # False: an identical branch was already in the store (nothing written)
    dropped_ref: ArtifactRef | None  # the torn tail's bytes, when there was one
    torn_at_offset: int | None
    # Referenced artifacts this store still lacks (a plain JSONL import carries none; a
    # bundle import refuses instead). The branch can't continue until they are there.
    missing_artifacts: tuple[str, ...] = ()


async def export_branch(store: Store, branch_id: str, *, inspect: bool = False) -> bytes:
    """The branch's resolved chain as JSONL plus its Head line; raises ``log_corrupt`` when the
    stored bytes no longer chain (read_chain checks that). ``inspect=True`` writes the stored
    bytes as they are, unchecked, with the stored head: how a corrupt branch is looked at (its
    export then fails verification exactly where the branch is corrupt)."""
    if inspect:
        branch, lines = await store.stored_lines(branch_id)
    else:
        chain = await store.read_chain(branch_id)
        branch = chain.branch
        lines = [
            line for s in chain.segments for line in (s.header.line, *(e.line for e in s.events))
        ]
    head = Head(branch_id, branch.head_seq, branch.head_hash).line()
    return b"\n".join([*lines, head]) + b"\n"


async def export_bundle(store: Store, branch_id: str) -> bytes:
    """The branch's export with every artifact it references (``threads.store.bundle``); refused
    (``artifact_missing``, naming them) unless each is in this store and intact."""
    chain = await store.read_chain(branch_id)
    log = await export_branch(store, branch_id)
    wanted = list(referenced_artifacts(chain.events))
    if chain.branch.dropped_ref is not None:
        wanted.append(chain.branch.dropped_ref["sha256"])
    artifacts: dict[str, bytes] = {}
    unusable: list[str] = []
    for sha256 in dict.fromkeys(wanted):
        try:
            artifacts[sha256] = await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code not in ("artifact_missing", "artifact_corrupt"):
                raise
            unusable.append(sha256)
    if unusable:
        raise StoreError(
            "artifact_missing",
            f"this store lacks (or holds damaged) {len(unusable)} artifact(s) the branch"
            f" references: {', '.join(unusable)}; no bundle was written. Verify the store to"
            " see what is damaged, or export without a bundle.",
        )
    return write_bundle(log, artifacts)


async def import_log(
    store: Store, data: bytes, *, tenant_id: str, artifacts: dict[str, bytes] | None = None
) -> ImportResult:
    """Verify ``data`` completely, then store each segment (ancestors first). With
    ``artifacts`` (a bundle's, already checked against their hashes), every artifact the log
    references must be among them or already stored, else nothing is stored
    (``artifact_missing`` naming each); they are stored before the lines that reference them."""
    if is_bundle(data):
        data, artifacts = read_bundle(data)
    fold = Fold(now_ms=store.clock.now_ms())
    verified = verify_export(data, apply=fold.apply, on_header=fold.header)
    if not verified.segments:
        raise LogError(
            "invalid_line",
            "the export holds no complete line; it is empty or torn at its"
            " header. Export the branch again.",
            seq=0,
        )
    missing = await _missing_artifacts(store, verified.events, artifacts or {})
    if missing and artifacts is not None:
        raise StoreError(
            "artifact_missing",
            f"the bundle lacks {len(missing)} artifact(s) its log references:"
            f" {', '.join(missing)}; nothing was imported. Export the branch again with --bundle"
            " from a store that holds them.",
        )
    refs = referenced_artifacts(verified.events)
    for sha256, content in (artifacts or {}).items():
        await store.put_artifact(content, refs.get(sha256, TORN_MEDIA_TYPE))
    *ancestors, own = verified.segments
    inspection_only = False
    parent_id: str | None = None
    for segment in ancestors:
        inspection_only = inspection_only or _is_repair_fork(segment)
        await _store_ancestor(store, segment, parent_id, tenant_id, inspection_only)
        parent_id = segment.header.branch_id
    inspection_only = inspection_only or _is_repair_fork(own)
    dropped_ref = None
    if verified.torn is not None:
        dropped_ref = await store.put_artifact(verified.torn.data, TORN_MEDIA_TYPE)
    stored = await store.store_segment(
        _store_form(own),
        tenant_id=tenant_id,
        parent_branch_id=parent_id,
        head_verified=verified.head_verified,
        dropped_ref=dropped_ref,
        state=_state(inspection_only),
    )
    return ImportResult(
        thread_id=own.header.thread_id,
        branch_id=own.header.branch_id,
        head_seq=fold.last_seq,
        events=len(verified.events),
        status=fold.status,
        head_verified=verified.head_verified,
        stored=stored,
        dropped_ref=dropped_ref,
        torn_at_offset=None if verified.torn is None else verified.torn.at_offset,
        missing_artifacts=tuple(missing),
    )


async def _missing_artifacts(
    store: Store, events: list[Event], carried: dict[str, bytes]
) -> list[str]:
    """Referenced artifacts neither ``carried`` nor intact in ``store``."""
    missing = []
    for sha256 in referenced_artifacts(events):
        if sha256 in carried:
            continue
        try:
            await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code not in ("artifact_missing", "artifact_corrupt"):
                raise
            missing.append(sha256)
    return missing


async def export_to_path(
    store: Store, branch_id: str, path: str | os.PathLike[str], *, bundle: bool = False
) -> int:
    """Write the export (a bundle with ``bundle=True``) to ``path``; returns its size."""
    data = await (export_bundle if bundle else export_branch)(store, branch_id)
    await asyncio.to_thread(Path(path).write_bytes, data)
    return len(data)


async def import_from_path(
    store: Store,
    path: str | os.PathLike[str],
    *,
    tenant_id: str,
    max_bytes: int = MAX_IMPORT_BYTES,
) -> ImportResult:
    """Import an export or a bundle (told apart by its bytes), read up to ``max_bytes``."""
    data = await asyncio.to_thread(read_bounded, Path(path), max_bytes)
    return await import_log(store, data, tenant_id=tenant_id)


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """``path``'s bytes, refused (``import_too_large``) past ``max_bytes`` without reading
    further: a device or a runaway file never fills memory."""
    with path.open("rb") as f:
        data = f.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise StoreError(
            "import_too_large",
            f"{path} holds more than {max_bytes} bytes; nothing was imported. An export is one"
            " branch's log: check the file, or raise the limit (--max-bytes) if it is one.",
        )
    return data


async def _store_ancestor(
    store: Store,
    segment: VerifiedSegment,
    parent_id: str | None,
    tenant_id: str,
    inspection_only: bool,
) -> None:
    """An export carries an ancestor only through the fork point, so a stored ancestor that
    has grown since is still the same branch: compare the prefix the export holds."""
    try:
        await store.get_branch(segment.header.branch_id)
    except NotFoundError:
        await store.store_segment(
            _store_form(segment),
            tenant_id=tenant_id,
            parent_branch_id=parent_id,
            head_verified=True,  # a later segment's fork at_hash vouches for this prefix
            dropped_ref=None,
            state=_state(inspection_only),
        )
        return
    chain = await store.read_chain(segment.header.branch_id)
    stored = chain.segments[-1]
    incoming = [event.line for event in segment.events]
    prefix = [event.line for event in stored.events[: len(incoming)]]
    if stored.header.line != segment.header.line or prefix != incoming:
        raise StoreError(
            "seq_conflict",
            f"ancestor branch {segment.header.branch_id} is already stored with different"
            " lines; import this export into another store",
        )


def _store_form(segment: VerifiedSegment) -> Segment:
    return Segment(segment.header, segment.events, segment.fork_at_seq)


def _is_repair_fork(segment: VerifiedSegment) -> bool:
    first = segment.events[0] if segment.events else None
    return first is not None and first.type == "fork" and first.data.get("reason") == "repair"


def _state(inspection_only: bool) -> str:
    # A repair fork (and anything forked from one) can be read and exported, never run.
    return "inspection_only" if inspection_only else "ready"
