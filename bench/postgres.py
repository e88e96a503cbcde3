"""Postgres next to SQLite, in one run: appends/s and scripted steps/s with 1, 4, 16 and 32
threads working concurrently in one process (appends of different threads ready together are
group-committed: see the README's "Throughput"). Appends: each thread on its own branch under
its own lease, one event per append, the way the run loop writes. Steps: each thread is a run of the
scripted agent of ``bench/steps.py`` (a model turn calling a read_only tool: two durable
appends per step), ``STEPS`` steps each, all runs started together.

Events are minted before the clock starts, so the numbers are the store's: lease check, head
check, insert, head move and commit (``synchronous=FULL`` on SQLite, default ``fsync`` on
Postgres). Beside each rate, the process's CPU per operation (µs), which a busy disk or server
does not blur, and the event loop thread's share of it: that one thread runs the Python of every
run in the process, so one process can't do more than about 1e6 / (loop µs per step) steps a
second however its commits group (printed under the steps table). Timings are printed, never
asserted.
Run: ``.venv/bin/python bench/postgres.py [--total N] [--url URL]`` (the server must answer;
``tools/ensure_postgres.sh`` starts the local one).
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import psycopg
from psycopg import sql

from steps import StepClock, bench_agent
from threads.clock import SYSTEM_CLOCK
from threads.log.lines import Event
from threads.store.postgres import postgres
from threads.store.protocol import Lease, Store
from threads.store.sqlite import sqlite
from threads.testing.sample_log import USER, SampleLog

CONCURRENCY = (1, 4, 16, 32)
STEPS = 100  # per thread, in the steps/s rows
TTL_MS = 600_000


async def _prepare(store: Store, appends: int) -> tuple[SampleLog, Lease, list[Event]]:
    """One thread: its branch, its lease, ``thread_started`` stored, ``appends`` events minted."""
    log = SampleLog(SYSTEM_CLOCK)
    await store.create_branch(log.header, tenant_id="bench")
    lease = await store.acquire_lease(log.header.branch_id, f"bench-{uuid.uuid4()}", TTL_MS)
    log.epoch = lease.epoch
    await store.append(log.header.branch_id, [log.started()], expected_seq=0, lease=lease)
    events = [
        log.add("user_input", {"source": "api", "text": f"message {i}"}, USER)
        for i in range(appends)
    ]
    return log, lease, events


async def _write(store: Store, log: SampleLog, lease: Lease, events: list[Event]) -> None:
    for event in events:
        await store.append(log.header.branch_id, [event], expected_seq=event.seq - 1, lease=lease)


# (operations per second, process CPU µs per operation, event loop thread CPU µs per operation)
Cell = tuple[float, float, float]


async def appends_per_second(store: Store, threads: int, total: int) -> Cell:
    per_thread = max(1, total // threads)
    prepared = [await _prepare(store, per_thread) for _ in range(threads)]
    start, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    await asyncio.gather(*(_write(store, *p) for p in prepared))
    cell = _cell(per_thread * threads, start, cpu, loop_cpu)
    for _, lease, _ in prepared:  # as a run does when it ends: a lone writer again commits
        await store.release_lease(lease)  # in place (SQLite), as a real lone run would
    return cell


async def steps_per_second(store: Store, threads: int) -> Cell:
    bots = [bench_agent(STEPS, StepClock()) for _ in range(threads)]
    start, cpu, loop_cpu = time.perf_counter(), time.process_time(), time.thread_time()
    results = await asyncio.gather(*(bot.run("go", store=store) for bot in bots))
    assert all(r.status == "completed" for r in results), results
    return _cell(STEPS * threads, start, cpu, loop_cpu)


def _cell(done: int, start: float, cpu: float, loop_cpu: float) -> Cell:
    """Rate and CPU per operation since ``start`` / ``cpu`` (the whole process's CPU: the
    client's share of a Postgres append, which a busy disk or server does not blur) and
    ``loop_cpu`` (this thread's: the event loop's, which runs every run's Python)."""
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    looped = time.thread_time() - loop_cpu
    return done / elapsed, used / done * 1e6, looped / done * 1e6


async def _engine_rows(open_store: Callable[[], Store], total: int) -> list[list[Cell]]:
    """[appends per concurrency, steps per concurrency] on one store."""
    store = open_store()
    try:
        await appends_per_second(store, 1, 20)  # warm up: schema, pool, caches
        appends = [await appends_per_second(store, n, total) for n in CONCURRENCY]
        steps = [await steps_per_second(store, n) for n in CONCURRENCY]
        return [appends, steps]
    finally:
        await store.close()


async def _drop(url: str, schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


async def main(total: int, url: str) -> None:
    schema = f"bench_{uuid.uuid4().hex[:12]}"
    with tempfile.TemporaryDirectory(prefix="threads-bench-") as tmp:
        lite = await _engine_rows(lambda: sqlite(Path(tmp) / "store"), total)
    try:
        pg = await _engine_rows(
            lambda: postgres(url, schema=schema, min_size=16, max_size=16), total
        )
    finally:
        await _drop(url, schema)
    titles = (
        f"appends/s, one event per append, ~{total} appends per cell",
        f"scripted steps/s (model turn + read_only tool), {STEPS} steps per thread",
    )
    for title, a_row, b_row in zip(titles, lite, pg, strict=True):
        _table(title, a_row, b_row)
    for engine, cells in (("sqlite", lite[1]), ("postgres", pg[1])):
        loop_us = cells[-1][2]
        print(f"{engine}: at {loop_us:,.0f} µs of event loop CPU per step ({CONCURRENCY[-1]}"
              f" threads), one process tops out near {1e6 / loop_us:,.0f} steps/s")


def _table(title: str, lite: list[Cell], pg: list[Cell]) -> None:
    print(f"{title}\n")
    print(f"{'threads':>8} | {'sqlite':>10} | {'postgres':>10} | {'pg/sqlite':>9}"
          f" | {'CPU µs: sqlite':>14} | {'postgres':>8}"
          f" | {'loop µs: sqlite':>15} | {'postgres':>8}")
    print(f"{'-' * 8}-+-{'-' * 10}-+-{'-' * 10}-+-{'-' * 9}-+-{'-' * 14}-+-{'-' * 8}"
          f"-+-{'-' * 15}-+-{'-' * 8}")
    for n, (a, a_cpu, a_loop), (b, b_cpu, b_loop) in zip(CONCURRENCY, lite, pg, strict=True):
        print(f"{n:>8} | {a:>10.0f} | {b:>10.0f} | {b / a:>9.2f} | {a_cpu:>14.0f} | {b_cpu:>8.0f}"
              f" | {a_loop:>15.0f} | {b_loop:>8.0f}")
    print()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--total", type=int, default=1600, help="appends per cell")
    parser.add_argument(
        "--url", default="postgresql://postgres@127.0.0.1:5432/test", help="libpq URL"
    )
    args = parser.parse_args()
    asyncio.run(main(args.total, args.url))
