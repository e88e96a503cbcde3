"""``BranchWriter``: the one fenced writer of a branch for the length of a run.

It holds the lease, renews it in the background well before expiry, and appends events at the
lease's epoch with the expected head seq, folding each committed event into the run's state;
each append also puts the branch's fold snapshot and listing rows when due (``_snapshot_rows``),
the fold row with the request checkpoint of the last turn request the run rendered. A run opened
from the fold row holds a partial ``RestoredFold``; ``read_whole`` makes it the whole chain's,
in place, when the run needs an older line, and when an event's rule needs one
(``SnapshotShortError``) before folding it.
Once the lease is lost it is never revived: every later append or fence check fails with
``stale_epoch``, so a stale holder writes and sends nothing.

The fence (``check``) needs no store round trip while the lease provably holds. Expiry is judged
by the store's clock, and a takeover needs expiry (or a holder proven dead), so a lease granted
or renewed by a request sent at local time ``t`` cannot expire before ``t + ttl`` on any clock
that ticks at the store clock's rate. ``check`` passes locally until ``t + ttl - margin`` on the
holder's monotonic clock, and while the store's clock (read here) is short of the lease's
expiry by the margin too (a wall clock that jumps ahead is noticed); past either, it renews at
the store before anything is sent, and refuses if that fails.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Sequence

from threads import telemetry
from threads.clock import elapsed_source
from threads.errors import StoreError
from threads.log.admission import encode_admitted
from threads.log.fold import Fold
from threads.log.fold.saved import RestoredFold, SnapshotShortError
from threads.log.ids import uuid7
from threads.log.lines import Draft, Event
from threads.log.render_resume import RequestCheckpoint
from threads.run.listing import AT_REST, listing_row
from threads.store.fold_open import SnapshotSchedule, fold_row
from threads.store.holder import parse as parse_holder
from threads.store.lease_release import release
from threads.store.protocol import Lease, PendingArtifact, Store
from threads.store.receipts import RunReceipt
from threads.store.snapshot_row import StoredSnapshot

DEFAULT_LEASE_TTL_MS = 30_000
TRANSIENT_FAULTS = frozenset({"store_unavailable", "store_busy"})
FENCE_MARGIN_FRACTION = 5  # the fence stops trusting a lease a fifth of its TTL before expiry


def fence_time(store: Store) -> int:
    """The holder's elapsed-time reading to take just before sending a lease request (pass it
    to ``BranchWriter(lease_sent_at=...)``)."""
    return elapsed_source(store.clock)()


class BranchWriter:
    def __init__(
        self,
        store: Store,
        lease: Lease,
        fold: Fold,
        *,
        ttl_ms: int = DEFAULT_LEASE_TTL_MS,
        on_event: Callable[[Event], None] | None = None,
        lease_sent_at: int | None = None,
    ) -> None:
        """``lease_sent_at``: ``fence_time(store)`` read just before the request that acquired
        ``lease`` was sent; without it the first fence check renews at the store."""
        self.store = store
        self.lease = lease
        self.acquired_at = lease.expires_at - ttl_ms  # stores set expiry to now + TTL
        self.fold = fold
        self.ttl_ms = ttl_ms
        self.on_event = on_event
        self.lost: StoreError | None = None
        self._elapsed = elapsed_source(store.clock)
        self._margin_ms = ttl_ms // FENCE_MARGIN_FRACTION
        self._trusted_until: int | None = None  # elapsed-clock ms the lease surely outlives
        if lease_sent_at is not None:
            self._trust(lease_sent_at)
        self._renewer: asyncio.Task[None] | None = None
        self._held: list[Event] = []
        self._held_artifacts: list[PendingArtifact] = []
        header = fold.header_
        assert header is not None
        self.thread_id = header.thread_id
        self._snapshots = SnapshotSchedule.of(fold)
        # the last turn request this run rendered, put in the fold row (``keep_checkpoint``)
        self._checkpoint: RequestCheckpoint | None = None
        self.branch_id = header.branch_id

    @property
    def epoch(self) -> int:
        return self.lease.epoch

    def gone_epochs(self) -> frozenset[int]:
        """The epochs of this branch whose holders were proven dead when this writer's lease
        was taken (``threads.store.holder.succeeding``): they send nothing."""
        return frozenset(parse_holder(self.lease.holder_id).gone)

    def start_renewal(self, interval_s: float | None = None) -> None:
        interval = interval_s if interval_s is not None else self.ttl_ms / 3000
        self._renewer = asyncio.create_task(self._renew_forever(interval))

    async def _renew_forever(self, interval_s: float) -> None:
        while self.lost is None:
            await asyncio.sleep(interval_s)
            with contextlib.suppress(StoreError):
                await self.renew()

    async def renew(self) -> None:
        """Extend the lease by its TTL from now (a run waiting on a clock that jumps renews
        after each step of its wait); ``stale_epoch`` once it was lost."""
        if self.lost is not None:
            raise self.lost
        sent_at = self._elapsed()
        try:
            self.lease = await self.store.renew_lease(self.lease, self.ttl_ms)
            self._trust(sent_at)
        except StoreError as exc:
            # An unreachable or busy store says nothing about who holds the branch: the next
            # renewal tries again (the store judges expiry if it never comes back).
            if exc.code not in TRANSIENT_FAULTS:
                self.lost = exc
            raise
        except Exception as exc:
            self.lost = StoreError("stale_epoch", f"lease renewal failed: {exc}")
            raise self.lost from exc

    def _trust(self, sent_at: int) -> None:
        until = sent_at + self.ttl_ms - self._margin_ms
        if self._trusted_until is None or until > self._trusted_until:
            self._trusted_until = until

    def surely_held(self) -> bool:
        """The lease cannot have expired yet, judged locally (see the module docstring)."""
        until = self._trusted_until
        return (
            until is not None
            and self._elapsed() < until
            and self.store.clock.now_ms() < self.lease.expires_at - self._margin_ms
        )

    async def check(self) -> None:
        """The fence: refuse (``stale_epoch``) unless this run still holds its branch. Held
        events are made durable first (a flush checks the lease in its own transaction); else
        the lease is renewed at the store only when it is no longer surely held."""
        if self.lost is not None:
            raise self.lost
        if self._held:
            await self.append([])
            return
        if self.surely_held():
            return
        try:
            await self.renew()
        except StoreError as exc:
            if self.lost is None:
                self.lost = exc  # not proven held: nothing more is sent
            raise

    def prepare(self, items: Sequence[Draft], *, after: Sequence[Event] = ()) -> list[Event]:
        """Encode ``(type, data, actor)`` items as the next events, each line admitted as the
        store admits it; nothing is written or folded. ``LogError`` for a line the store would
        refuse, so data from outside (a model's reply) that the log can't hold leaves the writer
        usable instead of poisoned. Write the result with ``append_prepared``. ``after``:
        events prepared before (not yet appended) these follow, for an event that names
        their ids."""
        fold = self.fold
        now = self.store.clock.now_ms()
        seq, prev = (after[-1].seq, after[-1].hash) if after else (fold.last_seq, fold.last_hash)
        events: list[Event] = []
        for type_, data, actor in items:
            seq += 1
            event = encode_admitted(
                seq=seq,
                event_id=uuid7(now),
                thread_id=self.thread_id,
                branch_id=self.branch_id,
                epoch=self.lease.epoch,
                type=type_,
                time=now,
                actor=actor,
                prev_hash=prev,
                data=data,
            )
            events.append(event)
            prev = event.hash
        return events

    async def append(
        self,
        items: Sequence[Draft],
        *,
        artifacts: Sequence[PendingArtifact] = (),
        hold: bool = False,
        receipt: RunReceipt | None = None,
        consumes: Sequence[str] = (),
        finishes_fork: bool = False,
    ) -> list[Event]:
        """Append ``(type, data, actor)`` items in one transaction; returns the events.

        ``hold=True`` folds them now but writes them with the next append or fence check, in
        the same transaction: for events that nothing is dispatched on before then (a tool
        result, written together with the next model_request; a reply that calls an effectful
        tool, written with its first call's effect_begin). Held events are durable before
        any later send, and before the run ends. ``receipt`` is committed in the same
        transaction (a host's idempotency receipt for the ``user_input`` it writes), and so are
        ``consumes`` (the control items this append applies). ``finishes_fork``: the append of
        a new child's ``fork`` event, which makes the branch ready in the same transaction."""
        if self.lost is not None:
            raise self.lost
        return await self.append_prepared(
            self.prepare(items),
            artifacts=artifacts,
            hold=hold,
            receipt=receipt,
            consumes=consumes,
            finishes_fork=finishes_fork,
        )

    async def append_prepared(
        self,
        events: Sequence[Event],
        *,
        artifacts: Sequence[PendingArtifact] = (),
        hold: bool = False,
        receipt: RunReceipt | None = None,
        consumes: Sequence[str] = (),
        finishes_fork: bool = False,
    ) -> list[Event]:
        """``append`` for events ``prepare`` returned, before anything else was appended."""
        if self.lost is not None:
            raise self.lost
        if events and events[0].seq != self.fold.last_seq + 1:
            raise StoreError("invalid_argument", "prepared events are no longer the next ones")
        try:
            for event in events:
                self.fold.apply(event)
        except SnapshotShortError:
            # a rule needed a line before the restored fold's start: the fold as it was before
            # these events, read whole (the half-changed state is replaced), then these
            await self.read_whole((events[0].seq - 1, events[0].prev_hash))
            for event in events:
                self.fold.apply(event)
        if hold:
            self._held.extend(events)
            self._held_artifacts.extend(artifacts)
            return list(events)
        batch = [*self._held, *events]
        batch_artifacts = [*self._held_artifacts, *artifacts]
        if batch:
            try:
                await self.store.append(
                    self.branch_id,
                    batch,
                    expected_seq=batch[0].seq - 1,
                    lease=self.lease,
                    artifacts=batch_artifacts,
                    receipt=receipt,
                    consumes=consumes,
                    finishes_fork=finishes_fork,
                    snapshots=self._snapshot_rows(batch),
                )
            except StoreError as exc:
                if exc.code in ("stale_epoch", "seq_conflict"):
                    self.lost = exc
                else:
                    self.lost = _poisoned(exc)
                raise
            except Exception as exc:
                self.lost = _poisoned(exc)
                raise
        self._held.clear()
        self._held_artifacts.clear()
        telemetry.committed(self.thread_id, batch)
        if self.on_event is not None:
            for event in batch:
                self.on_event(event)
        return list(events)

    async def read_whole(self, head: tuple[int, str] | None = None) -> None:
        """Make a fold opened from the row (a partial ``RestoredFold``) the whole chain's, in
        place (``RestoredFold.become``): the chain read, checked and folded, the held events
        folded on; it must end at ``head`` (default: where the fold ends), else
        ``seq_conflict``."""
        fold = self.fold
        if not isinstance(fold, RestoredFold) or not fold.partial:
            return
        expected = head or (fold.last_seq, fold.last_hash)
        whole = (await self.store.read_chain(self.branch_id)).fold(self.store.clock.now_ms())
        whole.extend(self._held)
        if (whole.last_seq, whole.last_hash) != expected:
            raise StoreError("seq_conflict", "the branch's chain does not end where this run's"
                             f" fold does (seq {expected[0]})")
        fold.become(whole)

    def keep_checkpoint(self, checkpoint: RequestCheckpoint | None) -> None:
        """What a turn request this writer appended rendered: the fold rows put from now on
        carry it, so the next run renders on from it (``threads.log.render_resume``)."""
        if checkpoint is not None:
            self._checkpoint = checkpoint

    def _snapshot_rows(self, batch: Sequence[Event]) -> list[StoredSnapshot]:
        """The rows this append puts beside its events (the fold is at the batch's end): a
        fold snapshot when ``SnapshotSchedule`` says (every ``SNAPSHOT_EVERY`` events, or
        ``SNAPSHOT_BYTES`` of lines), and the listing whenever the batch leaves the branch at
        rest (``threads.run.listing``)."""
        fold = self.fold
        rows = []
        if self._snapshots.due(batch):
            rows.append(fold_row(fold, self._checkpoint))
        if fold.status in AT_REST:
            rows.append(listing_row(fold))
        return rows

    async def close(self) -> None:
        try:
            if self._held and self.lost is None:
                with contextlib.suppress(StoreError):
                    await self.append([])
        finally:
            if self._renewer is not None:
                self._renewer.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await self._renewer
            # Released whatever ended the run (an error too): the store only clears the lease
            # row while it still names this holder and epoch, so a lost lease is never taken
            # back; one it can't clear (a full store) is this process's to take again at once.
            await release(self.store, self.lease)


def _poisoned(exc: BaseException) -> StoreError:
    """The fold already holds events the store may not: this writer must not append again."""
    return StoreError(
        "writer_poisoned",
        f"an append failed ({exc}); this run stops writing. Run the thread again: it re-reads"
        " the log and decides from what is durable.",
    )
