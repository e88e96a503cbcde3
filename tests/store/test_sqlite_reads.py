"""SQLite-only: a chain read is one snapshot, so another process appending mid-read can't make
a healthy branch look corrupt (head read before the append, lines after it)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from threads.clock import FakeClock
from threads.store import flows
from threads.store.sqlite import sqlite
from threads.testing.sample_log import USER, SampleLog


async def test_append_by_another_process_mid_read_is_not_log_corrupt(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path, clock=clock)
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id="acme")
    lease = await store.acquire_lease(log.header.branch_id, "runner-1", 30_000)
    log.epoch = lease.epoch
    await store.append(log.header.branch_id, [log.started()], expected_seq=0, lease=lease)
    late = log.add("user_input", {"source": "api", "text": "appended mid-read"}, USER)
    read_lines = flows.lines

    def commit_elsewhere_then_read(*args: Any) -> flows.Flow[list[bytes]]:
        other = sqlite3.connect(tmp_path / "threads.db", isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        other.execute(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (log.header.branch_id, late.seq, late.event_id, late.type, 1, 1, late.epoch,
             late.line),
        )
        other.execute(
            "UPDATE branches SET head_seq = ?, head_hash = ? WHERE branch_id = ?",
            (late.seq, late.hash, log.header.branch_id),
        )
        other.execute("COMMIT")
        other.close()
        monkeypatch.setattr(flows, "lines", read_lines)
        return read_lines(*args)

    # Called by the read's flow inside its transaction, after it read the head.
    monkeypatch.setattr(flows, "lines", commit_elsewhere_then_read)
    try:
        first = await store.read_chain(log.header.branch_id)  # the snapshot before the append
        assert [e.seq for e in first.events] == [1]
        second = await store.read_chain(log.header.branch_id)
        assert [e.seq for e in second.events] == [1, 2]
    finally:
        await store.close()
