"""Crash drill: a fold snapshot and the events it follows commit together or not at all
(issue 36). A real process appends a turn with its snapshot and is SIGKILLed after the
snapshot's row is written and before the transaction commits; a fresh store then holds
neither. Killed right after the commit instead, it holds both, and opening from the snapshot
gives the full fold's state."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from threads.log.fold.saved import RestoredFold
from threads.store.fold_open import open_fold
from threads.store.sqlite import sqlite

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


def killed_child(root: Path, point: str) -> tuple[str, int]:
    done = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), point],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr
    _, branch_id, first_head = done.stdout.split()
    return branch_id, int(first_head)


@pytest.mark.parametrize("point", ["row", "commit"])
def test_a_snapshot_and_its_events_commit_together(tmp_path: Path, point: str) -> None:
    branch_id, first_head = killed_child(tmp_path, point)

    async def after() -> None:
        store = sqlite(tmp_path)
        try:
            branch = await store.get_branch(branch_id)
            read = await store.read_tail(branch_id)
            full = (await store.read_chain(branch_id)).fold(0)
            if point == "row":  # neither the turn nor its snapshot
                assert branch.head_seq == first_head
                assert read is None
            else:  # both, and the open from the snapshot is the full fold
                assert branch.head_seq == first_head + 4
                assert read is not None
                assert read.snapshot.seq == branch.head_seq
                opened = await open_fold(store, branch_id, 0)
                assert isinstance(opened, RestoredFold)
                assert opened.state() == full.state()
        finally:
            await store.close()

    asyncio.run(after())
