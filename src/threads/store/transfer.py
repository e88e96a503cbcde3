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

from threads.errors import LogError, NotFound, StoreError
from threads.log.lines import Head
from threads.log.reduce import Fold
from threads.log.verify import Segment as VerifiedSegment
from threads.log.verify import verify_export
from threads.store.protocol import ArtifactRef, Segment, Store

TORN_MEDIA_TYPE = "application/octet-stream"


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


async def import_log(store: Store, data: bytes, *, tenant_id: str) -> ImportResult:
    """Verify ``data`` completely, then store each segment (ancestors first)."""
    fold = Fold(now_ms=store.clock.now_ms())
    verified = verify_export(data, apply=fold.apply, on_header=fold.header)
    if not verified.segments:
        raise LogError(
            "invalid_line",
            "the export holds no complete line; it is empty or torn at its"
            " header. Export the branch again.",
            seq=0,
        )
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
    )


async def export_to_path(store: Store, branch_id: str, path: str | os.PathLike[str]) -> int:
    """Write the export to ``path``; returns its size in bytes."""
    data = await export_branch(store, branch_id)
    await asyncio.to_thread(Path(path).write_bytes, data)
    return len(data)


async def import_from_path(
    store: Store, path: str | os.PathLike[str], *, tenant_id: str
) -> ImportResult:
    data = await asyncio.to_thread(Path(path).read_bytes)
    return await import_log(store, data, tenant_id=tenant_id)


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
    except NotFound:
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
