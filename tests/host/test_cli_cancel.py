"""``threads cancel`` from a shell while a host runs the thread: the CLI can't take the lease,
so it checks the operator's authority and queues the cancel (an inbox control item); the host
records it at its next step and the run ends cancelled."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest
from host_support import HostServer, sse

from threads.testing.fake_service import FakeService

pytestmark = [pytest.mark.race, pytest.mark.timeout(120)]


def test_threads_cancel_queues_for_the_host_running_the_thread(
    server: HostServer, service: FakeService
) -> None:
    gate = service.client()
    alice = server.client()
    accepted = alice.post("/v1/runs", json={"agent": "waiter", "input": "wait"},
                          headers={"idempotency-key": str(uuid.uuid4())}).json()
    tid = accepted["thread_id"]
    gate.await_waiting("g")
    argv = [sys.executable, "-m", "threads.cli", "cancel", tid, "--store", str(server.store),
            "--issuer", "test", "--tenant", "acme"]
    refused = subprocess.run([*argv, "--subject", "bob"], capture_output=True, text=True,
                             timeout=60, check=False)
    assert refused.returncode == 1
    assert "forbidden" in refused.stderr
    done = subprocess.run([*argv, "--subject", "alice", "--reason", "wrong customer"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert "cancel queued" in done.stdout
    assert "the reason was not recorded" in done.stdout  # said, not silently dropped
    gate.open_gate("g")
    messages = sse(alice, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "cancelled"}
