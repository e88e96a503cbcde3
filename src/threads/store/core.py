"""What every store engine does the same way, written once: the ``Store`` methods that are a
flow (``threads.store.flows``) run in one transaction, over an engine's ``_transact``.

An engine subclasses ``StoreCore`` and provides only its I/O: ``_transact`` (run a flow in the
transaction an ``Access`` asks for, on its own connection, with its own faults coded),
``_lease_now`` (the lease clock's reading it passes to statements, or None for the database's
own), and what truly differs between engines (appends, artifacts, acquiring and releasing a
lease, closing). The httpx ``BaseClient`` with its ``Client``/``AsyncClient`` twins is the model.

Invariant: a flow is made afresh for each run of it (``_transact`` takes a factory), so an
engine may run it again after a try that could not start (a lock met in place, a lost
connection) without reusing a half-run generator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TypeVar

from threads.clock import Clock
from threads.errors import StoreError
from threads.log.lines import Event, Header
from threads.log.vocabulary import ArtifactRef
from threads.store import flows, fold_snapshots
from threads.store import statements as sql
from threads.store.control_items import InboxViews
from threads.store.flows import Access, ConstraintError, Flow
from threads.store.layout import FOLD_SNAPSHOTS, RUN_RECEIPTS, Table
from threads.store.protocol import (
    BranchInfo,
    Chain,
    Lease,
    LeaseState,
    PendingArtifact,
    Segment,
    StoredRow,
    TailRead,
)
from threads.store.receipts import RunReceipt
from threads.store.request_deltas import REQUEST_MEDIA_TYPE
from threads.store.rows import require_batch, require_first_events, resolved_chain
from threads.store.snapshot_row import StoredSnapshot, require_snapshots
from threads.store.statements import Dialect

T = TypeVar("T")

_RECEIPTS = (RUN_RECEIPTS,)
_SNAPSHOTS = (FOLD_SNAPSHOTS,)


@dataclass(frozen=True, slots=True)
class Append:
    """One ``Store.append`` call once its batch passed ``require_batch``."""

    branch_id: str
    events: Sequence[Event]
    expected_seq: int
    lease: Lease
    requests: list[PendingArtifact]  # request artifacts, kept as deltas
    others: list[PendingArtifact]  # every other artifact
    receipt: RunReceipt | None
    consumes: tuple[str, ...]  # inbox ids of control items this append applies
    finishes_fork: bool  # a new child's fork event: the branch is forking, not ready
    snapshots: tuple[StoredSnapshot, ...] = ()  # at the batch's last event


class StoreCore(ABC):
    """The shared half of a store engine (see the module docstring)."""

    clock: Clock
    dialect: Dialect
    # What the transaction of each of this store's own appends read of its thread's pending
    # control items (``threads.store.control_items.InboxViews``).
    inbox_seen: InboxViews

    @abstractmethod
    async def _transact(
        self, access: Access, make: Callable[[], Flow[T]], tables: tuple[Table, ...] = ()
    ) -> T:
        """Run the flow ``make()`` returns in a transaction as ``access`` asks, once
        ``tables`` are known to exist."""

    @abstractmethod
    def _lease_now(self) -> int | None:
        """The lease clock's reading to pass to a statement (``{now}``), or None: the
        database's clock decides. Called inside the statement's transaction."""

    @abstractmethod
    async def owner_identity(self) -> str:
        """This store as the owner of the sandboxes and snapshots it makes: an identity a byte
        copy of it does not share (``threads.store.identity``)."""

    @abstractmethod
    def _branch_created(self, branch_id: str, head_hash: str, events: Sequence[Event]) -> None:
        """After ``create_branch`` committed (an engine that remembers heads notes it)."""

    # ---- branches ------------------------------------------------------------------------

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
        head = require_first_events(header, fork_at_seq, events)
        try:
            await self._transact(
                Access.WRITE,
                lambda: flows.create_branch(
                    header, tenant_id=tenant_id, parent_branch_id=parent_branch_id,
                    fork_at_seq=fork_at_seq, state=state, head=head, events=events,
                    receipt=receipt,
                ),
                _RECEIPTS if receipt is not None else (),
            )
        except ConstraintError:
            raise StoreError(
                "seq_conflict", f"branch {header.branch_id} already exists; open it instead"
            ) from None
        self._branch_created(header.branch_id, head[1], events)

    async def get_branch(self, branch_id: str) -> BranchInfo:
        return await self._transact(Access.SCAN, lambda: flows.branch(branch_id))

    async def root_branch(self, thread_id: str) -> BranchInfo:
        return await self._transact(Access.READ, lambda: flows.root(thread_id))

    async def list_branches(self, thread_id: str) -> list[BranchInfo]:
        return await self._transact(
            Access.SCAN, lambda: flows.branches(sql.BRANCHES_OF, thread_id)
        )

    async def list_threads(self, tenant_id: str | None = None) -> list[BranchInfo]:
        if tenant_id is None:
            return await self._transact(Access.SCAN, lambda: flows.branches(sql.ROOTS))
        return await self._transact(
            Access.SCAN, lambda: flows.branches(sql.ROOTS_OF, tenant_id)
        )

    async def list_free_threads(self) -> list[BranchInfo]:
        return await self._transact(Access.SCAN, lambda: flows.free_threads(self._lease_now))

    async def set_branch_state(self, branch_id: str, state: str) -> None:
        await self._transact(
            Access.WRITE_AGAIN, lambda: flows.changed(sql.SET_STATE, state, branch_id)
        )

    # ---- appends --------------------------------------------------------------------------

    @abstractmethod
    async def _append_checked(self, append: Append) -> None:
        """Commit one checked append (see ``Store.append``)."""

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
        require_batch(branch_id, lease, events)
        require_snapshots(branch_id, events, snapshots)
        await self._append_checked(Append(
            branch_id, events, expected_seq, lease,
            [a for a in artifacts if a.media_type == REQUEST_MEDIA_TYPE],
            [a for a in artifacts if a.media_type != REQUEST_MEDIA_TYPE],
            receipt, tuple(consumes), finishes_fork, tuple(snapshots),
        ))

    # ---- reads ---------------------------------------------------------------------------

    async def read_chain(self, branch_id: str) -> Chain:
        # One snapshot: a head and lines read from different commits of another writer would
        # look like log_corrupt.
        stored = await self._transact(Access.SNAPSHOT, lambda: flows.stored_chain(branch_id))
        return resolved_chain(*stored)

    async def read_tail(self, branch_id: str) -> TailRead | None:
        return await self._transact(
            Access.SNAPSHOT, lambda: fold_snapshots.tail_read(branch_id), _SNAPSHOTS
        )

    async def read_lines(self, branch_id: str, after_seq: int, through_seq: int) -> list[bytes]:
        return await self._transact(
            Access.SNAPSHOT,
            lambda: fold_snapshots.lines_between(branch_id, after_seq, through_seq),
        )

    async def read_summary(self, branch_id: str) -> tuple[BranchInfo, StoredSnapshot | None]:
        return await self._transact(
            Access.SNAPSHOT, lambda: fold_snapshots.summary(branch_id), _SNAPSHOTS
        )

    async def read_fold_row(self, branch_id: str) -> StoredSnapshot | None:
        return await self._transact(
            Access.SNAPSHOT, lambda: fold_snapshots.snapshot(branch_id, "fold"), _SNAPSHOTS
        )

    async def stored_lines(self, branch_id: str) -> tuple[BranchInfo, list[bytes]]:
        target, stored = await self._transact(
            Access.SNAPSHOT, lambda: flows.stored_chain(branch_id)
        )
        return target, [line for _, header, lines in stored for line in (header, *lines)]

    async def stored_rows(self, branch_id: str) -> list[StoredRow]:
        return await self._transact(Access.SCAN, lambda: flows.stored_rows(branch_id))

    # ---- idempotency receipts ------------------------------------------------------------

    async def get_receipt(
        self, tenant_id: str, operation: str, idempotency_key: str
    ) -> RunReceipt | None:
        return await self._transact(
            Access.SCAN, lambda: flows.receipt(tenant_id, operation, idempotency_key), _RECEIPTS
        )

    async def unfinished_receipts(self) -> list[RunReceipt]:
        return await self._transact(Access.SCAN, flows.unfinished_receipts, _RECEIPTS)

    # ---- leases --------------------------------------------------------------------------

    async def read_lease(self, branch_id: str) -> LeaseState | None:
        now = self._lease_now
        return await self._transact(Access.READ, lambda: flows.read_lease(branch_id, now))

    async def check_lease(self, lease: Lease) -> None:
        now = self._lease_now
        await self._transact(Access.SCAN, lambda: flows.check_lease(lease, now))

    async def renew_lease(self, lease: Lease, ttl_ms: int) -> Lease:
        now = self._lease_now
        return await self._transact(Access.WRITE_AGAIN, lambda: flows.renew(lease, ttl_ms, now))

    # ---- import --------------------------------------------------------------------------

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
        require_snapshots(segment.header.branch_id, segment.events, snapshots)
        return await self._transact(
            Access.WRITE,
            lambda: flows.store_segment(
                self.dialect, segment, tenant_id=tenant_id, parent_branch_id=parent_branch_id,
                head_verified=head_verified, dropped_ref=dropped_ref, state=state,
                snapshots=snapshots,
            ),
            _SNAPSHOTS if snapshots else (),
        )
