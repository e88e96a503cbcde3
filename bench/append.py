"""Benchmark: a durable single-event append through the SQLite store vs a raw sqlite3 commit,
and opening + verifying + reducing a 10,000-event branch.

Run: ``python bench/append.py [--appends N] [--dir DIR]``. Prints, from one run, the median µs
per append on each side and their ratio (goal ≤ 1.3x), then the read-side timings. Both write
sides use the same pragmas (WAL, synchronous=FULL), the same directory and the same line bytes;
events are encoded before timing, so only the store's work is measured.
"""

from __future__ import annotations

import argparse
import asyncio
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from threads.clock import SystemClock
from threads.log.fold import Fold
from threads.log.lines import Event
from threads.log.verify import verify_export
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch, import_log
from threads.testing.sample_log import SampleLog

WARMUP = 50
BRANCH_EVENTS = 10_000
READ_ROUNDS = 5


def sample_events(count: int) -> SampleLog:
    """A root branch of at least ``count`` events: thread_started, then whole turns."""
    log = SampleLog(SystemClock())
    log.started()
    while len(log.events) < count:
        log.turn(text="Please summarise the open invoices for ACME.", reply="Three are open.")
    return log


class RawLog:
    """The baseline: the same line bytes into a plain table, one INSERT + COMMIT each."""

    def __init__(self, path: Path) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.conn.execute("CREATE TABLE log (seq INTEGER PRIMARY KEY, line BLOB NOT NULL)")

    def append(self, event: Event) -> None:
        self.conn.execute("BEGIN")
        self.conn.execute("INSERT INTO log (seq, line) VALUES (?, ?)", (event.seq, event.line))
        self.conn.execute("COMMIT")


async def append_both(directory: Path, log: SampleLog) -> tuple[list[float], list[float]]:
    """Per-append seconds (ours, raw), interleaved event by event so that both sides see the
    same disk conditions."""
    store = sqlite(directory / "store")
    raw = RawLog(directory / "raw.db")
    try:
        await store.create_branch(log.header, tenant_id="bench")
        lease = await store.acquire_lease(log.header.branch_id, "bench", 3_600_000)
        ours: list[float] = []
        theirs: list[float] = []
        for event in log.events:
            started = time.perf_counter()
            await store.append(
                log.header.branch_id, [event], expected_seq=event.seq - 1, lease=lease
            )
            middle = time.perf_counter()
            raw.append(event)
            ours.append(middle - started)
            theirs.append(time.perf_counter() - middle)
        return ours[WARMUP:], theirs[WARMUP:]
    finally:
        raw.conn.close()
        await store.close()


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return time.perf_counter() - started


def verify_and_reduce(data: bytes) -> Fold:
    fold = Fold()
    verify_export(data, apply=fold.apply, on_header=fold.header)
    return fold


async def read_side(directory: Path) -> None:
    log = sample_events(BRANCH_EVENTS)
    data = log.export()
    seconds = timed(lambda: verify_and_reduce(data))
    print(
        f"verify_export + Fold, {len(log.events)} events ({len(data) / 1e6:.1f} MB):"
        f" {seconds * 1e3:8.1f} ms"
    )
    store = sqlite(directory / "branch")
    await import_log(store, data, tenant_id="bench")
    await store.close()

    rounds = []
    for _ in range(READ_ROUNDS):  # a fresh store object each time, as a new process opens it
        started = time.perf_counter()
        store = sqlite(directory / "branch")
        chain = await store.read_chain(log.header.branch_id)
        chain.fold(store.clock.now_ms())  # as a thread handle folds it
        rounds.append(time.perf_counter() - started)
        await store.close()
    ms = statistics.median(rounds) * 1e3
    print(f"open + read_chain + fold from the store:        {ms:8.1f} ms (median of {READ_ROUNDS})")
    store = sqlite(directory / "branch")
    assert await export_branch(store, log.header.branch_id) == data
    await store.close()


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=1000)
    parser.add_argument("--dir", help="where the databases go (default: a temp dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        directory = Path(tmp)
        log = sample_events(args.appends + WARMUP)
        sizes = [len(e.line) for e in log.events]
        ours_s, raw_s = await append_both(directory, log)
        ours, raw = statistics.median(ours_s) * 1e6, statistics.median(raw_s) * 1e6
        print(f"directory: {directory}; {len(sizes) - WARMUP} appends timed after {WARMUP} warmup")
        print(f"event lines: median {statistics.median(sizes):.0f} bytes")
        print(f"threads store append (1 event, own txn): {ours:8.1f} µs median")
        print(f"raw sqlite3 INSERT + COMMIT:             {raw:8.1f} µs median")
        print(f"ratio:                                   {ours / raw:8.2f}x  (goal <= 1.3x)")
        await read_side(directory)


if __name__ == "__main__":
    asyncio.run(main())
