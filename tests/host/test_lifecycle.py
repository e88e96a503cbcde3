"""A host's stop and start: SIGTERM lets a running run finish within the grace period and
cancels one that doesn't (its lease released, its turn left open); the next start resumes the
open turn from its receipt, by itself."""

from __future__ import annotations

import asyncio
import re
import signal
import sqlite3
import subprocess
import sys
import uuid
from typing import Any

import pytest
from host_agents import agents
from host_support import HostServer, sse

from threads import Principal, open_thread
from threads.store.sqlite import sqlite
from threads.testing.fake_service import FakeService

ALICE = Principal(issuer="test", tenant="acme", subject="alice")

pytestmark = [pytest.mark.timed, pytest.mark.timeout(180)]


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
    said = [line.removeprefix("threads host: ") for line in err.splitlines()]
    assert said[-4:] == [
        "SIGTERM received: stopping (running runs get 2000 ms to finish)",
        "stopping: taking no new runs; 1 run(s) running may finish within 2 s, then are"
        " handed back",
        f"{accepted['thread_id']} handed back: cancelled by the host stopping, its lease"
        " released; its turn stays open and the next start continues it",
        "stopped: 0 run(s) finished in time, 1 handed back",
    ], err
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
    # (the run may end before the app's shutdown begins: then no run is running there)
    assert re.fullmatch(r"threads host: stopped: [01] run\(s\) finished in time, 0 handed back",
                        raw.decode().splitlines()[-1])
    assert types(server, branch)[-1] == "turn_completed"

    # 3. Started again: nothing is owed; the stream tells the end.
    server.start()
    alice = server.client()
    path = f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events"
    assert sse(alice, path)[-1]["data"]["result"] == {"status": "completed", "output": "waited"}
    assert types(server, branch).count("turn_completed") == 1


def test_start_resumes_threads_whose_parks_were_settled_while_it_was_down(
    server: HostServer,
) -> None:
    """Two payer threads wait on an approval: one started over HTTP, one by a library run on
    the same store. With the host down an operator approves both from the CLI; the next start
    finishes both by itself, each wire made exactly once."""
    alice = server.client()
    over_http = alice.post("/v1/runs", json={"agent": "payer", "input": "pay"},
                           headers={"idempotency-key": str(uuid.uuid4())}).json()
    path = f"/v1/threads/{over_http['thread_id']}/runs/{over_http['run_id']}/events"
    assert sse(alice, path)[-1]["data"]["result"]["status"] == "parked"
    library = asyncio.run(_library_run(server))
    assert library.status == "parked"
    challenges = {
        over_http["thread_id"]: alice.get(
            f"/v1/threads/{over_http['thread_id']}/approvals").json()[0]["challenge_id"],
        library.thread.id: asyncio.run(_challenge(server, library.thread.id)),
    }
    server.close_clients()
    server.stop(signal.SIGTERM)
    for thread_id, challenge in challenges.items():
        done = subprocess.run(
            [sys.executable, "-m", "threads.cli", "approve", thread_id, challenge, "--store",
             str(server.store), "--issuer", "test", "--tenant", "acme", "--subject", "alice"],
            capture_output=True, text=True, timeout=60, check=False,
        )
        assert done.returncode == 0, done.stderr

    server.start()
    alice = server.client()
    library_run = next(e for e in asyncio.run(_events(server, library.thread.id))
                       if e.type == "user_input")
    for thread_id, run_id in [(over_http["thread_id"], over_http["run_id"]),
                              (library.thread.id, library_run.event_id)]:
        result = sse(alice, f"/v1/threads/{thread_id}/runs/{run_id}/events")[-1]["data"]
        assert result["result"] == {"status": "completed", "output": "paid"}, thread_id
        events = asyncio.run(_events(server, thread_id))
        wires = [e for e in events if e.type == "tool_result" and e.data["origin"] == "executed"]
        assert len(wires) == 1, thread_id


async def _library_run(server: HostServer) -> Any:
    store = sqlite(server.store)
    try:
        payer = next(a for a in agents() if a.name == "payer")
        return await payer.run("pay", store=store, principal=ALICE)
    finally:
        await store.close()


async def _challenge(server: HostServer, thread_id: str) -> str:
    store = sqlite(server.store)
    try:
        (pending,) = await (await open_thread(store, thread_id)).pending_approvals()
        return str(pending.challenge_id)
    finally:
        await store.close()


async def _events(server: HostServer, thread_id: str) -> list[Any]:
    store = sqlite(server.store)
    try:
        return (await store.read_chain((await store.root_branch(thread_id)).branch_id)).events
    finally:
        await store.close()


def test_the_access_log_is_off_by_default_and_never_shows_a_token(
    server: HostServer, tmp_path: Any
) -> None:
    """``--access-log`` prints one line per request on stdout: time, client, method, path,
    status, duration; never the query string or a header, so never the bearer token."""
    server.close_clients()
    server.client().get("/v1/threads?secret=s3cr3t")
    server.stop(signal.SIGTERM)
    banner = f"threads host on {server.url} (operator console at /ui/)"
    assert server.stdout.splitlines() == [banner]

    logged = HostServer(server.store, server.tokens, server.service_port, options=["--access-log"])
    logged.start()
    try:
        alice = logged.client()
        assert alice.get("/v1/threads?q=s3cr3t").status_code == 200
        assert logged.client(token="wrong").get("/v1/threads/x%0Ay/timeline").status_code == 401
        assert alice.post("/v1/runs", content=b"{").status_code == 400
    finally:
        logged.close_clients()
        logged.stop(signal.SIGTERM)
    lines = logged.stdout.splitlines()[1:]
    when = r"\d{4}-\d\d-\d\dT[\d:.]+Z"
    expected = [("GET", "/openapi.json", 200), ("GET", "/v1/threads", 200),
                ("GET", "/v1/threads/x%0Ay/timeline", 401), ("POST", "/v1/runs", 400)]
    assert len(lines) == len(expected), lines
    for line, (method, path, status) in zip(lines, expected, strict=True):
        assert re.fullmatch(rf'{when} 127\.0\.0\.1 "{method} {re.escape(path)}" {status} \d+ ms',
                            line), line
    assert "s3cr3t" not in logged.stdout
    assert "alice-token" not in logged.stdout
    assert "wrong" not in logged.stdout
    server.start()  # the module's server, for the tests after this one
