"""Export and import of branches as JSONL (spec §1 "Export/import"), on any ``Store``.

An export is every ancestor segment through its fork point, then the branch's own segment,
each stored line byte-identical plus ``\\n``, then the branch's Head line. An import admits and
chains every line and enforces the semantic rules (``Fold``) before anything is stored, then
stores each segment's exact bytes under its parent.
Invariants: export(import(x)) == x for every complete export; a torn final chunk is never
stored as a line, only kept as an artifact named by the branch's ``dropped_ref`` (the branch is
then ``head_verified=False``); re-importing identical lines writes no line and no file that
was not there, different ones are ``seq_conflict``; a refused import (bad lines, a bundle of
the wrong shape, a conflict, another tenant's thread: ``forbidden``) writes nothing; a store
holds only the artifacts the logs it imported reference.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

from threads.errors import LogError, StoreError
from threads.log.fold import Fold
from threads.log.lines import Head
from threads.log.refs import first_reference, referenced_artifacts
from threads.log.replay import missing_before
from threads.log.verify import Segment as VerifiedSegment
from threads.log.verify import VerifiedExport, verify_export
from threads.log.vocabulary import ArtifactRef, data_of
from threads.store.bundle import is_bundle, read_bundle, write_bundle
from threads.store.fold_open import fold_row, row_at_head_pays
from threads.store.import_checks import check_owner, store_owned, stored_already
from threads.store.protocol import Store
from threads.store.snapshot_row import StoredSnapshot

TORN_MEDIA_TYPE = "application/octet-stream"
MAX_IMPORT_BYTES = 512 * 1024 * 1024  # an import reads at most this much (import_too_large)
MISSING_OR_CORRUPT = ("artifact_missing", "artifact_corrupt")
_READ_CHUNK = 1024 * 1024


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
    # Where and how the file was torn, in words (``VerifiedExport.torn_where``); None when
    # it was complete. A torn file is imported as its verified prefix, head unverified.
    torn: str | None = None
    # Referenced artifacts this store still lacks (a plain JSONL import carries none; a
    # bundle import refuses instead). The branch can't continue until they are there.
    missing_artifacts: tuple[str, ...] = ()
    unreferenced_members: int = 0  # bundle artifacts the log does not reference: not stored


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
    """The branch's export with every artifact its log references (``threads.store.bundle``);
    refused (``artifact_missing``, or ``artifact_corrupt`` when one is there but damaged,
    naming each and what is wrong) unless each is in this store and intact."""
    chain = await store.read_chain(branch_id)
    log = await export_branch(store, branch_id)
    artifacts: dict[str, bytes] = {}
    unusable: list[StoreError] = []
    for sha256 in referenced_artifacts(chain.events):
        try:
            artifacts[sha256] = await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code not in MISSING_OR_CORRUPT:
                raise
            unusable.append(exc)
    if unusable:
        corrupt = any(exc.code == "artifact_corrupt" for exc in unusable)
        raise StoreError(
            "artifact_corrupt" if corrupt else "artifact_missing",
            f"no bundle was written: {len(unusable)} artifact(s) the branch references can't"
            f" be read from this store: {'; '.join(exc.message for exc in unusable)}. Run"
            " `threads verify --store` to see what is damaged, or export without --bundle.",
        )
    return write_bundle(log, artifacts)


async def import_log(
    store: Store, data: bytes, *, tenant_id: str, max_bytes: int = MAX_IMPORT_BYTES
) -> ImportResult:
    """Verify ``data`` (an export, or a bundle read up to ``max_bytes``) completely, then
    store each segment, ancestors first. Nothing is written unless every segment is either
    absent from the store or already there with the same bytes, under a thread ``tenant_id``
    owns (else ``forbidden``, or ``seq_conflict``). From a bundle, every artifact the log
    references must be in it or already stored intact, else nothing is stored
    (``artifact_missing`` naming each); only those are stored (a member the log does not
    reference never is), before the lines that reference them."""
    carried: dict[str, bytes] | None = None
    if is_bundle(data):
        data, carried = read_bundle(data, max_bytes=max_bytes)
    fold = Fold(now_ms=store.clock.now_ms())
    try:
        verified = verify_export(data, apply=fold.apply, on_header=fold.header)
    except LogError as failure:
        # an artifact that neither the bundle nor the store has, needed earlier, is reported
        # first (the first failure by seq)
        lacking = await _missing_artifacts(store, referenced_artifacts(fold.events), carried or {})
        raise missing_before(fold.events, set(lacking), failure) from None
    if not verified.segments:
        raise LogError(
            "invalid_line",
            "the export holds no complete line; it is empty or torn at its"
            " header. Export the branch again.",
            seq=0,
        )
    await check_owner(store, verified.segments, tenant_id)
    stored_before = await stored_already(store, verified.segments)
    refs = referenced_artifacts(verified.events)
    missing = await _missing_artifacts(store, refs, carried or {})
    first = first_reference(verified.events, missing) if carried is not None else None
    if first is not None:
        raise StoreError(
            "artifact_missing",
            f"the bundle lacks {len(missing)} artifact(s) its log references:"
            f" {', '.join(missing)}; nothing was imported. Export the branch again with --bundle"
            " from a store that holds them.",
            seq=first[0].seq,
        )
    for sha256, media_type in refs.items():
        if carried is not None and sha256 in carried:
            await store.put_artifact(carried[sha256], media_type)
    own = verified.segments[-1]
    own_stored = own.header.branch_id in stored_before
    dropped_ref = None
    if verified.torn is not None and not own_stored:
        dropped_ref = await store.put_artifact(verified.torn.data, TORN_MEDIA_TYPE)
    # the fold of the exported branch's chain at its head goes in with it
    rows = [fold_row(fold)] if own.events and row_at_head_pays(fold) else []
    stored = await _store_segments(
        store, verified, stored_before, tenant_id, dropped_ref, rows=rows
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
        torn=verified.torn_where(),
        missing_artifacts=tuple(missing),
        unreferenced_members=len(set(carried or ()) - set(refs)),
    )


async def _store_segments(
    store: Store,
    verified: VerifiedExport,
    stored_before: set[str],
    tenant_id: str,
    dropped_ref: ArtifactRef | None,
    *,
    rows: list[StoredSnapshot],
) -> bool:
    """Store each segment not stored already, ancestors first, each under its parent (the
    exported branch with its snapshot ``rows``); returns whether it was written."""
    own = verified.segments[-1]
    inspection_only = False
    parent_id: str | None = None
    stored = False
    for segment in verified.segments:
        # A repair fork (and anything forked from one) can be read and exported, never run.
        inspection_only = inspection_only or _is_repair_fork(segment)
        if segment.header.branch_id not in stored_before:
            written = await store_owned(
                store,
                segment,
                tenant_id=tenant_id,
                parent_branch_id=parent_id,
                # an ancestor's prefix is vouched for by the next segment's fork at_hash
                head_verified=verified.head_verified if segment is own else True,
                dropped_ref=dropped_ref if segment is own else None,
                state="inspection_only" if inspection_only else "ready",
                snapshots=rows if segment is own else (),
            )
            stored = written if segment is own else stored
        parent_id = segment.header.branch_id
    return stored


async def _missing_artifacts(
    store: Store, refs: dict[str, str], carried: dict[str, bytes]
) -> list[str]:
    """Referenced artifacts neither ``carried`` nor intact in ``store``."""
    missing = []
    for sha256 in refs:
        if sha256 in carried:
            continue
        try:
            await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code not in MISSING_OR_CORRUPT:
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
    return await import_log(store, data, tenant_id=tenant_id, max_bytes=max_bytes)


def read_bounded(path: Path, max_bytes: int) -> bytes:
    """``path``'s bytes, refused (``import_too_large``) past ``max_bytes`` without reading
    further: a device or a runaway file never fills memory. Read in chunks, so memory follows
    the bytes there are, not the bound (one ``read(max_bytes)`` allocates all of it first)."""
    chunks: list[bytes] = []
    size = 0
    with path.open("rb", buffering=0) as f:
        while size <= max_bytes and (chunk := f.read(min(_READ_CHUNK, max_bytes + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    data = b"".join(chunks)
    if len(data) > max_bytes:
        raise StoreError(
            "import_too_large",
            f"{path} holds more than {max_bytes} bytes; nothing was imported. An export is one"
            " branch's log: check the file, or raise the limit (--max-bytes) if it is one.",
        )
    return data


def _is_repair_fork(segment: VerifiedSegment) -> bool:
    first = segment.events[0] if segment.events else None
    return (
        first is not None
        and first.type == "fork"
        and data_of(first, "fork").get("reason") == "repair"
    )

