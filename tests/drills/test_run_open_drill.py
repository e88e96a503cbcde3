"""Crash drill: a continuing run opened from the fold row (``threads.run.run_open``), SIGKILLed
in a real process between a fold row's write and its append's commit, just after that commit,
or at a random time. The store then holds a chain that reads and checks whole, a fold row (if
any) at one of its lines, and the next run continues it: with the row and without it, it writes
the same lines (ids made deterministic, on copies of the killed store), sends the request the
whole log renders, and records no input or call twice."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from run_open_support import Reads, continued_both_ways
from threads import sqlite
from threads.log.render import render
from threads.log.vocabulary import data_of

pytestmark = pytest.mark.timeout(120)

TESTS = Path(__file__).resolve().parent.parent
TURNS = [["look", "put"], ["two"], ["say"]]
KILLED_TURN = ["look", "put", "two", "look"]

# The child: three turns (fold rows every 4 events, each carrying a request checkpoint), then a
# fourth run, opened from the row, that dies at ``row`` (a fold row written, not committed),
# ``commit`` (just after an append with a fold row committed) or ``random`` (before or after a
# random one of its appends).
CHILD = textwrap.dedent(
    """
    import asyncio, json, os, random, signal, sys
    sys.path.insert(0, sys.argv[4])
    import threads.run.runner as runner
    import threads.store.fold_open as fold_open
    from threads import FakeClock
    from threads.log.fold.saved import RestoredFold
    from threads.store.sqlite.store import SQLiteStore
    from run_open_support import NOW, bot

    root, point, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    TURNS, KILLED_TURN = json.loads(sys.argv[5])
    fold_open.SNAPSHOT_EVERY = 4
    armed = False
    appends = 0
    rng = random.Random(seed)
    kill_at, before = rng.randint(1, 8), rng.random() < 0.5  # the append, and which side

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    class Dying(SQLiteStore):
        def _put_snapshots(self, conn, snapshots):
            super()._put_snapshots(conn, snapshots)
            if armed and point == "row" and any(s.kind == "fold" for s in snapshots):
                die()

        async def append(self, branch_id, events, **kwargs):
            global appends
            if armed:
                appends += 1
            if armed and point == "random" and appends == kill_at and before:
                die()
            done = await super().append(branch_id, events, **kwargs)
            if armed and point == "random" and appends == kill_at:
                die()
            if armed and point == "commit" and any(
                s.kind == "fold" for s in kwargs.get("snapshots", ())
            ):
                die()
            return done

    real_open = runner.open_run

    async def open_run(*args, **kwargs):
        opened = await real_open(*args, **kwargs)
        if armed:
            print("from the row" if isinstance(opened.fold, RestoredFold) else "whole",
                  flush=True)
        return opened

    runner.open_run = open_run

    async def main():
        global armed
        store = Dying(root, clock=FakeClock(NOW))
        thread_id = None
        for n in range(len(TURNS)):
            result = await bot(TURNS[: n + 1]).run(f"turn {n}", thread=thread_id, store=store)
            thread_id = result.thread.id
        print(thread_id, flush=True)
        armed = True
        await bot([*TURNS, KILLED_TURN]).run("and again", thread=thread_id, store=store)
        die()

    asyncio.run(main())
    """
)


def killed(root: Path, point: str, seed: int) -> tuple[str, list[str]]:
    """The thread the child built, and what it said once armed."""
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), point, str(seed), str(TESTS),
         json.dumps([TURNS, KILLED_TURN])],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    thread_id, *said = done.stdout.splitlines()
    return thread_id, said


async def check_killed_store(root: Path, thread_id: str) -> None:
    """The chain reads and checks whole; the fold row, if any, is at one of its lines."""
    store = sqlite(root)
    try:
        branch = await store.root_branch(thread_id)
        events = (await store.read_chain(branch.branch_id)).events
        row = await store.read_fold_row(branch.branch_id)
        if row is not None:
            at = next(e for e in events if e.seq == row.seq)
            assert at.hash == row.head_hash
    finally:
        await store.close()


async def check_continued(root: Path, thread_id: str, head_before: int) -> None:
    """Each request the continuing run sent is the whole log's render; no input, call or
    result is recorded twice."""
    store = sqlite(root)
    try:
        branch = await store.root_branch(thread_id)
        events = (await store.read_chain(branch.branch_id)).events
    finally:
        await store.close()
    started = events[0].data
    for at, event in enumerate(events):
        if event.type == "model_request" and event.seq > head_before:
            sent = data_of(event, "model_request")["request_ref"]["sha256"]
            assert sent == render(started, events[:at]).sha256
    inputs = Counter(data_of(e, "user_input").get("text") for e in events
                     if e.type == "user_input")
    # the next input waits while the killed turn can't end (a put left in doubt parks it)
    assert inputs["and again"] <= 1
    assert inputs["and now"] <= 1
    calls = Counter(data_of(e, "tool_call")["call_id"] for e in events if e.type == "tool_call")
    results = Counter(data_of(e, "tool_result")["call_id"] for e in events
                      if e.type == "tool_result")
    assert set(calls.values()) <= {1}
    assert set(results.values()) <= {1}


async def head_of(root: Path, thread_id: str) -> int:
    store = sqlite(root)
    try:
        return (await store.root_branch(thread_id)).head_seq
    finally:
        await store.close()


@pytest.mark.parametrize(("point", "seed"), [
    ("row", 0), ("commit", 0), *(("random", seed) for seed in range(10)),
])
def test_a_run_opened_from_the_row_killed_anywhere_is_continued(
    tmp_path: Path, point: str, seed: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = tmp_path / "base"
    thread_id, said = killed(base, point, seed)
    assert said[:1] == ["from the row"]  # the killed run was opened from the row
    reads = Reads(monkeypatch)

    async def after() -> None:
        await check_killed_store(base, thread_id)
        head = await head_of(base, thread_id)
        await continued_both_ways(tmp_path, thread_id, [*TURNS, KILLED_TURN, ["look"]], reads)
        await check_continued(tmp_path / "row", thread_id, head)

    asyncio.run(after())
