"""What a continuing run pays before its first request on a long thread: open the thread and
render the next request, on a fresh store object, with the store built once by
``bench/open_state.py``'s builder (its fold row carries the checkpoint of a request 6 lines
before the head, as a run leaves it).

Three ways, timed in turns: ``before`` reads, checks and folds the chain and renders every line
(a run without a usable row); ``checkpoint`` reads and folds the chain but renders on from the
request checkpoint in the fold row (``threads.store.fold_open.open_checkpoint``: a run whose
state the row can't serve); ``row`` opens as ``Agent.run`` now does on a quiet thread
(``threads.run.run_open.open_run``): the fold row, the lines from its checkpoint's request on
and the tail, checked, and the request rendered on from the checkpoint. All give the same
bytes (asserted). Prints the medians in ms and, with ``--profile``, the function calls and the
total time of one of each under cProfile.

Run: ``python bench/resume.py [--dir DIR] [--events N] [--rounds N] [--profile]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Literal

import open_state  # bench/open_state.py, beside this file
from threads import sqlite
from threads.log.fold.saved import RestoredFold
from threads.log.render import RenderCache, Rendered, render
from threads.run.run_open import open_run
from threads.store.fold_open import open_checkpoint

Way = Literal["before", "checkpoint", "row"]
WAYS: tuple[Way, ...] = ("before", "checkpoint", "row")


async def next_request(directory: Path, thread_id: str, way: Way) -> Rendered:
    """The request a continuing run renders first, on a fresh store object, opened ``way``."""
    store = sqlite(directory)
    try:
        root = await store.root_branch(thread_id)
        cache = RenderCache()
        if way == "row":
            opened = await open_run(store, root.branch_id, None, window=True, has_input=True)
            fold = opened.fold
            assert isinstance(fold, RestoredFold)
            assert opened.resumed is not None
            cache.resumed = opened.resumed
        else:
            fold = (await store.read_chain(root.branch_id)).fold(store.clock.now_ms())
        started = fold.thread_started
        assert started is not None
        if way == "checkpoint":
            cache.resumed = await open_checkpoint(store, root.branch_id, fold)
            assert cache.resumed is not None
        rendered = render(started, fold.events, {}, cache)
        assert cache.resumed is not None or way == "before"
        return rendered
    finally:
        await store.close()


async def timed(directory: Path, thread_id: str, way: Way) -> float:
    start = time.perf_counter_ns()
    await next_request(directory, thread_id, way)
    return (time.perf_counter_ns() - start) / 1e6


def profiled(directory: Path, thread_id: str, way: Way) -> tuple[int, float]:
    """Function calls and total seconds of one open + render under cProfile."""
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(next_request(directory, thread_id, way))
    profile.disable()
    stats = pstats.Stats(profile)
    return stats.total_calls, stats.total_tt  # type: ignore[attr-defined]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--dir", type=Path, help="where the store is built once and kept")
    parser.add_argument("--events", type=int, default=open_state.EVENTS, help="events imported")
    parser.add_argument("--rounds", type=int, default=9, help="opens timed (median printed)")
    parser.add_argument("--profile", action="store_true", help="cProfile one of each")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        directory = args.dir or Path(tmp)
        directory.mkdir(parents=True, exist_ok=True)
        thread_id = await open_state.build(directory, args.events)
        whole = await next_request(directory, thread_id, "before")
        for way in WAYS[1:]:
            other = await next_request(directory, thread_id, way)
            assert (bytes(other.body), other.sha256) == (bytes(whole.body), whole.sha256)
        times: dict[Way, list[float]] = {way: [] for way in WAYS}
        for _ in range(args.rounds):
            for way in WAYS:
                times[way].append(await timed(directory, thread_id, way))
        print(f"open + next request of a {args.events:,}-event thread ({whole.body.size:,}"
              f" request bytes), median of {args.rounds}:")
        labels = {"before": "chain read, every line rendered",
                  "checkpoint": "chain read, from the request checkpoint",
                  "row": "fold row + window + tail, from the checkpoint"}
        for way in WAYS:
            print(f"  {way:10} ({labels[way]}): {statistics.median(times[way]):7.1f} ms")
        if args.profile:
            for way in WAYS:
                calls, seconds = await asyncio.to_thread(profiled, directory, thread_id, way)
                print(f"  cProfile {way}: {calls:,} function calls, {seconds * 1e3:.1f} ms")

if __name__ == "__main__":
    asyncio.run(main())
