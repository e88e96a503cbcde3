"""Open + state of a long thread, on its own: ``open_thread`` then ``Thread.state`` on a fresh
store object, as ``bench/steps.py`` prints it, with the store built once and kept: imported
(which puts its fold snapshot at the head), then two more turns appended through a run's writer
(the first with a fold row carrying its request's checkpoint, the second 4 lines past it, and
the listing row), timed in turns with the same state read
from the whole log (no snapshot: what every open cost before). Then what a listing reads of
it (``threads ls``: its listing row; the host's ``GET /v1/threads``: the roots and their
summaries).

Run: ``python bench/open_state.py [--dir DIR] [--events N] [--rounds N] [--sections]``. With
``--dir`` the store (and its thread id, in ``thread_id``) is built there once and reused by
later runs, so a profiler (``cProfile``, ``valgrind --tool=callgrind``) can time the open alone
with ``--rounds 1``. Prints the median of the rounds in ms. ``--sections`` also times each part
of the open on its own (collector off, median of the rounds): the SELECT of the lines, their
JSON parse and sha256 (the parts no reader of these bytes can skip), building the events, the
safe-integer scan, the chain check, the fold and the state, and what a continuing run does
next with every line (render its next request); and the sum of the parts a reader of this
layout can't do without, which is the floor of this open on this machine.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from threads import open_thread, sqlite
from threads.clock import SystemClock
from threads.host.summaries import Summaries
from threads.log.canonical import fast_loads, lines_holding_digit_runs
from threads.log.collector import collector_paused
from threads.log.hashing import sha256_hexes
from threads.log.lines import events_from_values
from threads.log.render import render
from threads.run.listing import read_listing
from threads.run.views import state_of
from threads.run.writer import BranchWriter
from threads.store import flows, fold_open
from threads.store.protocol import Chain
from threads.store.rows import build_segment, check_chain
from threads.store.sqlite.store import drive
from threads.store.transfer import import_log
from threads.testing.sample_log import SampleLog

EVENTS = 10_001


async def build(directory: Path, events: int = EVENTS) -> str:
    """A store in ``directory`` holding one root thread of ``events`` events; its id (kept in
    ``directory/thread_id``, and read back from there when the store is already built)."""
    id_file = directory / "thread_id"
    if id_file.exists():
        return id_file.read_text()
    log = SampleLog(SystemClock(), keep_requests=False)  # the import takes no artifacts
    log.started()
    while len(log.events) < events:
        log.turn(text="Please summarise the open invoices for ACME.", reply="Three are open.")
    del log.events[events:]
    store = sqlite(directory)
    await import_log(store, log.export(), tenant_id="local")  # with its fold snapshot
    # two more turns through a run's writer: the first puts the fold row with its request's
    # checkpoint (as the append crossing the next multiple of SNAPSHOT_EVERY does), the
    # second the listing row at the new head, 4 lines past the fold row
    branch_id = log.header.branch_id
    lease = await store.acquire_lease(branch_id, "bench", 30_000)
    log.epoch = lease.epoch
    writer = BranchWriter(store, lease, (await store.read_chain(branch_id)).fold(0))
    turn = log.turn(text="And the paid ones?", reply="Two.")
    writer.keep_checkpoint(log.request_checkpoint(turn[1]))
    every_byte, fold_open.SNAPSHOT_BYTES = fold_open.SNAPSHOT_BYTES, 0
    try:
        await writer.append_prepared(turn)
    finally:
        fold_open.SNAPSHOT_BYTES = every_byte
    await writer.append_prepared(log.turn(text="And the late ones?", reply="One."))
    await writer.close()
    await store.close()
    id_file.write_text(log.header.thread_id)
    return log.header.thread_id


async def open_and_state_ms(directory: Path, thread_id: str) -> float:
    """ms of ``open_thread`` + ``state()`` on a fresh store object."""
    store = sqlite(directory)
    try:
        start = time.perf_counter_ns()
        thread = await open_thread(store, thread_id)
        await thread.state()
        return (time.perf_counter_ns() - start) / 1e6
    finally:
        await store.close()


async def full_fold_ms(directory: Path, thread_id: str) -> float:
    """ms of the same state read from the whole log (what an open cost before the fold
    snapshot, and what it costs without one): read the chain, fold it, ``state``."""
    store = sqlite(directory)
    try:
        start = time.perf_counter_ns()
        root = await store.root_branch(thread_id)
        fold = (await store.read_chain(root.branch_id)).fold(store.clock.now_ms())
        with collector_paused():
            state_of(fold)
        return (time.perf_counter_ns() - start) / 1e6
    finally:
        await store.close()


async def listing_ms(directory: Path, thread_id: str) -> float:
    """ms of what a listing reads of the thread (``read_listing``) on a fresh store object."""
    store = sqlite(directory)
    try:
        root = await store.root_branch(thread_id)
        start = time.perf_counter_ns()
        assert await read_listing(store, root.branch_id) is not None
        return (time.perf_counter_ns() - start) / 1e6
    finally:
        await store.close()


async def host_listing_ms(directory: Path) -> float:
    """ms of what ``GET /v1/threads`` reads of the store on a fresh store object: the tenant's
    root branches and each one's summary (``Summaries.listed``, nothing remembered yet)."""
    store = sqlite(directory)
    try:
        start = time.perf_counter_ns()
        (listed,) = await Summaries().listed(store, "local")
        took = (time.perf_counter_ns() - start) / 1e6
        assert listed.summary is not None
        return took
    finally:
        await store.close()


async def paired_ms(directory: Path, thread_id: str, rounds: int) -> tuple[float, float]:
    """Medians of ``open_and_state_ms`` and ``full_fold_ms``, timed in turns (a loaded
    machine slows both alike)."""
    opened, folded = [], []
    for _ in range(rounds):
        opened.append(await open_and_state_ms(directory, thread_id))
        folded.append(await full_fold_ms(directory, thread_id))
    return statistics.median(opened), statistics.median(folded)


def sections(directory: Path, thread_id: str, rounds: int) -> None:
    """Print each part of open + state timed on its own (see the module docstring)."""
    conn = sqlite3.connect(directory / "threads.db")
    (branch_id,) = conn.execute(
        "SELECT branch_id FROM branches WHERE thread_id = ? AND parent_branch_id IS NULL",
        (thread_id,),
    ).fetchone()
    target, ((info, header, lines),) = drive(conn, flows.stored_chain(branch_id))

    def ms(name: str, part: Callable[[], Any]) -> tuple[Any, float]:
        samples = []
        for _ in range(rounds):
            start = time.perf_counter_ns()
            result = part()
            samples.append((time.perf_counter_ns() - start) / 1e6)
        took = statistics.median(samples)
        print(f"  {name:<44} {took:6.1f} ms")
        return result, took

    resume = gc.isenabled()
    gc.disable()  # as the read and the fold run
    try:
        _, select = ms("SELECT the lines", lambda: drive(conn, flows.lines(info.branch_id, None)))
        values, parse = ms("JSON parse of each line", lambda: list(map(fast_loads, lines)))
        _, digest = ms("sha256 of each line", lambda: sha256_hexes(lines))
        _, events = ms("events built (with their sha256)",
                       lambda: events_from_values(values, lines))
        ms("safe-integer scan", lambda: lines_holding_digit_runs(lines))
        segment, _ = ms("all of the decoding (build_segment)",
                        lambda: build_segment(info, header, lines))
        _, check = ms("hash chain check", lambda: check_chain(target, [segment]))
        fold, folded = ms("fold", lambda: Chain(target, [segment]).fold(0))
        _, state = ms("state", lambda: state_of(fold))
        started = fold.thread_started
        assert started is not None
        # what a continuing run does next with every line: render its next request
        ms("render of the next request (all lines)", lambda: render(started, fold.events))
    finally:
        if resume:
            gc.enable()
        conn.close()
    floor = select + parse + events + check + folded + state
    print(f"  {'floor: all but the scan and the decoding glue':<44} {floor:6.1f} ms"
          f" (of which sha256 {digest:.1f})")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, help="where the store is built once and kept")
    parser.add_argument("--events", type=int, default=EVENTS, help="events of the thread")
    parser.add_argument("--rounds", type=int, default=15, help="opens timed (median printed)")
    parser.add_argument("--sections", action="store_true", help="time each part on its own")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        thread_id = await build(directory, args.events)
        took, whole = await paired_ms(directory, thread_id, args.rounds)
        print(f"open + state of a {args.events:,}-event thread: {took:.1f} ms"
              f" (median of {args.rounds})")
        print(f"the same from the whole log, no snapshot: {whole:.1f} ms"
              f" ({whole / took:.1f}x the snapshot's, paired rounds)")
        listed = statistics.median([await listing_ms(directory, thread_id)
                                    for _ in range(args.rounds)])
        print(f"listing summary of that thread: {listed:.2f} ms (median of {args.rounds})")
        hosted = statistics.median([await host_listing_ms(directory)
                                    for _ in range(args.rounds)])
        print(f"host listing (GET /v1/threads' summaries) of that store: {hosted:.2f} ms"
              f" (median of {args.rounds})")
        if args.sections:
            sections(directory, thread_id, args.rounds)


if __name__ == "__main__":
    asyncio.run(main())
