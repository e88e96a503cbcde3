"""What a continuing run pays before its first request on a long thread: open the thread (read
the chain, check it, fold it) and render the next request, on a fresh store object, with the
store built once by ``bench/open_state.py``'s builder (its fold row carries the checkpoint of a
request 6 lines before the head, as a run leaves it).

Two ways, timed in turns: ``before`` renders every line of the log (what a run did before the
request checkpoint, and does without one); ``after`` renders on from the checkpoint in the
branch's fold row (``threads.store.fold_open.open_checkpoint``), as ``Agent.run`` now does.
Both give the same bytes (asserted). Prints the medians in ms and, with ``--profile``, the
function calls and the total time of one of each under cProfile.

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

import open_state  # bench/open_state.py, beside this file
from threads import sqlite
from threads.log.render import RenderCache, Rendered, render
from threads.store.fold_open import open_checkpoint


async def next_request(directory: Path, thread_id: str, *, checkpoint: bool) -> Rendered:
    """The request a continuing run renders first, the log read and folded on a fresh store
    object; from the fold row's checkpoint when ``checkpoint``, else from every line."""
    store = sqlite(directory)
    try:
        root = await store.root_branch(thread_id)
        fold = (await store.read_chain(root.branch_id)).fold(store.clock.now_ms())
        started = fold.thread_started
        assert started is not None
        cache = RenderCache()
        if checkpoint:
            cache.resumed = await open_checkpoint(store, root.branch_id, fold)
            assert cache.resumed is not None
        rendered = render(started, fold.events, {}, cache)
        assert cache.resumed is not None or not checkpoint
        return rendered
    finally:
        await store.close()


async def timed(directory: Path, thread_id: str, *, checkpoint: bool) -> float:
    start = time.perf_counter_ns()
    await next_request(directory, thread_id, checkpoint=checkpoint)
    return (time.perf_counter_ns() - start) / 1e6


def profiled(directory: Path, thread_id: str, *, checkpoint: bool) -> tuple[int, float]:
    """Function calls and total seconds of one open + render under cProfile."""
    profile = cProfile.Profile()
    profile.enable()
    asyncio.run(next_request(directory, thread_id, checkpoint=checkpoint))
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
        whole = await next_request(directory, thread_id, checkpoint=False)
        resumed = await next_request(directory, thread_id, checkpoint=True)
        assert (bytes(resumed.body), resumed.sha256) == (bytes(whole.body), whole.sha256)
        before, after = [], []
        for _ in range(args.rounds):
            before.append(await timed(directory, thread_id, checkpoint=False))
            after.append(await timed(directory, thread_id, checkpoint=True))
        print(f"open + next request of a {args.events:,}-event thread ({whole.body.size:,}"
              f" request bytes), median of {args.rounds}:")
        print(f"  before (every line rendered):     {statistics.median(before):7.1f} ms")
        print(f"  after (from the request checkpoint): {statistics.median(after):7.1f} ms")
        if args.profile:
            for name, flag in (("before", False), ("after", True)):
                calls, seconds = await asyncio.to_thread(
                    profiled, directory, thread_id, checkpoint=flag
                )
                print(f"  cProfile {name}: {calls:,} function calls, {seconds * 1e3:.1f} ms")


if __name__ == "__main__":
    asyncio.run(main())
