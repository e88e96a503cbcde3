"""What an import finds in the store before it writes: whose the export's ids are, and which
of its segments are stored already.

An import writes nothing unless the export's thread and every branch it carries are absent or
the importing tenant's (else ``forbidden``, in the same words whatever the other thread holds:
the importer learns that an id is not theirs to write, never whose it is nor what it holds),
and every segment already stored holds the export's bytes (an ancestor: the export's prefix,
as it may have grown since; the exported branch: exactly), else ``seq_conflict``.
Invariant: ownership is decided before any bytes are compared, and decided again after a store
that failed or found the branch there already (another tenant's import may have taken the ids
between the check and the write).
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.errors import NotFoundError, StoreError
from threads.log.verify import Segment
from threads.log.vocabulary import ArtifactRef
from threads.store.protocol import Segment as StoredSegment
from threads.store.protocol import Store
from threads.store.snapshot_row import StoredSnapshot


async def check_owner(store: Store, segments: Sequence[Segment], tenant_id: str) -> None:
    """The export's thread and each of its branches are absent or ``tenant_id``'s."""
    thread_id = segments[0].header.thread_id
    try:
        owners = [(await store.root_branch(thread_id)).tenant_id]
    except NotFoundError:
        owners = []
    for segment in segments:
        try:
            owners.append((await store.get_branch(segment.header.branch_id)).tenant_id)
        except NotFoundError:
            continue
    if any(owner != tenant_id for owner in owners):
        raise StoreError(
            "forbidden",
            f"thread {thread_id} can't be imported for tenant {tenant_id}: this store already"
            " uses one of its ids for a thread that tenant can't write; nothing was imported."
            " Import it into another store, or as the tenant that owns it.",
        )


async def stored_already(store: Store, segments: Sequence[Segment]) -> set[str]:
    """The branch ids of the export's segments the store holds already with the export's
    bytes; one it holds with other bytes is ``seq_conflict``."""
    found: set[str] = set()
    for index, segment in enumerate(segments):
        branch_id = segment.header.branch_id
        try:
            stored = (await store.read_chain(branch_id)).segments[-1]
        except NotFoundError:
            continue
        incoming = [event.line for event in segment.events]
        held = [event.line for event in stored.events]
        if index < len(segments) - 1:  # an ancestor, exported through its fork point only
            held = held[: len(incoming)]
        if stored.header.line != segment.header.line or held != incoming:
            raise StoreError(
                "seq_conflict",
                f"branch {branch_id} is already stored with different lines; nothing was"
                " imported. Import this export into another store, or fork instead",
            )
        found.add(branch_id)
    return found


async def store_owned(
    store: Store,
    segment: Segment,
    *,
    tenant_id: str,
    parent_branch_id: str | None,
    head_verified: bool,
    dropped_ref: ArtifactRef | None,
    state: str,
    snapshots: Sequence[StoredSnapshot] = (),
) -> bool:
    """``store.store_segment`` for ``tenant_id``; when it fails, or finds the branch stored
    already, whose the ids are is decided again, so a concurrent import by another tenant is
    ``forbidden`` here too rather than an engine's constraint error or a no-op."""
    stored_form = StoredSegment(segment.header, segment.events, segment.fork_at_seq)
    try:
        stored = await store.store_segment(
            stored_form,
            tenant_id=tenant_id,
            parent_branch_id=parent_branch_id,
            head_verified=head_verified,
            dropped_ref=dropped_ref,
            state=state,
            snapshots=snapshots,
        )
    except Exception:
        await check_owner(store, [segment], tenant_id)
        raise
    if not stored:
        await check_owner(store, [segment], tenant_id)
    return stored
