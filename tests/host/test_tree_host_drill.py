"""Tree host drill: a grant recorded over HTTP on a subagent's thread makes the host continue
the tree's root (digest §6.2), whose run reruns the child; the host is SIGKILLed while that
child's charge is in flight (before, or after, the service applied it) and started again on
the same store. Its start must find the child's work and continue the root (never the child
alone): the charge applied once, the email once, the root's turn ended ``end_turn`` with one
child, and a further restart appends nothing.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from host_support import TOKENS, HostServer, sse
from test_host_drill import expire_leases

from threads.testing.fake_service import FakeService

pytestmark = [pytest.mark.drill, pytest.mark.timeout(300)]
DEADLINE_S = 60.0


def lines(store: Path) -> list[dict[str, Any]]:
    conn = sqlite3.connect(store / "threads.db")
    try:
        rows = conn.execute("SELECT line FROM events ORDER BY branch_id, seq").fetchall()
    finally:
        conn.close()
    return [json.loads(line) for (line,) in rows]


def root_done(store: Path, root: str) -> bool:
    mine = [e for e in lines(store) if e["thread_id"] == root]
    return bool(mine) and mine[-1]["type"] == "turn_completed"


@pytest.mark.parametrize("at", ["before", "after"])
def test_host_killed_while_continuing_the_root_after_a_grant(tmp_path: Path, at: str) -> None:
    service = FakeService.start()
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    gate = f"tree-{at}"
    server = HostServer(tmp_path / "store", tokens, service.port, module="tree_agents:agents",
                        extra_env={"THREADS_TREE_GATE": gate, "THREADS_TREE_AT": at})
    try:
        server.start()
        alice = server.client()
        started = alice.post("/v1/runs", json={"agent": "lead", "input": "Refund 42"},
                             headers={"idempotency-key": "tree-1"})
        assert started.status_code == 202, started.text
        run = started.json()
        root = run["thread_id"]
        result = sse(alice, f"/v1/threads/{root}/runs/{run['run_id']}/events")[-1]["data"]
        assert result["result"]["status"] == "parked", result
        [child] = [e["data"]["child_thread_id"] for e in lines(server.store)
                   if e["type"] == "agent_spawned"]
        [approval] = alice.get(f"/v1/threads/{child}/approvals").json()
        granted = alice.post(f"/v1/threads/{child}/approvals/{approval['challenge_id']}",
                             json={"decision": "grant"})
        assert granted.status_code < 300, granted.text
        service.client().await_waiting(gate)  # the root's run reran the child: mid-charge
        server.stop(signal.SIGKILL)
        server.close_clients()
        charged_at_kill = sum(service.client().snapshot()["counts"].values())
        assert charged_at_kill == (1 if at == "after" else 0)

        expire_leases(server.store)
        server.extra_env = {}
        server.start()
        began = time.monotonic()
        while not root_done(server.store, root):  # the restarted host works on its own
            assert time.monotonic() - began < DEADLINE_S, "the host did not continue the root"
            time.sleep(0.05)
        server.stop()
        events = lines(server.store)
        assert len({e["thread_id"] for e in events}) == 2  # the root and its one child
        mine = [e for e in events if e["thread_id"] == root]
        assert mine[-1]["data"] == {"reason": "end_turn"}
        [finished] = [e for e in mine if e["type"] == "agent_finished"]
        assert finished["data"]["status"] == "completed"
        counts = service.client().snapshot()["counts"]
        assert sorted(counts.values()) == [1, 1], counts  # charged once, emailed once
        before = lines(server.store)
        server.start()
        server.stop()
        assert lines(server.store) == before, "a restart after the recovery appended"
    finally:
        if server.process is not None:
            server.stop(signal.SIGKILL)
        service.stop()
