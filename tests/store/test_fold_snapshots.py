"""Opening a branch from its fold snapshot (issue 36 item 1), on both engines: the state equals
the full fold's while only the lines after the snapshot are read; a snapshot failing its own
check is ignored; a damaged line after it is ``log_corrupt`` at its seq, one before it is left
to ``verify`` (a full read still names it); a writer and an import put the rows in the
transaction of their events, every N events or bytes; the listing row answers only at the
head."""

from __future__ import annotations

import pytest

import threads.store.fold_open as fold_open
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.fold import Fold, reduce
from threads.log.fold.saved import FORMAT, RestoredFold
from threads.log.render import RenderCache, render
from threads.run.listing import read_listing
from threads.run.writer import BranchWriter
from threads.store.fold_open import (
    SnapshotSchedule,
    fold_row,
    open_checkpoint,
    open_fold,
    row_at_head_pays,
    snapshot_due,
)
from threads.store.protocol import Lease, Store
from threads.store.transfer import import_log
from threads.testing.sample_log import USER, SampleLog

TENANT = "local"


async def held_branch(store: Store, clock: FakeClock) -> tuple[SampleLog, Lease]:
    """A root branch with its ``thread_started`` stored, and a writer's lease on it."""
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT, events=[log.started()])
    lease = await store.acquire_lease(log.header.branch_id, "writer", 30_000)
    log.epoch = lease.epoch
    return log, lease


async def written(store: Store, clock: FakeClock, turns: int, snapshot_after: int) -> SampleLog:
    """A root branch of ``turns`` turns, appended one turn per append, with a fold snapshot
    put with the append of turn ``snapshot_after``."""
    log, lease = await held_branch(store, clock)
    for turn in range(1, turns + 1):
        events = log.turn()
        rows = [fold_row(reduce(log.header, log.events))] if turn == snapshot_after else []
        await store.append(log.header.branch_id, events, expected_seq=events[0].seq - 1,
                           lease=lease, snapshots=rows)
    await store.release_lease(lease)
    return log


def full_state(log: SampleLog) -> dict[str, object]:
    return reduce(log.header, log.events, now_ms=0).state()


async def test_an_open_folds_only_the_lines_after_the_snapshot(
    store: Store, clock: FakeClock
) -> None:
    log = await written(store, clock, turns=6, snapshot_after=3)
    cut = 1 + 3 * 4  # thread_started, then four events a turn
    fold = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(fold, RestoredFold)
    assert fold.cut == cut
    assert [e.seq for e in fold.events] == list(range(cut + 1, log.last_seq + 1))
    assert fold.state() == full_state(log)
    assert fold.projections() == reduce(log.header, log.events).projections()


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("body", b'{"format":1}'),  # the bytes changed: their sha256 no longer matches
        ("format", FORMAT + 1),  # written by another format
        ("fold_code", "0" * 64),  # written by other fold rules
        ("head_hash", "f" * 64),  # a head the body does not end at
    ],
)
async def test_a_snapshot_failing_its_own_check_is_ignored_and_the_log_folded(
    store: Store, clock: FakeClock, tamper: object, column: str, value: object
) -> None:
    log = await written(store, clock, turns=4, snapshot_after=2)
    tamper.update_one(  # type: ignore[attr-defined]
        f"UPDATE fold_snapshots SET {column} = ? WHERE branch_id = ? AND kind = 'fold'",
        (value, log.header.branch_id),
    )
    fold = await open_fold(store, log.header.branch_id, 0)
    assert not isinstance(fold, RestoredFold)
    assert fold.state() == full_state(log)


async def test_a_damaged_line_after_the_snapshot_is_log_corrupt_at_its_seq(
    store: Store, clock: FakeClock, tamper: object
) -> None:
    log = await written(store, clock, turns=4, snapshot_after=2)
    damaged = log.events[-3]  # the last turn's model_request, after the snapshot
    tamper.replace_line(  # type: ignore[attr-defined]
        log.header.branch_id, damaged.seq, damaged.line.replace(b'"attempt":1', b'"attempt":2')
    )
    with pytest.raises(StoreError) as raised:
        await open_fold(store, log.header.branch_id, 0)
    assert (raised.value.code, raised.value.seq) == ("log_corrupt", damaged.seq)


async def test_a_damaged_line_before_the_snapshot_is_left_to_verify(
    store: Store, clock: FakeClock, tamper: object
) -> None:
    log = await written(store, clock, turns=4, snapshot_after=3)
    damaged = log.events[2]  # the first turn's model_request, before the snapshot
    tamper.replace_line(  # type: ignore[attr-defined]
        log.header.branch_id, damaged.seq, damaged.line.replace(b'"attempt":1', b'"attempt":2')
    )
    fold = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(fold, RestoredFold)  # the open does not read it
    assert fold.state() == full_state(log)
    with pytest.raises(StoreError) as raised:  # a full read (verify, export, a run) does
        await store.read_chain(log.header.branch_id)
    assert (raised.value.code, raised.value.seq) == ("log_corrupt", damaged.seq)


async def test_a_snapshot_of_another_head_is_refused_with_nothing_written(
    store: Store, clock: FakeClock
) -> None:
    log = await written(store, clock, turns=1, snapshot_after=0)
    before = reduce(log.header, log.events)
    lease = await store.acquire_lease(log.header.branch_id, "writer", 30_000)
    log.epoch = lease.epoch
    events = log.turn()
    with pytest.raises(StoreError) as raised:
        await store.append(log.header.branch_id, events, expected_seq=events[0].seq - 1,
                           lease=lease, snapshots=[fold_row(before)])  # at the old head
    assert raised.value.code == "invalid_argument"
    branch = await store.get_branch(log.header.branch_id)
    assert branch.head_seq == before.last_seq
    assert await store.read_tail(log.header.branch_id) is None


async def test_a_writer_puts_a_snapshot_every_n_events_and_the_listing_at_rest(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 8)
    log, lease = await held_branch(store, clock)
    fold = Fold(now_ms=0)
    fold.header(log.header)
    fold.apply(log.events[0])
    writer = BranchWriter(store, lease, fold)
    for _ in range(5):  # seqs 2..21: the batches reaching 8 and 16 put a snapshot
        await writer.append_prepared(log.turn())
    await writer.close()
    read = await store.read_tail(log.header.branch_id)
    assert read is not None
    assert read.snapshot.seq == 17  # the turn of seqs 14..17 reached 16
    assert len(read.lines) == log.last_seq - 17
    opened = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(opened, RestoredFold)
    assert opened.state() == full_state(log)
    listing = await read_listing(store, log.header.branch_id)
    assert listing is not None
    assert listing.head == (log.last_seq, log.last_hash)
    assert (listing.status, listing.turns_completed, listing.pending_calls) == ("idle", 5, ())
    assert listing.first_input == "What is in README.md?"


async def test_the_listing_answers_only_at_the_head(store: Store, clock: FakeClock) -> None:
    log, lease = await held_branch(store, clock)
    writer = BranchWriter(store, lease, reduce(log.header, log.events))
    await writer.append_prepared(log.turn())
    assert await read_listing(store, log.header.branch_id) is not None
    events = [log.add("user_input", {"source": "api", "text": "more"}, USER)]
    await store.append(log.header.branch_id, events, expected_seq=events[0].seq - 1,
                       lease=lease)  # moved without a listing row
    await writer.close()
    assert await read_listing(store, log.header.branch_id) is None


async def test_an_import_puts_the_snapshot_of_its_branch_at_the_head(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 4)
    log = SampleLog(clock)
    log.started()
    for _ in range(3):
        log.turn()
    await import_log(store, log.export(), tenant_id=TENANT)
    read = await store.read_tail(log.header.branch_id)
    assert read is not None
    assert (read.snapshot.seq, read.lines) == (log.last_seq, [])
    fold = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(fold, RestoredFold)
    assert fold.state() == full_state(log)


def test_a_snapshot_is_due_when_a_batch_reaches_a_multiple() -> None:
    every = fold_open.SNAPSHOT_EVERY
    assert snapshot_due(every, every)
    assert snapshot_due(every - 2, every + 3)
    assert not snapshot_due(every + 1, 2 * every - 1)


async def test_a_writer_puts_a_snapshot_once_its_lines_reach_the_bytes_before_n_events(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 10_000)
    log, lease = await held_branch(store, clock)
    writer = BranchWriter(store, lease, reduce(log.header, log.events))
    first = log.turn()
    # the thread_started line and the first turn count; the second turn reaches the bytes
    monkeypatch.setattr(fold_open, "SNAPSHOT_BYTES", len(log.events[0].line) + 1 + sum(
        len(e.line) + 1 for e in first) + 1)
    await writer.append_prepared(first)
    assert await store.read_tail(log.header.branch_id) is None  # short of the bytes
    await writer.append_prepared(log.turn())
    await writer.append_prepared(log.turn())  # the count starts again at the row
    await writer.close()
    read = await store.read_tail(log.header.branch_id)
    assert read is not None
    assert (read.snapshot.seq, len(read.lines)) == (9, 4)
    opened = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(opened, RestoredFold)
    assert opened.state() == full_state(log)


def test_a_new_writer_counts_the_bytes_from_the_last_multiple_of_n(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 4)
    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    log.turn()  # seqs 1..9: the last multiple of 4 is 8
    schedule = SnapshotSchedule.of(reduce(log.header, log.events))
    assert schedule.unsaved == len(log.events[-1].line) + 1
    assert not row_at_head_pays(reduce(log.header, log.events[:3]))
    monkeypatch.setattr(fold_open, "SNAPSHOT_BYTES", 100)
    assert row_at_head_pays(reduce(log.header, log.events[:3]))  # short, but long lines


async def checkpointed(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, turns: int
) -> SampleLog:
    """A root branch written as a run writes it (every 8 events a fold row), the writer
    keeping each turn request's checkpoint."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 8)
    log, lease = await held_branch(store, clock)
    writer = BranchWriter(store, lease, reduce(log.header, log.events))
    for _ in range(turns):
        events = log.turn()
        writer.keep_checkpoint(log.request_checkpoint(events[1]))
        await writer.append_prepared(events)
    await writer.close()
    return log


async def test_a_run_renders_on_from_the_request_checkpoint_in_the_fold_row(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = await checkpointed(store, clock, monkeypatch, turns=5)
    log.add("user_input", {"source": "api", "text": "more"}, USER)  # the next turn's input
    fold = (await store.read_chain(log.header.branch_id)).fold(0)
    fold.apply(log.events[-1])
    cache = RenderCache()
    cache.resumed = await open_checkpoint(store, log.header.branch_id, fold)
    assert cache.resumed is not None
    assert cache.resumed.checkpoint.seq == 15  # turn 4's request: its append reached 16
    started = log.events[0].data
    got = render(started, fold.events, log.artifacts, cache)
    assert cache.resumed is not None
    whole = render(started, fold.events, log.artifacts)
    assert (bytes(got.body), got.sha256, list(got.messages)) == (
        bytes(whole.body), whole.sha256, list(whole.messages))
    # a fold opened from the snapshot lacks the lines before it: no checkpoint for it
    opened = await open_fold(store, log.header.branch_id, 0)
    assert isinstance(opened, RestoredFold)
    assert await open_checkpoint(store, log.header.branch_id, opened) is None


async def test_a_damaged_checkpoint_is_ignored_and_every_line_rendered(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch, tamper: object
) -> None:
    log = await checkpointed(store, clock, monkeypatch, turns=4)
    read = await store.read_tail(log.header.branch_id)
    assert read is not None
    body = read.snapshot.body
    tamper.update_one(  # type: ignore[attr-defined]
        "UPDATE fold_snapshots SET body = ? WHERE branch_id = ? AND kind = 'fold'",
        (body[:-1] + bytes([body[-1] ^ 1]), log.header.branch_id),
    )
    fold = (await store.read_chain(log.header.branch_id)).fold(0)
    assert await open_checkpoint(store, log.header.branch_id, fold) is None
    # another thread's checkpoint (bytes intact) names no request of this chain
    other = await checkpointed(store, clock, monkeypatch, turns=4)
    theirs = (await store.read_chain(other.header.branch_id)).fold(0)
    assert await open_checkpoint(store, other.header.branch_id, theirs) is not None
    theirs.events[:] = fold.events  # as if their row were read for this chain
    assert await open_checkpoint(store, other.header.branch_id, theirs) is None
