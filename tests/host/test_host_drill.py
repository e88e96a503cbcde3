"""Host crash drill: runs started over HTTP with effectful tools; the host is SIGKILLed at a
random moment mid-run and started again on the same store.

After the restart every run must finish or park with a reason, no effect may have been applied
twice (the fake service, in its own process, counts applications per effect key), a retried
POST with the same key must replay the same run, and an SSE client cut by the kill that
reconnects with ``Last-Event-ID`` must get the rest of its run with no gap and no duplicate.
The dead host's leases are expired by editing the lease rows (no waiting on a clock).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest
from host_support import TOKENS, HostServer, parse_sse, sse

from threads.testing.fake_service import FakeService

pytestmark = [pytest.mark.drill, pytest.mark.timeout(300)]
SUMMARY: list[str] = []
RUNS_PER_ROUND = 6
SEEDS = (11, 12, 13, 14)


class Follower(threading.Thread):
    """Reads one run's stream until the connection ends; keeps every message it got. With
    ``kill`` = (n, pid) it SIGKILLs the host as soon as it holds the run's nth event."""

    def __init__(
        self, url: str, path: str, after: int | None = None, kill: tuple[int, int] | None = None
    ) -> None:
        super().__init__(daemon=True)
        self.url, self.path, self.after, self.kill = url, path, after, kill
        self.messages: list[dict[str, Any]] = []

    def run(self) -> None:
        headers = {"authorization": "Bearer alice-token"}
        if self.after is not None:
            headers["last-event-id"] = str(self.after)
        try:
            with httpx.Client(base_url=self.url, timeout=60) as client, client.stream(
                "GET", self.path, headers=headers
            ) as response:
                for message in parse_sse(response.iter_lines()):
                    self.messages.append(message)
                    if self.kill is not None and len(self.messages) == self.kill[0]:
                        os.kill(self.kill[1], signal.SIGKILL)
        except httpx.HTTPError:
            pass  # the host died under us: what we got is what we keep


def expire_leases(store: Path) -> None:
    conn = sqlite3.connect(store / "threads.db")
    try:
        with conn:
            conn.execute("UPDATE leases SET expires_at = 0")
    finally:
        conn.close()


def run_events(store: Path, branch_id: str, run_seq: int) -> list[tuple[int, str]]:
    conn = sqlite3.connect(store / "threads.db")
    try:
        rows = conn.execute(
            "SELECT seq, type FROM events WHERE branch_id = ? AND seq >= ? ORDER BY seq",
            (branch_id, run_seq),
        ).fetchall()
    finally:
        conn.close()
    return [(int(seq), str(kind)) for seq, kind in rows]


def turn_reason(store: Path, branch_id: str) -> str:
    conn = sqlite3.connect(store / "threads.db")
    try:
        (line,) = conn.execute(
            "SELECT line FROM events WHERE branch_id = ? AND type = 'turn_completed'"
            " ORDER BY seq DESC LIMIT 1", (branch_id,),
        ).fetchone()
    finally:
        conn.close()
    return str(json.loads(line)["data"]["reason"])


@pytest.mark.parametrize("seed", SEEDS)
def test_host_sigkill_mid_run(tmp_path: Path, seed: int) -> None:
    choose = random.Random(seed)
    service = FakeService.start()
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    server = HostServer(tmp_path / "store", tokens, service.port, module="drill_agents:agents")
    try:
        server.start()
        alice = server.client()
        keys = [f"drill-{seed}-{n}" for n in range(RUNS_PER_ROUND)]
        body = {"agent": "drill", "input": "refund order 42"}
        accepted: dict[str, dict[str, Any]] = {}
        kill_after = choose.randint(2, 25)  # the followed run's events before the kill
        response = alice.post("/v1/runs", json=body, headers={"idempotency-key": keys[0]})
        assert response.status_code == 202, response.text
        a = accepted[keys[0]] = response.json()
        assert server.process is not None
        follower = Follower(server.url, f"/v1/threads/{a['thread_id']}/runs/{a['run_id']}/events",
                            kill=(kill_after, server.process.pid))
        follower.start()
        for key in keys[1:]:  # the kill lands somewhere in here, or in the runs after
            try:
                response = alice.post("/v1/runs", json=body, headers={"idempotency-key": key})
            except httpx.HTTPError:
                break  # the host died: the client retries after the restart
            if response.status_code == 202:
                accepted[key] = response.json()
        follower.join(timeout=60)
        assert server.stop(signal.SIGKILL) is not None  # reaped (killed by the follower)
        server.close_clients()
        cut = [m for m in follower.messages if m["id"] is not None]
        finished_before_kill = any(m["data"]["kind"] == "result" for m in follower.messages)

        expire_leases(server.store)
        server.start()
        alice = server.client()
        outcomes: dict[str, str] = {}
        for key in keys:  # the client retries every POST with its key: the same run comes back
            again = alice.post("/v1/runs", json=body, headers={"idempotency-key": key})
            assert again.status_code == 202, again.text
            assert accepted.setdefault(key, again.json()) == again.json()
            a = accepted[key]
            messages = sse(alice, f"/v1/threads/{a['thread_id']}/runs/{a['run_id']}/events")
            result = messages[-1]["data"]
            assert result["kind"] == "result"
            status = result["result"]["status"]
            if status == "parked":
                assert result["result"]["reason"] == "effect_unknown"
                assert result["result"]["pending"]
            elif status == "failed":  # recovery closed a turn the crash left with nothing open
                tail = run_events(server.store, a["branch_id"], 1)[-1]
                assert tail[1] == "turn_completed"
                assert turn_reason(server.store, a["branch_id"]) == "interrupted"
            else:
                assert status == "completed", result
            outcomes[key] = status if status != "failed" else "interrupted"

        # The cut stream, resumed from the last id it saw: the rest, no gap, no duplicate.
        first = accepted[keys[0]]
        path = f"/v1/threads/{first['thread_id']}/runs/{first['run_id']}/events"
        resumed = Follower(server.url, path, after=cut[-1]["id"] if cut else 0)
        resumed.run()
        ids = [m["id"] for m in cut + resumed.messages if m["id"] is not None]
        assert resumed.messages[-1]["data"]["kind"] == "result"
        branch_events = run_events(server.store, first["branch_id"], ids[0])
        end = next((i for i, (_, kind) in enumerate(branch_events) if kind == "turn_completed"),
                   len(branch_events) - 1)
        assert ids == [seq for seq, _ in branch_events[: end + 1]]

        counts = service.client().snapshot()["counts"]
        duplicates = {key: n for key, n in counts.items() if n > 1}
        assert duplicates == {}
        SUMMARY.append(
            f"host drill seed={seed}: runs={len(keys)} kills=1 kill_after_events={kill_after}"
            f" completed={sum(s == 'completed' for s in outcomes.values())}"
            f" parked={sum(s == 'parked' for s in outcomes.values())}"
            f" interrupted={sum(s == 'interrupted' for s in outcomes.values())}"
            f" effects={sum(counts.values())} duplicates={len(duplicates)}"
            f" stream_cut_at={len(cut)} resumed={len(ids) - len(cut)}"
            f"{' (run had ended before the kill)' if finished_before_kill else ''}"
        )
    finally:
        server.close_clients()
        if server.process is not None:
            server.stop()
        service.stop()
