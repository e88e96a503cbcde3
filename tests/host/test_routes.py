"""Every route of the host on a real ``threads serve`` (uvicorn on loopback): its success, each
of its refusal codes, tenancy (another tenant's thread is 404) and authority (a principal of
the right tenant without it is 403, and nothing is appended)."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import httpx
import pytest
from host_support import HostServer, sse

from threads.store.sqlite import sqlite

pytestmark = pytest.mark.timeout(120)


def start(client: httpx.Client, body: dict[str, Any], key: str | None = None) -> httpx.Response:
    return client.post("/v1/runs", json=body, headers={"idempotency-key": key or str(uuid.uuid4())})


def run_to_end(client: httpx.Client, body: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    response = start(client, body)
    assert response.status_code == 202, response.text
    accepted = response.json()
    messages = sse(client, f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["kind"] == "result"
    return accepted, messages[-1]["data"]["result"]


def code(response: httpx.Response) -> tuple[int, str]:
    body = response.json()
    assert set(body) == {"error"}
    assert set(body["error"]) == {"code", "message"}
    return response.status_code, body["error"]["code"]


def timeline(client: httpx.Client, thread_id: str) -> list[dict[str, Any]]:
    response = client.get(f"/v1/threads/{thread_id}/timeline")
    assert response.status_code == 200
    return [entry["event"] for entry in response.json()["entries"]]


def test_every_v1_route_is_401_without_a_principal(server: HostServer) -> None:
    anonymous = server.client(token=None)
    wrong = server.client(token="not-a-token")
    t = "/v1/threads/x"
    for method, path in [
        ("POST", "/v1/runs"), ("GET", "/v1/threads"), ("GET", f"{t}/runs/r/events"),
        ("GET", f"{t}/timeline"), ("GET", f"{t}/branches"), ("GET", f"{t}/fork-points"),
        ("POST", f"{t}/forks"), ("GET", f"{t}/approvals"), ("POST", f"{t}/approvals/c"),
        ("POST", f"{t}/questions/c/answer"), ("POST", f"{t}/parked/k/resolve"),
        ("POST", f"{t}/cancel"), ("POST", f"{t}/settings"), ("POST", f"{t}/mode"),
    ]:
        for client in (anonymous, wrong):
            assert code(client.request(method, path)) == (401, "unauthenticated"), path


def test_start_follow_and_replay_a_run(server: HostServer) -> None:
    alice = server.client()
    body = {"agent": "greeter", "input": "hi"}
    first = start(alice, body, key="replay-1")
    assert first.status_code == 202
    accepted = first.json()
    assert set(accepted) == {"thread_id", "branch_id", "run_id"}
    messages = sse(alice, f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events")
    events = [m for m in messages if m["data"]["kind"] == "event"]
    assert events[0]["data"]["event"]["event_id"] == accepted["run_id"]
    assert events[0]["data"]["event"]["type"] == "user_input"
    assert [m["id"] for m in events] == list(range(events[0]["id"], events[-1]["id"] + 1))
    assert events[-1]["data"]["event"]["type"] == "turn_completed"
    result = messages[-1]
    assert result["id"] is None
    assert result["data"] == {"kind": "result", "run_id": accepted["run_id"],
                              "result": {"output": "hello 1", "status": "completed"}}

    # Same key, same body (other formatting and key order): the same 202, nothing started.
    raw = json.dumps({"input": "hi", "agent": "greeter"}, indent=2)
    again = alice.post("/v1/runs", content=raw, headers={"idempotency-key": "replay-1"})
    assert (again.status_code, again.json()) == (202, accepted)
    assert len(timeline(alice, accepted["thread_id"])) == len(events) + 1  # + thread_started
    # Same key, another body; same key, another caller.
    assert code(start(alice, {"agent": "greeter", "input": "ho"}, key="replay-1")) == (
        409, "idempotency_key_reused")
    bob = server.client("bob-token")
    assert code(start(bob, body, key="replay-1")) == (409, "idempotency_key_principal_mismatch")
    # Another tenant may use the same key: keys are per tenant.
    assert start(server.client("eve-token"), body, key="replay-1").status_code == 202

    # The next run on the same thread, resumed from a seq.
    second, result2 = run_to_end(alice, {**body, "thread_id": accepted["thread_id"]})
    assert result2 == {"status": "completed", "output": "hello 2"}
    path = f"/v1/threads/{second['thread_id']}/runs/{second['run_id']}/events"
    whole = [m["id"] for m in sse(alice, path) if m["id"] is not None]
    tail = [m["id"] for m in sse(alice, path, **{"last-event-id": str(whole[1])})]
    assert tail[:-1] == whole[2:]
    assert [m["id"] for m in sse(alice, path + f"?after_seq={whole[2]}")][:-1] == whole[3:]


def test_start_refusals(server: HostServer) -> None:
    alice = server.client()
    assert code(alice.post("/v1/runs", json={"agent": "greeter", "input": "x"})) == (
        400, "invalid_request")  # no Idempotency-Key
    assert code(start(alice, {"agent": "greeter", "input": "x"}, key="k" * 256)) == (
        400, "invalid_request")
    assert code(start(alice, {"agent": "nobody", "input": "x"})) == (404, "not_found")
    assert code(start(alice, {"agent": "greeter", "input": ""})) == (400, "invalid_request")
    assert code(start(alice, {"agent": "greeter", "input": "x", "extra": 1})) == (
        400, "invalid_request")
    assert code(start(alice, {"agent": "greeter", "input": "x", "thread_id": "nope"})) == (
        404, "not_found")
    accepted, _ = run_to_end(alice, {"agent": "greeter", "input": [{"type": "text", "text": "a"}]})
    tid = accepted["thread_id"]
    assert code(start(alice, {"agent": "payer", "input": "x", "thread_id": tid})) == (
        400, "invalid_request")  # pinned to another agent
    assert code(start(server.client("eve-token"), {"agent": "greeter", "input": "x",
                                                    "thread_id": tid})) == (404, "not_found")
    parked, result = run_to_end(alice, {"agent": "payer", "input": "pay"})
    assert result["status"] == "parked"
    assert code(start(alice, {"agent": "payer", "input": "x",
                              "thread_id": parked["thread_id"]})) == (409, "branch_not_runnable")
    assert code(start(alice, {"agent": "greeter", "input": "x", "budget": {"max_turns": 0}})) == (
        400, "invalid_request")


def test_reads_timeline_branches_fork_points_and_tenancy(server: HostServer) -> None:
    alice = server.client()
    accepted, _ = run_to_end(alice, {"agent": "greeter", "input": "hi"})
    tid = accepted["thread_id"]
    body = alice.get(f"/v1/threads/{tid}/timeline").json()
    assert body["thread_id"] == tid
    assert body["branch_id"] == accepted["branch_id"]
    assert [e["event"]["seq"] for e in body["entries"]] == list(range(1, len(body["entries"]) + 1))
    assert all(e["fork_point"] is False for e in body["entries"])
    assert alice.get(f"/v1/threads/{tid}/branches").json() == [
        {"branch_id": accepted["branch_id"], "mode": "live", "runnable": True}]
    assert alice.get(f"/v1/threads/{tid}/fork-points").json() == []
    assert alice.get(f"/v1/threads/{tid}/approvals").json() == []
    assert any(t["thread_id"] == tid for t in alice.get("/v1/threads").json())

    eve = server.client("eve-token")
    for path in ("timeline", "branches", "fork-points", "approvals",
                 f"runs/{accepted['run_id']}/events"):
        assert code(eve.get(f"/v1/threads/{tid}/{path}")) == (404, "not_found"), path
    assert all(t["thread_id"] != tid for t in eve.get("/v1/threads").json())
    assert code(alice.get(f"/v1/threads/{tid}/timeline?branch_id=other")) == (404, "not_found")
    assert code(alice.get(f"/v1/threads/{tid}/runs/nope/events")) == (404, "not_found")
    assert code(alice.get(f"/v1/threads/{tid}/runs/{accepted['run_id']}/events?after_seq=x")) == (
        400, "invalid_request")


def test_approve_and_deny_with_authority(server: HostServer) -> None:
    alice, bob, eve = server.client(), server.client("bob-token"), server.client("eve-token")
    accepted, result = run_to_end(alice, {"agent": "payer", "input": "pay"})
    tid = accepted["thread_id"]
    assert result["status"] == "parked"
    assert result["reason"] == "awaiting_approval"
    (pending,) = alice.get(f"/v1/threads/{tid}/approvals").json()
    assert pending["tool"] == "wire_money"
    assert pending["input"] == {"amount": 5}
    assert pending["suggested_rules"] == ["wire_money"]
    path = f"/v1/threads/{tid}/approvals/{pending['challenge_id']}"
    before = len(timeline(alice, tid))
    assert code(bob.post(path, json={"decision": "grant"})) == (403, "forbidden")
    assert code(eve.post(path, json={"decision": "grant"})) == (404, "not_found")
    assert len(timeline(alice, tid)) == before  # refusals append nothing
    assert code(alice.post(path, json={"decision": "deny", "remember_rule": "wire_money"})) == (
        400, "invalid_request")
    assert code(alice.post(path, json={"decision": "grant", "remember_rule": "other"})) == (
        400, "invalid_request")
    assert code(alice.post(path, json={"decision": "maybe"})) == (400, "invalid_request")
    assert code(alice.post(f"/v1/threads/{tid}/approvals/nope", json={"decision": "grant"})) == (
        404, "not_found")
    granted = alice.post(path, json={"decision": "grant", "remember_rule": "wire_money"})
    assert granted.status_code == 200, granted.text
    event_id = granted.json()["event_id"]
    # The host continued the thread by itself: the same run's stream ends completed.
    messages = sse(alice, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "completed", "output": "paid"}
    assert code(alice.post(path, json={"decision": "grant"})) == (409, "approval_duplicate")
    events = timeline(alice, tid)
    decided = next(e for e in events if e["event_id"] == event_id)
    assert decided["type"] == "approval_granted"
    assert decided["actor"]["principal"]["subject"] == "alice"

    denied_run, _ = run_to_end(alice, {"agent": "payer", "input": "pay"})
    (pending,) = alice.get(f"/v1/threads/{denied_run['thread_id']}/approvals").json()
    path = f"/v1/threads/{denied_run['thread_id']}/approvals/{pending['challenge_id']}"
    assert alice.post(path, json={"decision": "deny", "reason": "no"}).status_code == 200
    final = sse(alice, f"/v1/threads/{denied_run['thread_id']}/runs/{denied_run['run_id']}/events")
    assert final[-1]["data"]["result"]["status"] == "completed"


def test_resolve_a_parked_effect(server: HostServer) -> None:
    alice, bob = server.client(), server.client("bob-token")
    accepted, result = run_to_end(alice, {"agent": "mailer", "input": "mail"})
    tid = accepted["thread_id"]
    assert result["status"] == "parked"
    assert result["reason"] == "effect_unknown"
    ((kind, effect_key),) = [(p["kind"], p["id"]) for p in result["pending"]]
    assert kind == "effect"
    path = f"/v1/threads/{tid}/parked/{effect_key}/resolve"
    before = len(timeline(alice, tid))
    assert code(bob.post(path, json={"resolution": "assume_done"})) == (403, "forbidden")
    assert len(timeline(alice, tid)) == before
    assert code(alice.post(path, json={"resolution": "maybe"})) == (400, "invalid_request")
    assert code(alice.post(f"/v1/threads/{tid}/parked/{tid}:nope/resolve",
                           json={"resolution": "assume_done"})) == (409, "not_parked")
    resolved = alice.post(path, json={"resolution": "assume_done"})
    assert resolved.status_code == 200, resolved.text
    messages = sse(alice, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "completed", "output": "mailed"}
    assert code(alice.post(path, json={"resolution": "assume_done"})) == (409, "not_parked")


def test_cancel_a_running_run_and_a_parked_one(server: HostServer, service: Any) -> None:
    alice, bob = server.client(), server.client("bob-token")
    accepted = start(alice, {"agent": "waiter", "input": "wait"}).json()
    tid = accepted["thread_id"]
    service.client().await_waiting("g")
    assert code(bob.post(f"/v1/threads/{tid}/cancel")) == (403, "forbidden")
    cancelled = alice.post(f"/v1/threads/{tid}/cancel")
    assert cancelled.status_code in (200, 202), cancelled.text
    service.client().open_gate("g")
    messages = sse(alice, f"/v1/threads/{tid}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "cancelled"}

    parked, _ = run_to_end(alice, {"agent": "payer", "input": "pay"})
    ok = alice.post(f"/v1/threads/{parked['thread_id']}/cancel")
    assert ok.status_code == 200, ok.text
    assert set(ok.json()) == {"event_id"}
    messages = sse(alice, f"/v1/threads/{parked['thread_id']}/runs/{parked['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "cancelled"}
    # The turn is closed, and the cancel is the thread's latest word: a second cancel is
    # answered as the first was, with the barrier recorded then, and records nothing.
    again = alice.post(f"/v1/threads/{parked['thread_id']}/cancel")
    assert (again.status_code, again.json()) == (200, ok.json())
    barriers = [e for e in timeline(alice, parked["thread_id"]) if e["type"] == "cancel_requested"]
    assert [e["event_id"] for e in barriers] == [ok.json()["event_id"]]


def test_a_question_is_answered_over_http_and_the_run_goes_on(server: HostServer) -> None:
    alice, bob = server.client(), server.client("bob-token")
    accepted, result = run_to_end(alice, {"agent": "asker", "input": "paint it"})
    assert result == {"status": "parked", "reason": "awaiting_input",
                      "pending": [{"kind": "input", "id": "q1"}]}
    path = f"/v1/threads/{accepted['thread_id']}/questions/q1/answer"
    assert code(bob.post(path, json={"answer": "red"})) == (403, "forbidden")
    assert code(alice.post(path, json={"answer": "green"})) == (409, "invalid_answer")
    answered = alice.post(path, json={"answer": "Blue"})
    assert answered.status_code == 200, answered.text
    messages = sse(alice, f"/v1/threads/{accepted['thread_id']}/runs/{accepted['run_id']}/events")
    assert messages[-1]["data"]["result"] == {"status": "completed", "output": "blue it is"}
    result_event = next(e for e in timeline(alice, accepted["thread_id"])
                        if e["event_id"] == answered.json()["event_id"])
    assert result_event["data"]["preview"] == "blue"


def test_a_structured_output_is_the_runs_output(server: HostServer) -> None:
    _, result = run_to_end(server.client(), {"agent": "judge", "input": "fixed?"})
    assert result == {"status": "completed", "output": {"fixed": True}}


def test_questions_settings_mode_and_forks(server: HostServer) -> None:
    alice = server.client()
    accepted, _ = run_to_end(alice, {"agent": "greeter", "input": "hi"})
    t = f"/v1/threads/{accepted['thread_id']}"
    assert code(alice.post(f"{t}/questions/c1/answer", json={"answer": "yes"})) == (
        409, "no_open_question")
    assert code(alice.post(f"{t}/questions/c1/answer", json={"answer": ""})) == (
        400, "invalid_request")
    settings = {"model": {"provider": "scripted", "name": "scripted-1"}}
    assert code(alice.post(f"{t}/settings", json={"model": 1})) == (400, "invalid_request")
    assert code(alice.post(f"{t}/mode", json={"mode": "nope"})) == (400, "invalid_request")
    first = timeline(alice, accepted["thread_id"])[0]
    assert code(alice.post(f"{t}/forks", json={"event_id": first["event_id"]})) == (
        409, "no_snapshot_boundary")
    assert code(alice.post(f"{t}/forks", json={"event_id": "x", "mode": "stub"})) == (
        400, "invalid_request")
    eve = server.client("eve-token")
    for path, body in [("settings", settings), ("mode", {"mode": "plan"}),
                       ("forks", {"event_id": "x"}), ("cancel", None),
                       ("questions/c1/answer", {"answer": "yes"})]:
        assert code(eve.post(f"{t}/{path}", json=body)) == (404, "not_found"), path


def test_settings_and_mode_changes(server: HostServer) -> None:
    """Each change is one event with the caller as actor; a model the thread's policy does not
    list, or bypass without allow_bypass, is invalid_transition; a tenant member without
    authority is 403; nothing refused is appended; the next run takes the change."""
    alice, bob = server.client(), server.client("bob-token")
    accepted, _ = run_to_end(alice, {"agent": "greeter", "input": "hi"})
    tid = accepted["thread_id"]
    t = f"/v1/threads/{tid}"
    changed = alice.post(f"{t}/settings", json={
        "model": {"provider": "scripted", "name": "scripted-1"},
        "model_params": {"max_tokens": 64}, "reasoning_carryover": "omit_prior"})
    assert changed.status_code == 200, changed.text
    last = timeline(alice, tid)[-1]
    assert last["event_id"] == changed.json()["event_id"]
    assert last["type"] == "settings_changed"
    assert last["actor"] == {"kind": "user", "principal": {
        "issuer": "test", "tenant": "acme", "subject": "alice"}}
    assert last["data"]["reason"] == "user"
    assert last["data"]["settings"]["model_params"] == {"max_tokens": 64}
    assert last["data"]["settings"]["reasoning_carryover"] == "omit_prior"
    moved = alice.post(f"{t}/mode", json={"mode": "plan"})
    assert moved.status_code == 200, moved.text
    assert timeline(alice, tid)[-1]["data"] == {"from": "default", "to": "plan"}
    head = len(timeline(alice, tid))
    other_model = {"model": {"provider": "scripted", "name": "other"}}
    assert code(alice.post(f"{t}/settings", json=other_model)) == (409, "invalid_transition")
    assert code(alice.post(f"{t}/mode", json={"mode": "bypass"})) == (409, "invalid_transition")
    assert code(bob.post(f"{t}/mode", json={"mode": "default"})) == (403, "forbidden")
    assert code(bob.post(f"{t}/settings", json=other_model)) == (403, "forbidden")
    assert len(timeline(alice, tid)) == head  # nothing refused was appended
    _, result = run_to_end(alice, {"agent": "greeter", "input": "again", "thread_id": tid})
    assert result["status"] == "completed"


def test_bad_input(server: HostServer) -> None:
    alice = server.client()
    headers = {"idempotency-key": "bad-1", "content-type": "application/json"}
    assert code(alice.post("/v1/runs", content=b"{not json", headers=headers)) == (
        400, "invalid_request")
    assert code(alice.post("/v1/runs", content=b"[1, 2]", headers=headers)) == (
        400, "invalid_request")
    assert code(alice.post("/v1/runs", content=b"", headers=headers)) == (400, "invalid_request")
    big = json.dumps({"agent": "greeter", "input": "x" * (1024 * 1024 + 10)})
    assert code(alice.post("/v1/runs", content=big, headers=headers)) == (
        413, "payload_too_large")

    def chunks() -> Any:  # no content-length: the limit holds on the bytes read
        for _ in range(20):
            yield b"x" * 100_000

    assert code(alice.post("/v1/runs", content=chunks(), headers=headers)) == (
        413, "payload_too_large")
    assert code(alice.get("/v1/nothing")) == (404, "not_found")
    assert code(alice.get("/elsewhere")) == (404, "not_found")
    assert code(alice.delete("/v1/runs")) == (404, "not_found")
    assert alice.get("/openapi.json").json()["openapi"].startswith("3.")


def _import(server: HostServer, log: Any) -> None:
    import asyncio

    from threads.store.sqlite import sqlite
    from threads.store.transfer import import_log

    async def go() -> None:
        store = sqlite(server.store)
        try:
            await import_log(store, log.export(), tenant_id="acme")
        finally:
            await store.close()

    asyncio.run(go())


def test_fork_points_and_forks(server: HostServer) -> None:
    from threads.clock import FakeClock
    from threads.log.hashing import value_hash
    from threads.testing.sample_log import _CONFIG, SampleLog

    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    snapshot = log.snapshot()
    _import(server, log)
    alice, t = server.client(), f"/v1/threads/{log.header.thread_id}"
    (point,) = alice.get(f"{t}/fork-points").json()
    assert point["event_id"] == snapshot.event_id
    assert point["seq"] == snapshot.seq
    assert point["branch_id"] == log.header.branch_id
    assert point["snapshot"]["snapshot_id"] == "snap_01"
    entries = alice.get(f"{t}/timeline").json()["entries"]
    assert [e["fork_point"] for e in entries] == [e["event"]["seq"] == snapshot.seq
                                                  for e in entries]
    assert code(alice.post(f"{t}/forks", json={"event_id": "nope"})) == (
        409, "no_snapshot_boundary")
    forked = alice.post(f"{t}/forks", json={"event_id": snapshot.event_id})
    assert forked.status_code == 201, forked.text
    child = forked.json()
    assert child["thread_id"] == log.header.thread_id
    branches = alice.get(f"{t}/branches").json()
    assert {"branch_id": child["branch_id"], "parent_branch_id": log.header.branch_id,
            "fork_at_seq": snapshot.seq, "mode": "live", "runnable": True} in branches
    fork_line = alice.get(f"{t}/timeline?branch_id={child['branch_id']}").json()["entries"][-1]
    assert fork_line["event"]["type"] == "fork"
    assert fork_line["event"]["data"]["sandbox_id"] == "sbx-from-snap_01"
    assert code(server.client("eve-token").post(f"{t}/forks", json={
        "event_id": snapshot.event_id})) == (404, "not_found")

    # A thread no agent of this host owns has no sandbox to restore into.
    ghost = SampleLog(FakeClock())
    config = {**_CONFIG, "agent_name": "ghost"}
    ghost.add("thread_started", {**config, "config_hash": value_hash(config)})
    ghost.turn()
    point = ghost.snapshot()
    _import(server, ghost)
    assert code(alice.post(f"/v1/threads/{ghost.header.thread_id}/forks",
                           json={"event_id": point.event_id})) == (409, "sandbox_required")


@pytest.mark.race
def test_concurrent_posts_with_one_key_start_one_run(server: HostServer) -> None:
    """Eight callers race one key for a new thread: every one gets the same 202, one run
    exists, and the losers leave no thread behind (not even a header)."""
    from concurrent.futures import ThreadPoolExecutor

    key, text = str(uuid.uuid4()), f"race {uuid.uuid4()}"
    clients = [server.client() for _ in range(8)]
    before = {r.thread_id for r in asyncio.run(_roots(server))}

    def post(client: httpx.Client) -> tuple[int, dict[str, Any]]:
        response = start(client, {"agent": "greeter", "input": text}, key=key)
        return response.status_code, response.json()

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(post, clients))
    assert {status for status, _ in answers} == {202}
    assert len({json.dumps(body, sort_keys=True) for _, body in answers}) == 1
    run = answers[0][1]
    inputs = [e for e in timeline(clients[0], run["thread_id"]) if e["type"] == "user_input"]
    assert [e["event_id"] for e in inputs] == [run["run_id"]]
    after = asyncio.run(_roots(server))
    new = [r for r in after if r.thread_id not in before]
    assert [r.thread_id for r in new] == [run["thread_id"]]  # one thread, the winner's
    assert all(r.head_seq > 0 for r in after)  # no header-only thread anywhere


async def _roots(server: HostServer) -> list[Any]:
    store = sqlite(server.store)
    try:
        return await store.list_threads()
    finally:
        await store.close()


def test_a_thread_out_of_turns_takes_no_more_input(server: HostServer) -> None:
    """The agent allows one turn per thread: the host writes no second user_input, records
    budget_exceeded as a library run would, and refuses with budget_exhausted."""
    alice = server.client()
    accepted, result = run_to_end(alice, {"agent": "counted", "input": "one"})
    assert result["status"] == "completed"
    again = start(alice, {"agent": "counted", "input": "two", "thread_id": accepted["thread_id"]})
    assert code(again) == (409, "budget_exhausted")
    events = timeline(alice, accepted["thread_id"])
    assert [e["type"] for e in events].count("user_input") == 1
    assert events[-1]["type"] == "budget_exceeded"
    assert events[-1]["data"] == {
        "limit": "max_turns", "limit_value": 1, "observed": 2,
        "observed_is_upper_bound": False, "scope": "thread",
    }
