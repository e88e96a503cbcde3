"""A cancel for a run another process holds: two ``threads serve`` processes on one store. The
run executes on host A; host B, asked to cancel, queues a control item and answers 202
``CancelAccepted`` (once per thread: asking again answers the same item); host A records the
``cancel_requested`` at its next step boundary, consuming the item in that append, and the
run ends cancelled."""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Iterator

import pytest
from host_support import HostServer, sse

from threads.run.queued_controls import QUEUED_REASON
from threads.testing.fake_service import FakeService

pytestmark = [pytest.mark.race, pytest.mark.timeout(120)]


@pytest.fixture
def second(server: HostServer, service: FakeService) -> Iterator[HostServer]:
    other = HostServer(server.store, server.tokens, service.port)
    other.start()
    try:
        yield other
    finally:
        other.close_clients()
        other.stop()


def inbox(server: HostServer) -> list[tuple[str, bytes, int | None]]:
    conn = sqlite3.connect(server.store / "threads.db")
    try:
        rows = conn.execute("SELECT item_key, item, consumed_seq FROM inbox").fetchall()
    finally:
        conn.close()
    return [(str(k), bytes(i), c) for k, i, c in rows]


def test_a_cancel_on_another_host_is_queued_and_applied_by_the_holder(
    server: HostServer, second: HostServer, service: FakeService
) -> None:
    gate = service.client()
    on_a, on_b = server.client(), second.client()
    accepted = on_a.post("/v1/runs", json={"agent": "waiter", "input": "wait"},
                         headers={"idempotency-key": str(uuid.uuid4())}).json()
    tid = accepted["thread_id"]
    gate.await_waiting("g")
    assert on_b.post(f"/v1/threads/{tid}/cancel", headers={
        "authorization": "Bearer bob-token"}).status_code == 403  # authority before queueing
    queued = on_b.post(f"/v1/threads/{tid}/cancel")
    assert queued.status_code == 202, queued.text
    key = queued.json()["item_key"]
    assert on_b.post(f"/v1/threads/{tid}/cancel").json() == {"item_key": key}
    [(item_key, item, consumed)] = inbox(server)
    assert (item_key, consumed) == (key, None)
    assert json.loads(item) == {
        "address": tid, "command": "cancel", "item_key": key, "kind": "control",
        "principal": {"issuer": "test", "subject": "alice", "tenant": "acme"}}

    gate.open_gate("g")  # the tool returns; host A reaches its next step boundary
    messages = sse(on_a, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "cancelled"}
    events = [m["data"]["event"] for m in messages if m["data"]["kind"] == "event"]
    cancels = [e for e in events if e["type"] == "cancel_requested"]
    assert len(cancels) == 1
    assert cancels[0]["actor"]["principal"]["subject"] == "alice"
    assert cancels[0]["data"]["reason"] == QUEUED_REASON
    assert inbox(server) == [(key, item, cancels[0]["seq"])]  # consumed by that append

