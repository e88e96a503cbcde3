"""The ``Store`` protocol: what every engine (SQLite, Postgres) provides to the rest of threads.

A store keeps exact line bytes per branch, each branch's head, leases and content-addressed
artifacts. One ``append`` is one transaction that checks the writer's lease (``stale_epoch``) and
the expected head seq (``seq_conflict``) before inserting anything. Reads return a branch's
resolved chain: parent segments through their fork points, then the branch's own lines.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from threads.clock import Clock
from threads.log.collector import collector_paused
from threads.log.fold import Fold
from threads.log.lines import Event, Header
from threads.log.request_bytes import RequestBytes
from threads.log.vocabulary import ArtifactRef
from threads.store.receipts import RunReceipt
from threads.store.snapshot_row import StoredSnapshot


@dataclass(frozen=True, slots=True)
class BranchInfo:
    branch_id: str
    thread_id: str
    tenant_id: str
    parent_branch_id: str | None
    fork_at_seq: int | None
    state: str  # forking | ready | inspection_only | read_only | corrupt | fork_failed
    head_seq: int
    head_hash: str
    head_verified: bool
    dropped_ref: ArtifactRef | None

    @property
    def empty(self) -> bool:
        """A root holding nothing after ``thread_started`` (or nothing at all): a thread no
        input ever reached, left by a crash between its creation and its first input (before
        those were one append). Thread listings leave it out; it can still be opened by id."""
        return self.parent_branch_id is None and self.head_seq <= 1


@dataclass(frozen=True, slots=True)
class Lease:
    branch_id: str
    holder_id: str
    epoch: int
    expires_at: int


@dataclass(frozen=True, slots=True)
class LeaseState:
    """A branch's lease row as read now. ``now`` is the lease clock's reading in the same
    statement (the database's clock on Postgres), so ``live`` is judged as a takeover would."""

    branch_id: str
    holder_id: str
    epoch: int
    expires_at: int
    now: int

    @property
    def live(self) -> bool:
        return self.expires_at > self.now


@dataclass(frozen=True, slots=True)
class Segment:
    header: Header
    events: list[Event]
    fork_at_seq: int | None  # parent seq this segment forks at (None for a root segment)


@dataclass(frozen=True, slots=True)
class Chain:
    """A branch's resolved chain as stored: ancestor segments first, each cut at its fork."""

    branch: BranchInfo
    segments: list[Segment]

    @property
    def events(self) -> list[Event]:
        return [e for segment in self.segments for e in segment.events]

    def fold(self, now_ms: int) -> Fold:
        """Reduce the chain (every segment in order); a broken semantic rule raises LogError.
        The collector is paused meanwhile, as for the decoding (``threads.log.collector``)."""
        fold = Fold(now_ms=now_ms)
        with collector_paused():
            for segment in self.segments:
                fold.header(segment.header)
                fold.extend(segment.events)
        return fold


@dataclass(frozen=True, slots=True)
class TailRead:
    """A branch as its newest fold snapshot and the lines after it, read in one snapshot."""

    branch: BranchInfo
    header_line: bytes
    snapshot: StoredSnapshot
    lines: list[bytes]


@dataclass(frozen=True, slots=True)
class StoredRow:
    """One event row as stored: the columns derived from the line, and the line."""

    seq: int
    event_id: str
    type: str
    type_version: int
    critical: int
    epoch: int
    line: bytes


@dataclass(frozen=True, slots=True)
class PendingArtifact:
    # The artifact's bytes, or a rendered request's pieces (``RequestBytes``): a store keeping
    # requests as deltas then writes what the request adds to its base without joining it.
    content: bytes | RequestBytes
    media_type: str
    # The sha256 of the bytes when the caller already has it (a rendered request's running
    # hash), so the store does not hash the bytes again; a caller passing it vouches for it,
    # as one passing pieces does for the request they say they extend.
    sha256: str | None = None

    @property
    def data(self) -> bytes:
        """The whole bytes (a request's pieces joined)."""
        return bytes(self.content)


class Store(Protocol):
    """Where threads keep their logs, leases and artifacts: ``threads.sqlite(path)`` or
    ``threads.postgres.postgres(url)``. Every append checks the writer's lease epoch and the
    expected head in the transaction that commits it."""

    clock: Clock

    async def create_branch(
        self,
        header: Header,
        *,
        tenant_id: str,
        parent_branch_id: str | None = None,
        fork_at_seq: int | None = None,
        state: str = "ready",
        events: Sequence[Event] = (),
        receipt: RunReceipt | None = None,
    ) -> None:
        """Create a thread's root branch (and the thread) or a child branch, with its first
        ``events`` (chaining from ``header``; e.g. ``thread_started``) in the same transaction,
        so no crash can leave a branch that holds only its header. ``receipt`` is committed in
        that transaction too (a taken key rolls the branch back: ``idempotency_key_reused``)."""
        ...

    async def append(
        self,
        branch_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        lease: Lease,
        artifacts: Sequence[PendingArtifact] = (),
        receipt: RunReceipt | None = None,
        consumes: Sequence[str] = (),
        finishes_fork: bool = False,
        snapshots: Sequence[StoredSnapshot] = (),
    ) -> None:
        """One transaction: lease live at ``lease.epoch`` (else ``stale_epoch``), head at
        ``expected_seq`` (else ``seq_conflict``), then artifacts, events and the new head, and
        ``receipt`` when given (a taken key rolls it all back: ``idempotency_key_reused``).
        ``consumes``: inbox ids this append applies (``threads.store.control_items``), each
        marked consumed at the batch's last seq by compare-and-set; one another writer
        consumed first rolls it all back (``control_consumed``). ``finishes_fork``: the branch
        must be ``forking`` (not ``ready``) and becomes ``ready`` in this transaction, with its
        ``fork`` event: no crash leaves a ready child without it. ``snapshots``: rows of the
        branch at the batch's last event (``threads.store.snapshot_row``), put in the same
        transaction."""
        ...

    async def get_receipt(
        self, tenant_id: str, operation: str, idempotency_key: str
    ) -> RunReceipt | None:
        """The receipt stored under that key, if any (see ``threads.store.receipts``)."""
        ...

    async def unfinished_receipts(self) -> list[RunReceipt]:
        """Receipts whose branch's head event is not ``turn_completed``: runs a host may owe."""
        ...

    async def stored_lines(self, branch_id: str) -> tuple[BranchInfo, list[bytes]]:
        """The resolved chain's stored header and event lines exactly as they are, with no
        check at all: for inspecting (exporting) a branch that ``read_chain`` refuses."""
        ...

    async def stored_rows(self, branch_id: str) -> list[StoredRow]:
        """The branch's own event rows (not its ancestors'), columns as stored, unchecked: what
        ``threads verify --store`` compares with the lines."""
        ...

    async def read_chain(self, branch_id: str) -> Chain:
        """The resolved chain; ``log_corrupt`` if stored bytes no longer chain to the head."""
        ...

    async def read_tail(self, branch_id: str) -> TailRead | None:
        """The branch's fold snapshot and the lines after it, unchecked (None: it has none);
        ``threads.store.fold_open`` judges them."""
        ...

    async def read_lines(self, branch_id: str, after_seq: int, through_seq: int) -> list[bytes]:
        """The branch's own lines (not a fork parent's) after ``after_seq`` through
        ``through_seq``, unchecked: what a continuing run reads before its fold row's cut,
        from its request checkpoint on (``threads.store.fold_open.open_window``)."""
        ...

    async def read_summary(self, branch_id: str) -> tuple[BranchInfo, StoredSnapshot | None]:
        """The branch and its listing summary row (unchecked), read together."""
        ...

    async def read_fold_row(self, branch_id: str) -> StoredSnapshot | None:
        """The branch's fold snapshot row alone, unchecked (None: it has none): what a run
        holding the whole chain reads for the request checkpoint in it."""
        ...

    async def get_branch(self, branch_id: str) -> BranchInfo: ...

    async def root_branch(self, thread_id: str) -> BranchInfo: ...

    async def list_branches(self, thread_id: str) -> list[BranchInfo]: ...

    async def list_threads(self, tenant_id: str | None = None) -> list[BranchInfo]:
        """The root branch of every thread (of one tenant, when given)."""
        ...

    async def list_free_threads(self) -> list[BranchInfo]:
        """Root branches in state ``ready`` whose lease is free, expired now (by the store's
        lease clock) or held by a provably dead process of this host: what a worker may try to
        claim. A snapshot; the claim is the lease."""
        ...

    async def acquire_lease(self, branch_id: str, holder_id: str, ttl_ms: int) -> Lease:
        """Take the branch for the run ``holder_id``, recorded with this process's identity
        (``threads.store.holder``; the returned lease carries the recorded id). A live lease
        of another holder is ``branch_busy`` naming it and its expiry, unless that holder
        provably died on this host: then it is taken over at once. The new epoch is
        ``max(lease epoch, max epoch on the resolved chain) + 1``."""
        ...

    async def read_lease(self, branch_id: str) -> LeaseState | None:
        """The branch's lease row and the lease clock's now; None if it was never leased."""
        ...

    async def renew_lease(self, lease: Lease, ttl_ms: int) -> Lease:
        """Extend a live lease; a lost or expired one is never revived (``stale_epoch``)."""
        ...

    async def check_lease(self, lease: Lease) -> None:
        """``stale_epoch`` unless ``lease`` is still the live lease of its branch."""
        ...

    async def release_lease(self, lease: Lease) -> None: ...

    async def put_artifact(self, data: bytes, media_type: str) -> ArtifactRef: ...

    async def get_artifact(self, sha256: str) -> bytes:
        """``artifact_missing`` / ``artifact_corrupt`` when it can't be served intact."""
        ...

    async def store_segment(
        self,
        segment: Segment,
        *,
        tenant_id: str,
        parent_branch_id: str | None,
        head_verified: bool,
        dropped_ref: ArtifactRef | None,
        state: str = "ready",
        snapshots: Sequence[StoredSnapshot] = (),
    ) -> bool:
        """Import one verified segment's exact bytes. Returns False when an identical branch is
        already stored (a no-op); a different one is ``seq_conflict``. ``snapshots``: rows of
        the branch at the segment's last event, put in the same transaction."""
        ...

    async def set_branch_state(self, branch_id: str, state: str) -> None: ...

    async def close(self) -> None: ...
