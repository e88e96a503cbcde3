"""Several hosts on one Postgres store: a run started on host A is followed and decided on host
B, which continues it by itself; a retried POST on B replays A's receipt; A's stream sees the
end B wrote. Each host is a real uvicorn process on loopback, both on one fresh schema."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from host_support import HERE, TOKENS, HostServer, free_port, sse

pytestmark = [pytest.mark.race, pytest.mark.timeout(180)]

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres  # noqa: E402


@pytest.fixture
def two_hosts(tmp_path: Path, service: object) -> Iterator[tuple[HostServer, HostServer]]:
    schema = fresh_schema()
    tokens = tmp_path / "tokens.json"
    tokens.write_text(json.dumps(TOKENS))
    hosts = []
    for _ in range(2):
        port = free_port()
        hosts.append(HostServer(
            tmp_path, tokens, service.port,  # type: ignore[attr-defined]
            port=port, argv=[sys.executable, str(HERE / "pg_host.py"), URL, schema, str(port),
                             str(tokens)],
        ))
    try:
        hosts[0].start()  # the first creates the schema; the second opens it
        hosts[1].start()
        yield hosts[0], hosts[1]
    finally:
        for h in hosts:
            h.close_clients()
            if h.process is not None:
                h.stop()
        asyncio.run(drop_schema(schema))


@needs_postgres
def test_start_on_one_host_decide_on_another(two_hosts: tuple[HostServer, HostServer]) -> None:
    a, b = two_hosts
    on_a, on_b = a.client(), b.client()
    key = str(uuid.uuid4())
    body = {"agent": "payer", "input": "pay"}
    accepted = on_a.post("/v1/runs", json=body, headers={"idempotency-key": key}).json()
    tid, run_id = accepted["thread_id"], accepted["run_id"]
    replay = on_b.post("/v1/runs", json=body, headers={"idempotency-key": key})
    assert (replay.status_code, replay.json()) == (202, accepted)

    events_path = f"/v1/threads/{tid}/runs/{run_id}/events"
    parked = sse(on_b, events_path)  # B follows a run A executes (polled across processes)
    assert parked[-1]["data"]["result"]["status"] == "parked"
    (pending,) = on_b.get(f"/v1/threads/{tid}/approvals").json()
    granted = on_b.post(f"/v1/threads/{tid}/approvals/{pending['challenge_id']}",
                        json={"decision": "grant"})
    assert granted.status_code == 200, granted.text
    done = sse(on_a, events_path)  # B continued the thread; A's stream sees it end
    assert done[-1]["data"]["result"] == {"status": "completed", "output": "paid"}
    ids = [m["id"] for m in done if m["id"] is not None]
    assert ids == list(range(ids[0], ids[-1] + 1))
    assert on_b.get(f"/v1/threads/{tid}/timeline").json() == on_a.get(
        f"/v1/threads/{tid}/timeline").json()


@needs_postgres
def test_cancel_on_one_host_of_a_run_another_executes(
    two_hosts: tuple[HostServer, HostServer], service: object
) -> None:
    """The waiter runs on A; B queues the cancel (202, once) in the shared inbox; A records it
    at its next step boundary and the run ends cancelled, seen from both hosts."""
    a, b = two_hosts
    on_a, on_b = a.client(), b.client()
    gate = service.client()  # type: ignore[attr-defined]
    accepted = on_a.post("/v1/runs", json={"agent": "waiter", "input": "wait"},
                         headers={"idempotency-key": str(uuid.uuid4())}).json()
    tid = accepted["thread_id"]
    gate.await_waiting("g")
    queued = on_b.post(f"/v1/threads/{tid}/cancel")
    assert queued.status_code == 202, queued.text
    assert on_b.post(f"/v1/threads/{tid}/cancel").json() == queued.json()
    gate.open_gate("g")
    path = f"/v1/threads/{tid}/runs/{accepted['run_id']}/events"
    assert sse(on_b, path)[-1]["data"]["result"] == {"status": "cancelled"}
    events = [e["event"] for e in on_a.get(f"/v1/threads/{tid}/timeline").json()["entries"]]
    assert [e["type"] for e in events].count("cancel_requested") == 1
