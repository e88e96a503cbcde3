"""Group commit, on every engine: appends of many branches queued together commit in one
transaction, and a refused one (stale epoch, wrong expected seq, a reused event id) fails alone
with its own code while the others commit, verify and export.

The appends are made to queue together, not hoped to: on SQLite the store thread is held on a
gate until every append is queued; on Postgres the appends all start in one turn of the event
loop, before the committer runs. The engine's group step is wrapped to record group sizes, so
each test asserts the group it meant to build really was one transaction's worth.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Coroutine
from typing import Any

import psycopg
import pytest

import threads.store.sqlite.store as sqlite_engine
from postgres_support import URL
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.log.ids import uuid7
from threads.log.lines import Event, encode_event
from threads.log.render import MEDIA_TYPE as REQUEST_MEDIA_TYPE
from threads.log.verify import verify_export
from threads.store.control_items import InboxViews
from threads.store.postgres import PostgresStore
from threads.store.postgres.append import AppendRequest
from threads.store.postgres.deltas import PostgresDeltas
from threads.store.postgres.group import GroupCommitter
from threads.store.protocol import Lease, PendingArtifact, Store
from threads.store.sqlite import SQLiteStore
from threads.store.sqlite.group_commit import commit_group
from threads.store.transfer import export_branch
from threads.testing.sample_log import USER, SampleLog

TENANT = "acme"
TTL = 30_000
SHORT_TTL = 1_000
BRANCHES = 12
SHARED = PendingArtifact(b"an artifact every append of the group carries", "text/plain")


class Groups:
    """What the engine's group step saw: each group's size, and (SQLite) how many times an
    append's writes ran (once each, unless a group fell back to running them alone)."""

    def __init__(self) -> None:
        self.sizes: list[int] = []
        self.write_runs = 0

    def clear(self) -> None:
        self.sizes.clear()
        self.write_runs = 0


@pytest.fixture
def groups(engine: str, monkeypatch: pytest.MonkeyPatch) -> Groups:
    seen = Groups()
    if engine == "sqlite":
        real = sqlite_engine.commit_group

        def counted(write: Any) -> Any:
            def run(conn: sqlite3.Connection) -> Any:
                seen.write_runs += 1
                return write(conn)

            return run

        def recording(conn: sqlite3.Connection, writes: Any) -> Any:
            seen.sizes.append(len(writes))
            return real(conn, [counted(w) for w in writes])

        monkeypatch.setattr(sqlite_engine, "commit_group", recording)
    else:
        real_commit = GroupCommitter._commit

        async def recording_commit(self: GroupCommitter, group: Any) -> Any:
            seen.sizes.append(len(group))
            return await real_commit(self, group)

        monkeypatch.setattr(GroupCommitter, "_commit", recording_commit)
    return seen


class Writer:
    """One branch and its lease, with the events it has had committed."""

    def __init__(self, log: SampleLog, lease: Lease) -> None:
        self.log = log
        self.lease = lease
        log.epoch = lease.epoch

    @property
    def branch_id(self) -> str:
        return self.log.header.branch_id

    def next_event(self, text: str) -> Event:
        return self.log.add("user_input", {"source": "api", "text": text}, USER)


async def start_writers(store: Store, clock: FakeClock, ttls: list[int]) -> list[Writer]:
    writers = []
    for n, ttl in enumerate(ttls):
        log = SampleLog(clock)
        await store.create_branch(log.header, tenant_id=TENANT)
        lease = await store.acquire_lease(log.header.branch_id, f"runner-{n}", ttl)
        writer = Writer(log, lease)
        await store.append(writer.branch_id, [log.started()], expected_seq=0, lease=lease)
        writers.append(writer)
    return writers


async def append_together(
    store: Store, calls: list[Coroutine[Any, Any, None]]
) -> list[BaseException | None]:
    """Run the appends so that they queue up together; each one's exception, or None.

    On SQLite the store thread is held twice: until every task has taken its first step, and,
    from the first grouped write on, until every append has queued its grouped write, so the
    group is whole however the machine schedules the tasks."""
    if not isinstance(store, SQLiteStore):
        return list(await asyncio.gather(*calls, return_exceptions=True))
    worker = store._worker
    real_run_grouped = worker.run_grouped
    files_gate, writes_gate = threading.Event(), threading.Event()
    held = [worker.run(files_gate.wait)]
    queued = 0

    def run_grouped(item: Any, batch: Any) -> Any:
        nonlocal queued
        if queued == 0:
            held.append(worker.run(writes_gate.wait))
        queued += 1
        future = real_run_grouped(item, batch)
        if queued == len(calls):
            writes_gate.set()
        return future

    worker.run_grouped = run_grouped  # type: ignore[method-assign]
    try:
        tasks = [asyncio.ensure_future(call) for call in calls]
        # Runs after every task's first step, which queues its file job: then the thread may go.
        asyncio.get_running_loop().call_soon(files_gate.set)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    finally:
        worker.run_grouped = real_run_grouped  # type: ignore[method-assign]
        files_gate.set()
        writes_gate.set()
    for future in held:
        await future
    return list(outcomes)


def code_of(outcome: BaseException | None) -> str | None:
    if outcome is None:
        return None
    assert isinstance(outcome, StoreError), repr(outcome)
    return outcome.code


async def assert_verifies(store: Store, writer: Writer) -> None:
    """The branch holds exactly the writer's committed lines and its export verifies."""
    chain = await store.read_chain(writer.branch_id)
    assert [e.line for e in chain.events] == [e.line for e in writer.log.events]
    verified = verify_export(await export_branch(store, writer.branch_id))
    assert verified.head_verified


async def test_one_stale_and_one_conflicting_append_fail_alone_in_their_group(
    store: Store, clock: FakeClock, groups: Groups
) -> None:
    stale, conflicting, reused = 3, 7, 10
    ttls = [SHORT_TTL if n == stale else TTL for n in range(BRANCHES)]
    writers = await start_writers(store, clock, ttls)
    # The stale branch's lease expires and another run takes it over (epoch 2).
    clock.advance(SHORT_TTL + 1)
    taker = await store.acquire_lease(writers[stale].branch_id, "runner-takeover", TTL)
    assert taker.epoch == writers[stale].lease.epoch + 1

    calls, batches = [], []
    for n, writer in enumerate(writers):
        event = writer.next_event(f"message {n}")
        if n == reused:  # same seq and chain, but the event id of its thread_started
            event = _with_event_id(event, writer.log.events[0].event_id)
        expected = event.seq - 1 + (5 if n == conflicting else 0)
        # A request artifact is written inside the append's transaction (other kinds go to
        # files first, on SQLite), so it is rolled back with a refused append.
        own = PendingArtifact(f"request of branch {n}".encode(), REQUEST_MEDIA_TYPE)
        batches.append([event])
        calls.append(
            store.append(
                writer.branch_id, [event], expected_seq=expected, lease=writer.lease,
                artifacts=[own, SHARED],
            )
        )
    groups.clear()
    outcomes = await append_together(store, calls)

    assert groups.sizes[0] == BRANCHES  # judged as one group
    if isinstance(store, SQLiteStore):
        # The fence refusals changed no row and cost nothing; the reused event id is refused
        # after its fence moved the head, so the group ran once more, each append in its own
        # savepoint, in the same transaction (one group, one commit).
        assert (groups.sizes, groups.write_runs) == ([BRANCHES], reused + 1 + BRANCHES)
    codes = {n: code_of(o) for n, o in enumerate(outcomes)}
    assert codes == {
        n: {stale: "stale_epoch", conflicting: "seq_conflict", reused: "invalid_argument"}.get(n)
        for n in range(BRANCHES)
    }
    for n, writer in enumerate(writers):
        if n in (stale, conflicting, reused):
            writer.log.events.pop()  # refused: nothing of it was written
            branch = await store.get_branch(writer.branch_id)
            assert branch.head_seq == 1
        await assert_verifies(store, writer)
    for n in range(BRANCHES):
        data = f"request of branch {n}".encode()
        committed = n not in (stale, conflicting, reused)
        assert await _has_artifact(store, data) == committed  # rolled back with its append
    assert await _has_artifact(store, SHARED.data)

    # The refused branches still take a correct append: nothing of theirs was poisoned.
    retry = writers[conflicting]
    event = retry.next_event("again")
    await store.append(retry.branch_id, [event], expected_seq=1, lease=retry.lease)
    await assert_verifies(store, retry)
    with pytest.raises(StoreError) as caught:
        await store.append(
            writers[stale].branch_id, [writers[stale].next_event("late")], expected_seq=1,
            lease=writers[stale].lease,
        )
    assert caught.value.code == "stale_epoch"


async def test_two_appends_to_one_branch_in_a_group_run_in_order(
    store: Store, clock: FakeClock, groups: Groups
) -> None:
    """A branch's second append queued behind its first (two writers racing at one seq) is
    judged after the first committed: exactly one lands, as if they ran one at a time."""
    writers = await start_writers(store, clock, [TTL, TTL])
    first = writers[0].next_event("first")
    rival = _with_event_id(first, uuid7(clock.now_ms()))
    groups.clear()
    outcomes = await append_together(
        store,
        [
            store.append(writers[0].branch_id, [first], expected_seq=1, lease=writers[0].lease),
            store.append(writers[0].branch_id, [rival], expected_seq=1, lease=writers[0].lease),
            store.append(
                writers[1].branch_id, [writers[1].next_event("other")], expected_seq=1,
                lease=writers[1].lease,
            ),
        ],
    )
    assert [code_of(o) for o in outcomes] == [None, "seq_conflict", None]
    assert groups.sizes[0] == 3 if isinstance(store, SQLiteStore) else groups.sizes[:2] == [2, 1]
    if isinstance(store, SQLiteStore):  # refused at its fence: nothing to undo, no rerun
        assert groups.write_runs == 3
    for writer in writers:
        await assert_verifies(store, writer)


async def test_fence_refusals_in_a_group_leave_the_others_whole(
    store: Store, clock: FakeClock, groups: Groups
) -> None:
    """Appends refused at their fence (a stale lease, a wrong expected seq) change no row: they
    get their own errors, the group commits the rest in its one pass (no savepoint, no rerun),
    and the refused branches are as they were."""
    stale, conflicting = 1, 4
    ttls = [SHORT_TTL if n == stale else TTL for n in range(6)]
    writers = await start_writers(store, clock, ttls)
    clock.advance(SHORT_TTL + 1)
    await store.acquire_lease(writers[stale].branch_id, "runner-takeover", TTL)
    calls = []
    for n, writer in enumerate(writers):
        event = writer.next_event(f"message {n}")
        expected = event.seq - 1 + (3 if n == conflicting else 0)
        calls.append(
            store.append(writer.branch_id, [event], expected_seq=expected, lease=writer.lease)
        )
    groups.clear()
    outcomes = await append_together(store, calls)
    assert [code_of(o) for o in outcomes] == [
        {stale: "stale_epoch", conflicting: "seq_conflict"}.get(n) for n in range(6)
    ]
    if isinstance(store, SQLiteStore):
        assert (groups.sizes, groups.write_runs) == ([6], 6)
    for n, writer in enumerate(writers):
        if n in (stale, conflicting):
            writer.log.events.pop()
            assert (await store.get_branch(writer.branch_id)).head_seq == 1
        await assert_verifies(store, writer)


async def test_a_branch_locked_by_another_session_does_not_hold_up_the_group(
    open_store: Any, clock: FakeClock, engine: str
) -> None:
    """Postgres: a row lock another session holds (a frozen host) delays only that branch's
    append, which waits alone; the rest of the group commits meanwhile."""
    if engine != "postgres":
        pytest.skip("row locks held by another session are Postgres's")
    store = open_store()
    assert isinstance(store, PostgresStore)
    writers = await start_writers(store, clock, [TTL] * 4)
    locker = await psycopg.AsyncConnection.connect(URL)
    try:
        await locker.execute(f"SET search_path TO {store.schema}")
        await locker.execute(
            "SELECT 1 FROM leases WHERE branch_id = %s FOR UPDATE", (writers[0].branch_id,)
        )
        tasks = [
            asyncio.ensure_future(
                store.append(w.branch_id, [w.next_event("x")], expected_seq=1, lease=w.lease)
            )
            for w in writers
        ]
        await asyncio.gather(*tasks[1:])
        assert not tasks[0].done()  # still waiting for the lock: it can't have committed
        await locker.rollback()
        await tasks[0]
    finally:
        await locker.close()
    for writer in writers:
        await assert_verifies(store, writer)


def test_a_group_whose_transaction_is_lost_runs_each_append_alone(tmp_path: Any) -> None:
    """When SQLite rolls the whole group back (what it does on a full disk or an I/O error),
    nothing of it was committed: every append runs again in its own transaction, so the good
    ones commit once each and the culprit alone gets its error."""
    conn = sqlite3.connect(tmp_path / "t.db", isolation_level=None)
    conn.execute("CREATE TABLE t (k TEXT PRIMARY KEY)")
    runs: list[str] = []

    def insert(key: str) -> Any:
        def write(c: sqlite3.Connection) -> str:
            runs.append(key)
            c.execute("INSERT INTO t VALUES (?)", (key,))
            return key

        return write

    def losing(c: sqlite3.Connection) -> None:
        runs.append("losing")
        c.execute("ROLLBACK")  # what SQLite does by itself on SQLITE_FULL / SQLITE_IOERR
        raise sqlite3.OperationalError("database or disk is full")

    outcomes = commit_group(conn, [insert("a"), losing, insert("b")])
    assert [r for r, _ in outcomes] == ["a", None, "b"]
    assert isinstance(outcomes[1][1], sqlite3.OperationalError)
    assert runs == ["a", "losing", "a", "losing", "b"]
    assert sorted(k for (k,) in conn.execute("SELECT k FROM t")) == ["a", "b"]
    assert not conn.in_transaction


def _with_event_id(event: Event, event_id: str) -> Event:
    """The same event (seq, chain, data) under another event id."""
    return encode_event(
        seq=event.seq, event_id=event_id, thread_id=event.thread_id, branch_id=event.branch_id,
        epoch=event.epoch, type=event.type, time=event.time, actor=event.actor,
        prev_hash=event.prev_hash, data=event.data,
    )


async def _has_artifact(store: Store, data: bytes) -> bool:
    try:
        return await store.get_artifact(sha256_hex(data)) == data
    except StoreError as exc:
        if exc.code != "artifact_missing":
            raise
        return False


async def test_an_append_queued_as_the_committers_finish_is_still_committed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Both committers finish in one turn of the loop, and a caller they just answered appends
    again before their done callbacks ran: that append starts a committer of its own (it used
    to wait forever, counted as in flight behind two committers that had stopped)."""

    async def commit(self: GroupCommitter, group: list[Any]) -> list[None]:
        await asyncio.sleep(0)  # one turn of the loop, as a round trip would take
        return [None] * len(group)

    monkeypatch.setattr(GroupCommitter, "_commit", commit)

    async def alone(_request: AppendRequest, _maybe_landed: bool) -> None:
        raise AssertionError("nothing runs alone here")

    committer = GroupCommitter(_no_connection, lambda: None, alone, PostgresDeltas(),
                               InboxViews())

    def request(branch_id: str) -> AppendRequest:
        return AppendRequest(branch_id, [], 0, Lease(branch_id, "runner", 1, 0))

    async def twice() -> None:
        await committer.append(request("x"))
        await committer.append(request("y"))  # queued as both committers stop

    # Two appends of one branch: two groups, one per committer, finishing together.
    await asyncio.wait_for(
        asyncio.gather(twice(), committer.append(request("x"))), timeout=10
    )


def _no_connection() -> Any:
    raise AssertionError("no connection is taken here")



async def test_an_append_whose_file_cannot_be_put_fails_alone_before_its_events(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SQLite puts a group's artifact files first, outside its transaction: the append whose
    file finds the disk full is ``store_full`` and writes nothing; the rest of the group, and
    a later append of the same branch, commit."""
    clock = FakeClock()
    store = SQLiteStore(tmp_path / "s", clock=clock)
    try:
        writers = await start_writers(store, clock, [TTL] * 4)
        doomed = b"the artifact that finds the disk full"
        real_put = sqlite_engine.ArtifactFiles.put

        def put(self: Any, data: bytes) -> str:
            if data == doomed:
                raise OSError(28, "No space left on device")
            return str(real_put(self, data))

        monkeypatch.setattr(sqlite_engine.ArtifactFiles, "put", put)
        calls = []
        for n, writer in enumerate(writers):
            blob = doomed if n == 2 else f"result of branch {n}".encode()
            event = writer.next_event(f"message {n}")
            calls.append(store.append(
                writer.branch_id, [event], expected_seq=event.seq - 1, lease=writer.lease,
                artifacts=[PendingArtifact(blob, "text/plain")],
            ))
        outcomes = await append_together(store, calls)
        assert [code_of(o) for o in outcomes] == [None, None, "store_full", None]
        writers[2].log.events.pop()
        for n, writer in enumerate(writers):
            await assert_verifies(store, writer)
            blob = doomed if n == 2 else f"result of branch {n}".encode()
            assert await _has_artifact(store, blob) == (n != 2)
        again = writers[2].next_event("after the disk was freed")
        await store.append(writers[2].branch_id, [again], expected_seq=1, lease=writers[2].lease)
        await assert_verifies(store, writers[2])
    finally:
        await store.close()


async def test_a_plain_group_takes_no_savepoint_and_reads_no_inbox_rows(
    store: Store, clock: FakeClock, engine: str
) -> None:
    """SQLite: a group whose appends all pass runs each one's fence, its events (one statement
    for a few) and nothing else: no savepoints (none is refused) and no inbox read (the fence
    answered that no control item waits)."""
    if engine != "sqlite":
        pytest.skip("SQLite's statements")
    assert isinstance(store, SQLiteStore)
    writers = await start_writers(store, clock, [TTL] * 4)
    statements: list[str] = []
    conn = store._conn
    assert conn is not None
    conn.set_trace_callback(statements.append)
    try:
        outcomes = await append_together(store, [
            store.append(
                w.branch_id, [w.next_event("one"), w.next_event("two")], expected_seq=1,
                lease=w.lease,
            )
            for w in writers
        ])
    finally:
        conn.set_trace_callback(None)
    assert outcomes == [None] * 4
    assert not [s for s in statements if "SAVEPOINT" in s or s.startswith("SELECT inbox_id")]
    assert len([s for s in statements if s.startswith("INSERT INTO events")]) == 4
    for writer in writers:
        await assert_verifies(store, writer)
