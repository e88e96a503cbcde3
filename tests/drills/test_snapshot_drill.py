"""Crash drill: a fold snapshot and the events it follows commit together or not at all
(issue 36), on both engines, and a run killed there is continued with the request the whole
log renders (from the request checkpoint in the row when it committed, else from every line).
A real process appends a turn with its snapshot and is SIGKILLed
after the snapshot's row is written and before the transaction commits; a fresh store then
holds neither. Killed right after the commit instead, it holds both, and opening from the
snapshot gives the full fold's state. On Postgres the row is written either in an append's own
transaction (the child proves it is there, inside that transaction, before it dies) or by the
group statement, which is killed a random 0-2 ms after it starts: both or neither."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres
from threads import agent
from threads.log.fold.saved import RestoredFold
from threads.log.render import render
from threads.log.render_resume import Resumed
from threads.store.fold_open import open_checkpoint, open_fold
from threads.store.postgres import postgres
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.testing.scripted import say, scripted_model

# The child: a branch with one turn, then a second turn appended with its snapshot, dying at
# the chosen point (``row``: the snapshot row written, not committed; ``commit``: committed).
CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    from threads.clock import FakeClock
    from threads.log.fold import reduce
    from threads.store.fold_open import fold_row
    from threads.store.sqlite.store import SQLiteStore
    from threads.testing.sample_log import SampleLog

    root, point = sys.argv[1], sys.argv[2]

    class Dying(SQLiteStore):
        def _put_snapshots(self, conn, snapshots):
            super()._put_snapshots(conn, snapshots)
            if point == "row":
                os.kill(os.getpid(), signal.SIGKILL)

    async def main():
        log = SampleLog(FakeClock())
        store = Dying(root, clock=log.clock)
        started = log.started()
        await store.create_branch(log.header, tenant_id="local", events=[started])
        lease = await store.acquire_lease(log.header.branch_id, "writer", 30_000)
        log.epoch = lease.epoch
        first = log.turn()
        await store.append(log.header.branch_id, first, expected_seq=1, lease=lease)
        print(log.header.thread_id, log.header.branch_id, log.last_seq, flush=True)
        second = log.turn()
        row = fold_row(reduce(log.header, log.events))
        await store.append(log.header.branch_id, second, expected_seq=second[0].seq - 1,
                           lease=lease, snapshots=[row])
        os.kill(os.getpid(), signal.SIGKILL)

    asyncio.run(main())
    """
)


# The Postgres child: the same turns, the second dying at ``row`` (appended alone, as one with
# a receipt is: killed once its own transaction reads its snapshot row back, uncommitted),
# ``statement`` (the group statement, 0-2 ms after it starts) or ``commit`` (after it).
POSTGRES_CHILD = textwrap.dedent(
    """
    import asyncio, os, random, signal, sys, threading
    import psycopg
    import threads.store.postgres.group as group_module
    import threads.store.postgres.store as store_module
    from threads.clock import FakeClock
    from threads.log.fold import reduce
    from threads.store.fold_open import fold_row
    from threads.store.postgres import postgres
    from threads.store.receipts import START_RUN, RunReceipt
    from threads.testing.sample_log import SampleLog

    url, schema, point = sys.argv[1], sys.argv[2], sys.argv[3]
    armed = False

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_many = psycopg.AsyncCursor.executemany

    async def executemany(self, query, rows, **kwargs):
        await real_many(self, query, rows, **kwargs)
        if armed and query == store_module.PUT_SNAPSHOT:
            seen = await self.connection.execute(
                "SELECT count(*) FROM fold_snapshots WHERE kind = 'fold'")
            (count,) = await seen.fetchone()  # in the pipeline: the writes before it ran
            print("row", count, flush=True)
            die()

    psycopg.AsyncCursor.executemany = executemany
    real_commit = group_module.GroupCommitter._commit

    async def commit(self, group):
        if armed and point == "statement":
            timer = threading.Timer(random.uniform(0, 0.002), die)
            timer.start()
        verdicts = await real_commit(self, group)
        if armed:
            if point == "statement":
                timer.join()
            die()
        return verdicts

    group_module.GroupCommitter._commit = commit

    async def main():
        global armed
        log = SampleLog(FakeClock())
        store = postgres(url, clock=log.clock, schema=schema, max_size=2)
        started = log.started()
        await store.create_branch(log.header, tenant_id="local", events=[started])
        lease = await store.acquire_lease(log.header.branch_id, "writer", 30_000)
        log.epoch = lease.epoch
        first = log.turn()
        await store.append(log.header.branch_id, first, expected_seq=1, lease=lease)
        print(log.header.thread_id, log.header.branch_id, log.last_seq, flush=True)
        second = log.turn()
        row = fold_row(reduce(log.header, log.events))
        receipt = None
        if point == "row":
            h = log.header
            receipt = RunReceipt("local", START_RUN, "key", "who", "digest", h.thread_id,
                                 h.branch_id, second[0].event_id, 0)
        armed = True
        await store.append(log.header.branch_id, second, expected_seq=second[0].seq - 1,
                           lease=lease, snapshots=[row], receipt=receipt)
        die()

    asyncio.run(main())
    """
)


def killed_child(root: Path, point: str) -> tuple[str, int]:
    branch_id, first_head, _ = _killed([sys.executable, "-c", CHILD, str(root), point])
    return branch_id, first_head


def _killed(command: list[str]) -> tuple[str, int, list[str]]:
    """The branch, its head before the second turn, and what the child said after that."""
    done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    first, *said = done.stdout.splitlines()
    _, branch_id, first_head = first.split()
    return branch_id, int(first_head), said


async def holds_both_or_neither(store: Store, branch_id: str, first_head: int) -> bool:
    """Whether the turn and its snapshot are both there (True) or neither (False); an open
    from the snapshot then gives the full fold's state."""
    branch = await store.get_branch(branch_id)
    read = await store.read_tail(branch_id)
    full = (await store.read_chain(branch_id)).fold(0)
    if branch.head_seq == first_head:  # neither the turn nor its snapshot
        assert read is None
        return False
    assert branch.head_seq == first_head + 4
    assert read is not None
    assert read.snapshot.seq == branch.head_seq
    opened = await open_fold(store, branch_id, 0)
    assert isinstance(opened, RestoredFold)
    assert opened.state() == full.state()
    return True


@pytest.mark.parametrize("point", ["row", "commit"])
def test_a_snapshot_and_its_events_commit_together(tmp_path: Path, point: str) -> None:
    branch_id, first_head = killed_child(tmp_path, point)

    async def after() -> None:
        store = sqlite(tmp_path)
        try:
            assert await holds_both_or_neither(store, branch_id, first_head) == (
                point == "commit"
            )
        finally:
            await store.close()

    asyncio.run(after())


@needs_postgres
@pytest.mark.parametrize("point", ["row", "statement", "commit"])
def test_a_snapshot_and_its_events_commit_together_on_postgres(point: str) -> None:
    schema = fresh_schema()
    try:
        branch_id, first_head, said = _killed(
            [sys.executable, "-c", POSTGRES_CHILD, URL, schema, point]
        )
        # at ``row`` the append's own transaction read its snapshot row back, then died
        assert said == (["row 1"] if point == "row" else [])

        async def after() -> None:
            store = postgres(URL, schema=schema, max_size=2)
            try:
                both = await holds_both_or_neither(store, branch_id, first_head)
                if point != "statement":  # a kill inside the statement may land either way
                    assert both == (point == "commit")
            finally:
                await store.close()

        asyncio.run(after())
    finally:
        asyncio.run(drop_schema(schema))


# A real run's child: SNAPSHOT_EVERY lowered so its second turn's append puts the fold row
# (with the request checkpoint of the turn's request), dying at ``row`` (the row written, not
# committed) or ``commit`` (just after that append committed).
RUN_CHILD = textwrap.dedent(
    """
    import asyncio, os, signal, sys
    import threads.store.fold_open as fold_open
    from threads import agent
    from threads.store.sqlite.store import SQLiteStore
    from threads.testing.scripted import say, scripted_model

    root, point = sys.argv[1], sys.argv[2]
    fold_open.SNAPSHOT_EVERY = 8
    armed = False

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(SQLiteStore):
        def _put_snapshots(self, conn, snapshots):
            super()._put_snapshots(conn, snapshots)
            if armed and point == "row" and any(s.kind == "fold" for s in snapshots):
                die()

        async def append(self, branch_id, events, **kwargs):
            done = await super().append(branch_id, events, **kwargs)
            if armed and point == "commit" and any(
                s.kind == "fold" for s in kwargs.get("snapshots", ())
            ):
                die()
            return done

    async def main():
        global armed
        store = Dying(root)
        bot = agent(name="demo", model=scripted_model([say("one"), say("two")]))
        first = await bot.run("hello", store=store)
        print(first.thread.id, flush=True)
        armed = True
        await bot.run("and again", thread=first.thread.id, store=store)
        die()

    asyncio.run(main())
    """
)


@pytest.mark.parametrize("point", ["row", "commit"])
def test_a_run_resumed_after_a_kill_renders_the_request_of_the_whole_log(
    tmp_path: Path, point: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    done = subprocess.run([sys.executable, "-c", RUN_CHILD, str(tmp_path), point],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == -signal.SIGKILL, done.stderr
    thread_id = done.stdout.split()[0]
    used: list[int] = []
    real = Resumed.render

    def counted(self: Resumed, *args: Any) -> Any:
        rendered = real(self, *args)
        used.append(rendered is not None)
        return rendered

    monkeypatch.setattr(Resumed, "render", counted)

    async def after() -> None:
        store = sqlite(tmp_path)
        try:
            branch = await store.root_branch(thread_id)
            before = (await store.read_chain(branch.branch_id)).fold(0)
            row = await store.read_fold_row(branch.branch_id)
            # the row and the events of its append: both or neither
            assert (row is not None) == (point == "commit")
            if row is not None:
                assert (row.seq, row.head_hash) == (before.last_seq, before.last_hash)
                assert await open_checkpoint(store, branch.branch_id, before) is not None
            replies = [say(word) for word in ("one", "two", "three", "four")]
            bot = agent(name="demo", model=scripted_model(replies))
            result = await bot.run("once more", thread=thread_id, store=store)
            assert result.status == "completed"
            chain = await store.read_chain(branch.branch_id)
            events = chain.events
            started = events[0].data
            requests = [i for i, e in enumerate(events)
                        if e.type == "model_request" and e.seq > before.last_seq]
            assert requests
            for at in requests:  # each one the continuing run sent: the whole log's render
                whole = render(started, events[:at])
                assert events[at].data["request_ref"]["sha256"] == whole.sha256
                sent = await store.get_artifact(whole.sha256)
                assert sent == whole.data
        finally:
            await store.close()

    asyncio.run(after())
    # with the row committed the run rendered on from its checkpoint; without it, every line
    assert any(used) == (point == "commit")
