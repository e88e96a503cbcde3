"""Open + state of a long thread, on its own: ``open_thread`` then ``Thread.state`` on a fresh
store object, as ``bench/steps.py`` prints it, with the store built once and kept.

Run: ``python bench/open_state.py [--dir DIR] [--events N] [--rounds N]``. With ``--dir`` the
store (and its thread id, in ``thread_id``) is built there once and reused by later runs, so a
profiler (``cProfile``, ``valgrind --tool=callgrind``) can time the open alone with
``--rounds 1``. Prints the median of the rounds in ms.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
from pathlib import Path

from threads import open_thread, sqlite
from threads.clock import SystemClock
from threads.store.transfer import import_log
from threads.testing.sample_log import SampleLog

EVENTS = 10_001


async def build(directory: Path, events: int = EVENTS) -> str:
    """A store in ``directory`` holding one root thread of ``events`` events; its id (kept in
    ``directory/thread_id``, and read back from there when the store is already built)."""
    id_file = directory / "thread_id"
    if id_file.exists():
        return id_file.read_text()
    log = SampleLog(SystemClock())
    log.started()
    while len(log.events) < events:
        log.turn(text="Please summarise the open invoices for ACME.", reply="Three are open.")
    del log.events[events:]
    store = sqlite(directory)
    await import_log(store, log.export(), tenant_id="local")
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


async def median_ms(directory: Path, thread_id: str, rounds: int) -> float:
    return statistics.median([await open_and_state_ms(directory, thread_id)
                              for _ in range(rounds)])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, help="where the store is built once and kept")
    parser.add_argument("--events", type=int, default=EVENTS, help="events of the thread")
    parser.add_argument("--rounds", type=int, default=15, help="opens timed (median printed)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        thread_id = await build(directory, args.events)
        ms = await median_ms(directory, thread_id, args.rounds)
    print(f"open + state of a {args.events:,}-event thread: {ms:.1f} ms (median of {args.rounds})")


if __name__ == "__main__":
    asyncio.run(main())
