"""Faults of the store's environment and damage to stored lines, each with its own code.

A locked, read-only, full or damaged SQLite database, a Postgres backend that was ended and an
unreachable server answer a coded ``StoreError`` (never raw ``sqlite3``/``psycopg``, never
``log_corrupt`` for a healthy log); any damaged byte of a stored line reads as ``log_corrupt``
at that line's seq; a store takes only lines that pass the import's admission.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from postgres_support import POSTGRES_MARKS, drop_store, execute, fetch_one, open_postgres
from threads import agent
from threads.cli.main import main
from threads.clock import FakeClock
from threads.errors import LogError, StoreError
from threads.log.canonical import MAX_SAFE_INT
from threads.log.lines import encode_event
from threads.store.faults import fault
from threads.store.protocol import Lease, Store
from threads.store.sqlite import SQLiteStore, sqlite
from threads.store.transfer import import_log
from threads.testing.sample_log import USER, SampleLog
from threads.testing.scripted import say, scripted_model

TENANT = "acme"
TTL = 30_000


async def _written(store: Store, clock: FakeClock, turns: int = 1) -> tuple[SampleLog, Lease]:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    lease = await store.acquire_lease(log.header.branch_id, "writer", TTL)
    log.epoch = lease.epoch
    events = [log.started()]
    for _ in range(turns):
        events += log.turn()
    await store.append(log.header.branch_id, events, expected_seq=0, lease=lease)
    return log, lease


async def _code(awaitable: object) -> str:
    with pytest.raises(StoreError) as caught:
        await awaitable  # type: ignore[misc]
    return caught.value.code


# ---- SQLite: locked, read-only, full, damaged ----------------------------------------------


async def _on_every_connection(store: SQLiteStore, fault_of: Any) -> None:
    """Bring a fault of the file about through a connection setting: on the store thread's
    connection and on the one its appends commit in place on, as a real fault hits both."""
    await store._run(fault_of)
    fault_of(store._here_connection())


@contextlib.contextmanager
def _write_lock_held(db: Path) -> Iterator[None]:
    """Another process takes the database's write lock and keeps it for the block."""
    script = textwrap.dedent(
        f"""
        import sqlite3, sys, time
        conn = sqlite3.connect({str(db)!r}, isolation_level=None)
        conn.execute("BEGIN IMMEDIATE")
        print("locked", flush=True)
        sys.stdin.read()
        """
    )
    with subprocess.Popen(
        [sys.executable, "-c", script], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "locked"
        try:
            yield
        finally:
            holder.kill()


async def test_a_locked_database_is_store_busy_for_writes_and_never_blocks_reads(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    setup = sqlite(tmp_path, clock=clock)
    log, lease = await _written(setup, clock)
    await setup.close()
    with _write_lock_held(tmp_path / "threads.db"):
        store = sqlite(tmp_path, clock=clock, busy_timeout_ms=200)
        # Opening and reading take no write lock: they neither wait nor fail behind a writer.
        threads = await asyncio.wait_for(store.list_threads(), timeout=5)
        assert [t.thread_id for t in threads] == [log.header.thread_id]
        chain = await asyncio.wait_for(store.read_chain(log.header.branch_id), timeout=5)
        assert chain.branch.head_seq == log.last_seq
        late = log.add("user_input", {"source": "api", "text": "late"}, USER)
        append = store.append(
            log.header.branch_id, [late], expected_seq=late.seq - 1, lease=lease
        )
        assert await _code(append) == "store_busy"
        await store.close()


_LIST_THREADS = """
import asyncio, sys
from threads.errors import StoreError
from threads.store.sqlite import sqlite

async def main() -> None:
    store = sqlite(sys.argv[1])
    try:
        await store.list_threads()
        print("opened")
    except StoreError as exc:
        print(exc.code)
    finally:
        await store.close()

asyncio.run(main())
"""


def _read_only_mount_open(directory: Path) -> str:
    """Open the store in a child whose view of ``directory`` is a read-only bind mount
    (bubblewrap): file modes don't stop root, a read-only mount does."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        pytest.skip("running as root and bubblewrap (bwrap) is not installed")
    d = str(directory)
    # The read-only bind last: a scratch directory may live under /dev (/dev/shm).
    mounts = ["--bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--ro-bind", d, d]
    out = subprocess.run(
        [bwrap, *mounts, sys.executable, "-c", _LIST_THREADS, d],
        capture_output=True, text=True, timeout=60, check=True,
    )
    return out.stdout.strip()


async def test_a_read_only_directory_is_store_read_only(tmp_path: Path) -> None:
    clock = FakeClock()
    setup = sqlite(tmp_path / "s", clock=clock)
    await _written(setup, clock)
    await setup.close()
    if os.geteuid() == 0:
        assert _read_only_mount_open(tmp_path / "s") == "store_read_only"
        return
    for path in (tmp_path / "s", tmp_path / "s" / "threads.db"):
        path.chmod(0o555 if path.is_dir() else 0o444)
    store = sqlite(tmp_path / "s", clock=clock)
    try:
        assert await _code(store.list_threads()) == "store_read_only"
    finally:
        await store.close()
        (tmp_path / "s").chmod(0o755)


async def test_a_read_only_database_is_store_read_only_for_writes(tmp_path: Path) -> None:
    """Even as root: SQLite itself refuses writes through a read-only connection."""
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _written(store, clock)

    def read_only(conn: sqlite3.Connection) -> None:
        conn.execute("PRAGMA query_only = ON")

    await _on_every_connection(store, read_only)
    late = log.add("user_input", {"source": "api", "text": "late"}, USER)
    append = store.append(log.header.branch_id, [late], expected_seq=late.seq - 1, lease=lease)
    assert await _code(append) == "store_read_only"
    await store.close()


async def test_a_full_disk_is_store_full_and_keeps_nothing(tmp_path: Path) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _written(store, clock)

    def cap_at_current_size(conn: sqlite3.Connection) -> None:
        pages = conn.execute("PRAGMA page_count").fetchone()[0]
        conn.execute(f"PRAGMA max_page_count = {pages}")

    await _on_every_connection(store, cap_at_current_size)
    big = [
        log.add("user_input", {"source": "api", "text": "x" * 200_000}, USER),
    ]
    append = store.append(log.header.branch_id, big, expected_seq=big[0].seq - 1, lease=lease)
    assert await _code(append) == "store_full"
    log.events.pop()
    chain = await store.read_chain(log.header.branch_id)  # the store is still usable
    assert chain.branch.head_seq == log.last_seq
    await store.close()


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
async def test_a_damaged_database_file_is_store_corrupt_not_log_corrupt(
    tmp_path: Path, damage: str
) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    await _written(store, clock, turns=40)
    await store.close()
    db = tmp_path / "threads.db"
    for extra in ("threads.db-wal", "threads.db-shm"):
        (tmp_path / extra).unlink(missing_ok=True)
    data = db.read_bytes()
    db.write_bytes(data[:5000] if damage == "truncated" else b"\x00" * len(data))
    reopened = sqlite(tmp_path, clock=clock)
    try:
        assert await _code(reopened.list_threads()) in {"store_corrupt", "store_unavailable"}
    finally:
        await reopened.close()


# ---- damage to stored lines ----------------------------------------------------------------


async def test_every_flipped_byte_of_a_stored_line_is_log_corrupt_at_that_line(
    tmp_path: Path,
) -> None:
    """400 random single-byte flips (keys, values, punctuation, header): each reads as
    ``log_corrupt`` naming the damaged line, never a ``KeyError`` or another raw error."""
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log, _ = await _written(store, clock, turns=2)
    branch = log.header.branch_id
    db = tmp_path / "threads.db"
    lines = [log.header.line, *(e.line for e in log.events)]
    rng = random.Random(11)
    for _ in range(400):
        index = rng.randrange(len(lines))
        original = lines[index]
        damaged = bytearray(original)
        offset = rng.randrange(len(damaged))
        damaged[offset] ^= 1 << rng.randrange(8)
        _store_line(db, branch, index, bytes(damaged))
        with pytest.raises(StoreError) as caught:
            await store.read_chain(branch)
        assert caught.value.code == "log_corrupt", (index, offset)
        assert caught.value.seq == index, (index, offset, caught.value)
        _store_line(db, branch, index, original)
    assert (await store.read_chain(branch)).branch.head_seq == log.last_seq
    await store.close()


def _store_line(db: Path, branch_id: str, seq: int, line: bytes) -> None:
    conn = sqlite3.connect(db)
    try:
        with conn:
            if seq == 0:
                conn.execute(
                    "UPDATE branches SET header_line = ? WHERE branch_id = ?", (line, branch_id)
                )
            else:
                conn.execute(
                    "UPDATE events SET line = ? WHERE branch_id = ? AND seq = ?",
                    (line, branch_id, seq),
                )
    finally:
        conn.close()


# ---- admission on append -------------------------------------------------------------------


async def test_a_line_the_import_would_refuse_is_never_stored(tmp_path: Path) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log, lease = await _written(store, clock)
    bad = [
        ("tool_call", {"call_id": "functions.x:0", "input": {}, "name": "x",
                       "request_event_id": log.events[-2].event_id}),
        ("user_input", {"source": "api", "text": "no principal"}),
        ("model_response", {"completeness": "complete", "content": [],
                            "request_event_id": log.events[-2].event_id,
                            "stop_reason": "end_turn",
                            "usage": {"input_tokens": -1, "output_tokens": 2**60}}),
    ]
    for type_, data in bad:
        event = encode_event(
            seq=log.last_seq + 1, event_id="01890000-0000-7000-8000-000000000001",
            thread_id=log.header.thread_id, branch_id=log.header.branch_id, epoch=lease.epoch,
            type=type_, time=clock.now_ms(), actor={"kind": "host"}, prev_hash=log.last_hash,
            data=data,
        )
        with pytest.raises(LogError) as caught:
            await store.append(
                log.header.branch_id, [event], expected_seq=log.last_seq, lease=lease
            )
        assert (caught.value.code, caught.value.seq) == ("invalid_line", event.seq)
    assert (await store.read_chain(log.header.branch_id)).branch.head_seq == log.last_seq
    await store.close()


async def test_an_epoch_past_the_safe_range_is_refused_at_acquire(tmp_path: Path) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log = SampleLog(clock, epoch=MAX_SAFE_INT)
    started = log.started()
    await import_log(store, log.export(), tenant_id=TENANT)
    assert started.epoch == MAX_SAFE_INT
    acquire = store.acquire_lease(log.header.branch_id, "next", TTL)
    assert await _code(acquire) == "branch_not_runnable"
    await store.close()


# ---- Postgres: ended backends, unreachable servers -----------------------------------------


@pytest.mark.parametrize("_pg", [pytest.param(0, marks=POSTGRES_MARKS)])
async def test_an_ended_postgres_backend_is_retried_not_stale_epoch(_pg: int) -> None:
    clock = FakeClock()
    store = open_postgres(clock)
    try:
        log, lease = await _written(store, clock)
        for call in range(3):
            execute(
                store.schema,
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE application_name = %s AND pid <> pg_backend_pid()",
                (f"threads:{store.schema}"[:63],),
            )
            if call == 0:
                await store.check_lease(lease)  # read: retried on a fresh connection
            elif call == 1:
                lease = await store.renew_lease(lease, TTL)
            else:
                late = log.add("user_input", {"source": "api", "text": "after"}, USER)
                await store.append(  # nothing was sent on the dead connection: sent again
                    log.header.branch_id, [late], expected_seq=late.seq - 1, lease=lease
                )
        chain = await store.read_chain(log.header.branch_id)
        assert chain.branch.head_seq == log.last_seq
        row = fetch_one(store.schema, "SELECT count(*) FROM events")
        assert row is not None
        assert row[0] == log.last_seq
    finally:
        await store.close()
        await drop_store(store)


async def test_an_unreachable_sqlite_path_is_coded(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = sqlite(blocker / "store")
    try:
        code = await _code(store.list_threads())
        assert code in {"store_unavailable", "store_read_only"}
    finally:
        await store.close()



async def test_the_cli_lists_and_reports_faults_with_their_codes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    clock = FakeClock()
    setup = sqlite(tmp_path / "s", clock=clock)
    log, _ = await _written(setup, clock)
    await setup.close()
    with _write_lock_held(tmp_path / "s" / "threads.db"):
        # `threads ls` reads beside a writer that holds the lock: no wait, no error.
        assert await asyncio.to_thread(
            main, ["ls", "--store", str(tmp_path / "s"), "--tenant", TENANT]
        ) == 0
        assert log.header.thread_id in capsys.readouterr().out
    (tmp_path / "s" / "threads.db").write_bytes(b"\x00" * 4096)
    for extra in ("threads.db-wal", "threads.db-shm"):
        (tmp_path / "s" / extra).unlink(missing_ok=True)
    assert await asyncio.to_thread(main, ["ls", "--store", str(tmp_path / "s")]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: store_corrupt")
    assert "log_corrupt" not in err


class _FullAfter(SQLiteStore):
    """A store whose disk fills after ``appends`` appends (a fault-injecting wrapper)."""

    def __init__(self, path: Path, appends: int) -> None:
        super().__init__(path, clock=FakeClock())
        self.left = appends

    async def append(self, *args: Any, **kwargs: Any) -> None:
        self.left -= 1
        if self.left < 0:
            raise fault("store_full", "injected: no space left on device")
        await super().append(*args, **kwargs)


async def test_a_run_that_ends_on_a_store_fault_says_so_and_frees_its_thread(
    tmp_path: Path,
) -> None:
    store = _FullAfter(tmp_path / "s", appends=1)
    bot = agent(name="t", model=scripted_model([say("hello")]))
    try:
        with pytest.raises(StoreError) as caught:
            await bot.run("hi", store=store)
        assert caught.value.code == "store_full"
        [root] = await store.list_threads()
        # Released at once, not at expiry: another holder takes it without moving the clock.
        lease = await store.acquire_lease(root.branch_id, "next-holder", TTL)
        assert '"run":"next-holder"' in lease.holder_id  # the store stamps host, pid, start
    finally:
        await store.close()
