"""What only the Postgres engine has: the database clock for leases, many hosts (pools) racing
one branch, schema versioning in ``meta``, schemas kept apart, the import error naming the
extra, and exports moving byte-identically between Postgres and SQLite in both directions.

The shared behaviours (appends, fencing, leases, artifacts, transfer) run on Postgres through
the ``engine`` fixture of ``conftest.py``; this file adds no copy of them.
"""

from __future__ import annotations

import asyncio
import importlib
import socket
import sys
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from postgres_support import (
    drop_schema,
    execute,
    fetch_one,
    fresh_schema,
    needs_postgres,
    open_postgres,
)
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.store.postgres import PostgresStore, postgres
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.testing.sample_log import USER, SampleLog

TENANT = "acme"
TTL = 30_000


@pytest.fixture
async def schema() -> AsyncIterator[str]:
    name = fresh_schema()
    yield name
    await drop_schema(name)


@pytest.fixture
async def hosts(schema: str) -> AsyncIterator[Callable[[FakeClock | None], PostgresStore]]:
    """Stores on one schema, each with its own pool: separate hosts sharing the database."""
    opened: list[PostgresStore] = []

    def open_host(clock: FakeClock | None) -> PostgresStore:
        store = open_postgres(clock, schema)
        opened.append(store)
        return store

    yield open_host
    for store in opened:
        await store.close()


async def _thread(store: Store, clock: FakeClock) -> SampleLog:
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id=TENANT)
    return log


async def _expect(code: str, awaitable: object) -> None:
    with pytest.raises(StoreError) as caught:
        await awaitable  # type: ignore[misc]
    assert caught.value.code == code


def _db_now_ms(schema: str) -> int:
    row = fetch_one(schema, "SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")
    assert row is not None
    return int(row[0])


# ---- the database clock --------------------------------------------------------------------


@needs_postgres
async def test_without_an_injected_clock_lease_expiry_is_the_databases(
    hosts: Callable[[FakeClock | None], PostgresStore], schema: str
) -> None:
    store = hosts(None)
    log = await _thread(store, FakeClock())
    lease = await store.acquire_lease(log.header.branch_id, "host-a", TTL)
    db_now = _db_now_ms(schema)
    assert db_now - 5_000 <= lease.expires_at - TTL <= db_now  # stamped by the database clock
    await store.check_lease(lease)
    await _expect("branch_busy", store.acquire_lease(log.header.branch_id, "host-b", TTL))

    # The holder's own clock is irrelevant; move the row to just expired by the database's.
    execute(
        schema,
        "UPDATE leases SET expires_at = (extract(epoch from clock_timestamp()) * 1000)::bigint"
        " WHERE branch_id = %s",
        (log.header.branch_id,),
    )
    await _expect("stale_epoch", store.check_lease(lease))
    await _expect("stale_epoch", store.renew_lease(lease, TTL))
    taken = await store.acquire_lease(log.header.branch_id, "host-b", TTL)
    assert taken.epoch == lease.epoch + 1
    assert store.clock.now_ms() > 1_700_000_000_000  # the loop still has a real clock


# ---- many hosts on one schema --------------------------------------------------------------


@needs_postgres
async def test_hosts_racing_for_a_branch_exactly_one_wins(
    hosts: Callable[[FakeClock | None], PostgresStore],
) -> None:
    clock = FakeClock()
    stores = [hosts(clock) for _ in range(8)]
    log = await _thread(stores[0], clock)
    results = await asyncio.gather(
        *(s.acquire_lease(log.header.branch_id, f"host-{i}", TTL) for i, s in enumerate(stores)),
        return_exceptions=True,
    )
    winners = [r for r in results if not isinstance(r, BaseException)]
    losers = [r for r in results if isinstance(r, BaseException)]
    assert len(winners) == 1
    assert all(isinstance(e, StoreError) and e.code == "branch_busy" for e in losers)
    assert winners[0].epoch == 1


@needs_postgres
async def test_racing_appends_at_one_seq_exactly_one_lands(
    hosts: Callable[[FakeClock | None], PostgresStore],
) -> None:
    clock = FakeClock()
    stores = [hosts(clock) for _ in range(6)]
    log = await _thread(stores[0], clock)
    lease = await stores[0].acquire_lease(log.header.branch_id, "runner", TTL)
    log.epoch = lease.epoch
    started = log.started()
    rivals = []
    for i in range(6):  # every rival claims seq 2 after the same head
        rivals.append(log.add("user_input", {"source": "api", "text": f"rival {i}"}, USER))
        log.events.pop()
    assert {r.seq for r in rivals} == {2}
    await stores[0].append(log.header.branch_id, [started], expected_seq=0, lease=lease)

    results = await asyncio.gather(
        *(
            s.append(log.header.branch_id, [e], expected_seq=1, lease=lease)
            for s, e in zip(stores, rivals, strict=True)
        ),
        return_exceptions=True,
    )
    assert sum(r is None for r in results) == 1
    assert all(
        isinstance(r, StoreError) and r.code == "seq_conflict" for r in results if r is not None
    )
    chain = await stores[1].read_chain(log.header.branch_id)
    assert chain.branch.head_seq == 2


@needs_postgres
async def test_takeover_on_another_host_fences_the_first(
    hosts: Callable[[FakeClock | None], PostgresStore],
) -> None:
    clock = FakeClock()
    first, second = hosts(clock), hosts(clock)
    log = await _thread(first, clock)
    old = await first.acquire_lease(log.header.branch_id, "host-a", TTL)
    clock.advance(TTL)
    new = await second.acquire_lease(log.header.branch_id, "host-b", TTL)
    log.epoch = old.epoch
    late = log.started()
    await _expect(
        "stale_epoch", first.append(log.header.branch_id, [late], expected_seq=0, lease=old)
    )
    assert new.epoch == old.epoch + 1


# ---- schema --------------------------------------------------------------------------------


@needs_postgres
async def test_newer_schema_version_is_unsupported_format(
    hosts: Callable[[FakeClock | None], PostgresStore], schema: str
) -> None:
    await hosts(None).list_threads()  # creates the schema at the current version
    execute(schema, "UPDATE meta SET value = '7' WHERE key = 'schema_version'")
    with pytest.raises(StoreError) as caught:
        await hosts(None).list_threads()
    assert caught.value.code == "unsupported_format"


@needs_postgres
async def test_schemas_are_separate_stores(
    hosts: Callable[[FakeClock | None], PostgresStore],
) -> None:
    clock = FakeClock()
    here = hosts(clock)
    other_schema = fresh_schema()
    elsewhere = open_postgres(clock, other_schema)
    try:
        await _thread(here, clock)
        assert await elsewhere.list_threads() == []
    finally:
        await elsewhere.close()
        await drop_schema(other_schema)


@needs_postgres
async def test_closed_store_refuses_work(
    hosts: Callable[[FakeClock | None], PostgresStore],
) -> None:
    store = hosts(None)
    await store.list_threads()
    await store.close()
    await store.close()  # idempotent
    await _expect("invalid_argument", store.list_threads())


# ---- moving logs between engines -----------------------------------------------------------


def _child_export(clock: FakeClock) -> tuple[SampleLog, bytes]:
    root = SampleLog(clock)
    root.started()
    root.turn()
    root.snapshot()
    child = root.fork()
    child.turn(text="in the child")
    return child, child.export()


@needs_postgres
@pytest.mark.parametrize("direction", ["postgres_to_sqlite", "sqlite_to_postgres"])
async def test_export_moves_between_engines_byte_identical(
    hosts: Callable[[FakeClock | None], PostgresStore], tmp_path: Path, direction: str
) -> None:
    transfer = pytest.importorskip(
        "threads.store.transfer", reason="threads.store.transfer (export/import) not written yet"
    )
    clock = FakeClock()
    pg, lite = hosts(clock), sqlite(tmp_path / "lite", clock=clock)
    source, target = (pg, lite) if direction == "postgres_to_sqlite" else (lite, pg)
    try:
        # A branch written through the store protocol (leases, appends), then a child import.
        log = await _thread(source, clock)
        lease = await source.acquire_lease(log.header.branch_id, "runner", TTL)
        log.epoch = lease.epoch
        await source.append(
            log.header.branch_id, [log.started(), *log.turn()], expected_seq=0, lease=lease
        )
        child, child_data = _child_export(clock)
        await transfer.import_log(source, child_data, tenant_id=TENANT)

        for branch_id, expected in (
            (log.header.branch_id, log.export()),
            (child.header.branch_id, child_data),
        ):
            exported = await transfer.export_branch(source, branch_id)
            assert exported == expected
            result = await transfer.import_log(target, exported, tenant_id=TENANT)
            assert result.stored
            assert await transfer.export_branch(target, branch_id) == exported
            assert not (await transfer.import_log(target, exported, tenant_id=TENANT)).stored
    finally:
        await lite.close()


# ---- the extra -----------------------------------------------------------------------------


def test_import_without_psycopg_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    engine = "threads.store.postgres"
    for name in [m for m in sys.modules if m == engine or m.startswith(engine + ".")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "psycopg", None)
    monkeypatch.setitem(sys.modules, "psycopg_pool", None)
    importlib.import_module("threads")  # the package itself never needs the extra
    with pytest.raises(ImportError, match=r"pip install 'threads\[postgres\]'"):
        importlib.import_module("threads.store.postgres")


async def test_unreachable_server_fails_fast_with_the_reason() -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    store = postgres(f"postgresql://postgres@127.0.0.1:{port}/test", clock=FakeClock())
    try:
        with pytest.raises(StoreError, match=rf"port {port} failed") as caught:
            await asyncio.wait_for(store.list_threads(), timeout=15)
        assert caught.value.code == "store_unavailable"
    finally:
        await store.close()
