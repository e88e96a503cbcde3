"""The tree over HTTP: ``GET /v1/threads/{id}`` of a handoff target names its source, the
source's lists the target (and a spawned subagent, from a log another writer wrote) with its
status; the inbox marks a target's pending approval with its parent; a run's result stream says
``handed_off`` with the target; a new run on a handed-off thread is refused (rule 26). The app
runs in process (httpx's ASGI transport) over the shared store fixture."""

from __future__ import annotations

import json

import httpx
import pytest

from threads import HandedOff, Parked, Permissions, agent, tool
from threads.clock import FakeClock
from threads.host.app import host
from threads.log.render import render
from threads.principal import Principal
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.store.transfer import import_log
from threads.testing import call, say, scripted_model, use
from threads.testing.sample_log import MODEL, USER, SampleLog

pytestmark = pytest.mark.timeout(60)

ALICE = Principal(issuer="test", tenant="acme", subject="alice")
CHILD = "01900000-0000-7000-8000-0000000000c1"


@tool(effect="unguarded")
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def agents(*, ask: bool = False) -> tuple[Agent, Agent]:
    billing = agent(name="billing", tools=[refund],
                    permissions=Permissions(ask=["refund"] if ask else []),
                    model=scripted_model([use(call("refund", "r1", order=42)), say("Done.")]))
    triage = agent(name="triage", handoffs=[billing],
                   model=scripted_model([use(call("handoff", "h1", agent="billing"))]))
    return triage, billing


def client(store: Store, *served: Agent) -> httpx.AsyncClient:
    app = host(store, served, authenticate=lambda _request: ALICE)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")


async def handed_off(store: Store, *, ask: bool = False) -> HandedOff:
    triage, _ = agents(ask=ask)
    result = await triage.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    return result


async def test_a_target_names_its_source_and_the_source_lists_it(store: Store) -> None:
    result = await handed_off(store)
    source, target = result.thread.id, result.to_thread.id
    async with client(store, *agents()) as http:
        got = await http.get(f"/v1/threads/{target}")
        assert got.status_code == 200, got.text
        body = got.json()
        assert body["agent"] == "billing"
        assert body["status"] == "idle"
        assert body["parent"]["thread_id"] == source
        assert body["parent"]["relation"] == "handoff"
        handoff = next(e for e in await result.thread.timeline() if e.type == "handoff")
        assert body["parent"]["event_id"] == handoff.event_id
        assert body["children"] == []

        got = await http.get(f"/v1/threads/{source}")
        body = got.json()
        assert body["parent"] is None
        assert body["children"] == [{
            "thread_id": target, "relation": "handoff", "agent": "billing", "call_id": "h1",
            "event_id": handoff.event_id, "status": "handed_off", "thread_status": "idle",
        }]
        assert (await http.get(f"/v1/threads/{target}/timeline")).status_code == 200


async def test_another_tenant_sees_neither_thread(store: Store) -> None:
    result = await handed_off(store)
    other = Principal(issuer="test", tenant="globex", subject="mallory")
    app = host(store, agents(), authenticate=lambda _request: other)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://host") as http:
        for thread in (result.thread.id, result.to_thread.id):
            got = await http.get(f"/v1/threads/{thread}")
            assert got.status_code == 404
            assert got.json()["error"]["code"] == "not_found"


async def test_a_targets_pending_approval_shows_in_the_inbox_with_its_parent(
    store: Store,
) -> None:
    result = await handed_off(store, ask=True)
    assert isinstance(result.target, Parked)
    async with client(store, *agents(ask=True)) as http:
        got = await http.get("/v1/inbox")
        assert got.status_code == 200, got.text
        [item] = got.json()
        assert item["kind"] == "approval"
        assert item["thread_id"] == result.to_thread.id
        assert item["approval"]["tool"] == "refund"
        assert item["parent"] == {"thread_id": result.thread.id, "relation": "handoff",
                                  "branch_id": None, "event_id": None}
        source = (await http.get(f"/v1/threads/{result.thread.id}")).json()
        assert source["children"][0]["thread_status"] == "parked"


async def test_a_new_run_on_a_handed_off_thread_is_refused(store: Store) -> None:
    result = await handed_off(store)
    async with client(store, *agents()) as http:
        got = await http.post("/v1/runs", headers={"Idempotency-Key": "k1"}, json={
            "agent": "triage", "thread_id": result.thread.id, "input": "one more thing",
        })
        assert got.status_code == 409, got.text
        error = got.json()["error"]
        assert error["code"] == "invalid_transition"
        assert result.to_thread.id in error["message"]


def spawning_log() -> SampleLog:
    """A thread (written by another implementation) that spawned a subagent, still running."""
    log = SampleLog(FakeClock(1790000000000))
    log.started()
    log.add("user_input", {"source": "api", "text": "review this"}, USER)
    events = log.events
    rendered = render(events[0].data, events)
    request = log.add("model_request", {
        "attempt": 1, "declared_prefix": rendered.declared_prefix(),
        "request_ref": rendered.request_ref(),
    })
    part = {"type": "tool_use", "call_id": "c1", "name": "read_file", "input": {"path": "a"}}
    log.add("model_response", {
        "completeness": "complete", "content": [part], "request_event_id": request.event_id,
        "stop_reason": "tool_use", "usage": {"input_tokens": 1, "output_tokens": 1},
    }, MODEL)
    log.add("tool_call", {"call_id": "c1", "input": {"path": "a"}, "name": "read_file",
                          "request_event_id": request.event_id})
    log.add("agent_spawned", {"agent_name": "reviewer", "call_id": "c1",
                              "child_thread_id": CHILD, "isolation": "none",
                              "mode": "foreground"})
    return log


async def test_a_spawned_subagent_is_listed_running(store: Store) -> None:
    log = spawning_log()
    await import_log(store, log.export(), tenant_id="acme")
    async with client(store, *agents()) as http:
        got = await http.get(f"/v1/threads/{log.header.thread_id}")
        assert got.status_code == 200, got.text
        [child] = got.json()["children"]
        assert child["thread_id"] == CHILD
        assert (child["relation"], child["agent"], child["status"]) == (
            "subagent", "reviewer", "running"
        )
        assert child["thread_status"] is None  # no such thread in this store


async def test_a_runs_result_stream_says_handed_off_with_the_target(store: Store) -> None:
    async with client(store, *agents()) as http:
        accepted = await http.post("/v1/runs", headers={"Idempotency-Key": "k2"}, json={
            "agent": "triage", "input": "Refund order 42",
        })
        assert accepted.status_code == 202, accepted.text
        run = accepted.json()
        stream = await http.get(f"/v1/threads/{run['thread_id']}/runs/{run['run_id']}/events")
        frames = [json.loads(line[len("data: "):]) for line in stream.text.splitlines()
                  if line.startswith("data: ")]
        result = frames[-1]
        assert result["kind"] == "result"
        # the run's own events only, though the target's first turn ran inside it
        assert {f["event"]["thread_id"] for f in frames[:-1]} == {run["thread_id"]}
        assert [f["event"]["seq"] for f in frames[:-1]] == list(range(2, len(frames) + 1))
        detail = (await http.get(f"/v1/threads/{run['thread_id']}")).json()
        [target] = detail["children"]
        assert result["result"] == {"status": "handed_off", "to_thread_id": target["thread_id"]}
