"""Takeover drills in real processes: a holder SIGKILLed on this host is taken over at once.

A worker runs the drill agent's thread and waits inside its first tool (a service gate) while
it holds the lease; the parent SIGKILLs it and reruns the thread in a new process right away.
The rerun completes with no wait: the store proves the holder is gone (same boot id, hostname
and pid namespace; its pid no longer runs the process that started at the recorded start time)
while its lease is still live by the lease clock (the database's, on Postgres), which nobody
moves. A holder recorded on another host is not provably gone: the rerun gets ``branch_busy``
naming it and its expiry, and takes over once the lease expired by the (moved) clock.
The figures (kill to completed rerun) are printed in the drill summary.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drill_harness import KILLED, LEASE_PAST_MS, SUMMARY, write_atomic

from postgres_support import POSTGRES_MARKS, URL, drop_schema, execute, fetch_one, fresh_schema
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

TAKEOVER = Path(__file__).with_name("takeover.py")
LEASE_COLUMNS = "SELECT holder_id, epoch, expires_at FROM leases"


class Takeover:
    """One store (SQLite directory or Postgres schema), one clock file, the drill's processes."""

    def __init__(self, tmp: Path, service: FakeService, *, postgres: bool) -> None:
        self.service = service
        self.clock_file = tmp / "clock_offset_ms"
        self.offset = 0
        write_atomic(self.clock_file, "0")
        self.base: dict[str, Any] = {"port": service.port, "profile": "drill"}
        self.schema = fresh_schema() if postgres else None
        self.engine = "postgres" if postgres else "sqlite"
        if self.schema is not None:
            self.base.update(url=URL, schema=self.schema)
        else:
            self.base.update(store=str(tmp / "store"), clock_file=str(self.clock_file))

    def advance(self, ms: int) -> None:
        self.offset += ms
        write_atomic(self.clock_file, str(self.offset))

    def spawn(self, **fields: Any) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(TAKEOVER), "run", json.dumps({**self.base, **fields})],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )

    def run(self, **fields: Any) -> dict[str, Any]:
        proc = self.spawn(**fields)
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        return dict(json.loads(out.strip().splitlines()[-1]))

    def kill_holder(self, gate: str) -> tuple[int, float]:
        """Start a holder and SIGKILL it inside its first tool; its pid and the kill's time."""
        holder = self.spawn(input="go", label="holder", gate=gate)
        self.service.client().await_waiting(gate)
        holder.kill()
        killed_at = time.monotonic()
        holder.communicate(timeout=30)
        assert holder.returncode == KILLED
        self.service.client().open_gate(gate)  # nobody waits there any more
        return holder.pid, killed_at

    def one(self, query: str) -> tuple[Any, ...]:
        if self.schema is not None:
            row = fetch_one(self.schema, query)
        else:
            conn = sqlite3.connect(Path(self.base["store"]) / "threads.db")
            try:
                row = conn.execute(query).fetchone()
            finally:
                conn.close()
        assert row is not None, query
        return tuple(row)

    def lease_row(self) -> tuple[str, int, int]:
        holder_id, epoch, expires_at = self.one(LEASE_COLUMNS)
        return str(holder_id), int(epoch), int(expires_at)

    def lease_clock_ms(self) -> int:
        if self.schema is not None:
            return int(self.one("SELECT (extract(epoch from clock_timestamp()) * 1000)::bigint")[0])
        return time.time_ns() // 1_000_000 + self.offset

    def set_holder(self, holder_id: str) -> None:
        if self.schema is not None:
            execute(self.schema, "UPDATE leases SET holder_id = %s", (holder_id,))
            return
        conn = sqlite3.connect(Path(self.base["store"]) / "threads.db")
        try:
            with conn:
                conn.execute("UPDATE leases SET holder_id = ?", (holder_id,))
        finally:
            conn.close()

    def thread_id(self) -> str:
        return str(self.one("SELECT thread_id FROM threads")[0])


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=POSTGRES_MARKS)])
def drill(
    request: pytest.FixtureRequest, tmp_path: Path, service: FakeService
) -> Iterator[Takeover]:
    takeover = Takeover(tmp_path, service, postgres=request.param == "postgres")
    try:
        yield takeover
    finally:
        if takeover.schema is not None:
            asyncio.run(drop_schema(takeover.schema))


def test_a_killed_holder_is_taken_over_at_once(drill: Takeover) -> None:
    pid, killed_at = drill.kill_holder(f"takeover-{drill.engine}")
    holder_id, epoch, expires_at = drill.lease_row()
    assert json.loads(holder_id)["pid"] == pid
    rerun = drill.run(thread=drill.thread_id(), input=None, label="rerun")
    done_at = time.monotonic()
    assert rerun["status"] == "completed", rerun
    assert drill.lease_clock_ms() < expires_at, "the dead holder's lease had not expired yet"
    holder_id_after, new_epoch, _ = drill.lease_row()
    assert new_epoch == epoch + 1
    assert json.loads(holder_id_after)["pid"] != pid
    assert drill.offset == 0, "nobody moved the clock"
    served = drill.service.client().snapshot()["log"]
    assert {entry["who"] for entry in served if entry.get("kind") != "lookup"} <= {"rerun"}
    SUMMARY.append(
        f"takeover ({drill.engine}): SIGKILLed holder taken over at once; kill to completed rerun"
        f" {done_at - killed_at:.2f} s (in a new process; lease ttl 30 s, still live)"
    )


def test_a_holder_on_another_host_is_waited_for(drill: Takeover) -> None:
    pid, _ = drill.kill_holder(f"takeover-remote-{drill.engine}")
    holder_id, _, _ = drill.lease_row()
    elsewhere = {**json.loads(holder_id), "boot": "another-boot", "host": "far-away"}
    drill.set_holder(json.dumps(elsewhere))
    early = drill.run(thread=drill.thread_id(), input=None, label="early")
    assert early["status"] == "failed", early
    assert early["error"] == "branch_busy"
    assert f"pid {pid} on host far-away" in early["message"]
    assert re.search(r"expires in \d+\.\d s", early["message"]), early["message"]
    if drill.schema is not None:
        execute(drill.schema, "UPDATE leases SET expires_at = 0")  # its lease is over
    else:
        drill.advance(LEASE_PAST_MS)
    taken = drill.run(thread=drill.thread_id(), input=None, label="taker")
    assert taken["status"] == "completed", taken
