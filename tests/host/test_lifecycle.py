"""A host's stop and start: SIGTERM lets a running run finish within the grace period and
cancels one that doesn't (its lease released, its turn left open); the next start resumes the
open turn from its receipt, by itself."""

from __future__ import annotations

import signal
import sqlite3
import subprocess
import uuid

import pytest
from host_support import HostServer, sse

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.timeout(180)


def lease_expiry(server: HostServer, branch_id: str) -> int:
    conn = sqlite3.connect(server.store / "threads.db")
    try:
        (expires_at,) = conn.execute(
            "SELECT expires_at FROM leases WHERE branch_id = ?", (branch_id,)
        ).fetchone()
    finally:
        conn.close()
    return int(expires_at)


def types(server: HostServer, branch_id: str) -> list[str]:
    conn = sqlite3.connect(server.store / "threads.db")
    try:
        rows = conn.execute(
            "SELECT type FROM events WHERE branch_id = ? ORDER BY seq", (branch_id,)
        ).fetchall()
    finally:
        conn.close()
    return [str(t) for (t,) in rows]


def test_sigterm_grace_cancel_and_resume_on_start(
    server: HostServer, service: FakeService
) -> None:
    gate = service.client()
    alice = server.client()
    accepted = alice.post("/v1/runs", json={"agent": "waiter", "input": "wait"},
                          headers={"idempotency-key": str(uuid.uuid4())}).json()
    branch = accepted["branch_id"]
    gate.await_waiting("g", 1)

    # 1. SIGTERM while the run waits and nobody opens the gate: cancelled after the grace.
    server.close_clients()
    err = server.stop(signal.SIGTERM)
    assert "cancelled by the host stopping" in err
    assert lease_expiry(server, branch) == 0  # handed back, not left to lapse
    assert "turn_completed" not in types(server, branch)

    # 2. The next start resumes the open turn by itself; SIGTERM again, and this time the
    # run finishes within the grace period.
    server.start()
    gate.await_waiting("g", 2)
    assert server.process is not None
    server.process.send_signal(signal.SIGTERM)
    gate.open_gate("g")
    try:
        _, raw = server.process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        server.process.kill()
        raise
    server.process = None
    assert "cancelled" not in raw.decode()
    assert types(server, branch)[-1] == "turn_completed"

    # 3. Started again: nothing is owed; the stream tells the end.
    server.start()
    alice = server.client()
    path = f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events"
    assert sse(alice, path)[-1]["data"]["result"] == {"status": "completed", "output": "waited"}
    assert types(server, branch).count("turn_completed") == 1
