"""Who decides on a subagent's thread over HTTP: the approvers of its tree's root, never the
child agent's own nor the person who started the run when the root names approvers (the
reference's approval authority). The inbox's ``may_decide`` and the decision route agree; a
host that does not serve the root lets nobody decide."""

from __future__ import annotations

import httpx
import pytest
from starlette.requests import Request

from threads import Parked, Permissions, agent, tool
from threads.host.app import host
from threads.principal import Principal
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use

pytestmark = pytest.mark.timeout(60)

ALICE = Principal("test", "acme", "alice")  # starts the run
BOB = Principal("test", "acme", "bob")  # the root agent's approver
CAROL = Principal("test", "acme", "carol")  # the child agent's own approver
PEOPLE = {p.subject: p for p in (ALICE, BOB, CAROL)}


@tool(effect="unguarded")
def refund(order: int) -> str:
    """Refund an order."""
    return f"refunded {order}"


def team() -> tuple[Agent, Agent]:
    clerk = agent(name="clerk", tools=[refund], approvers=[CAROL],
                  permissions=Permissions(ask=["refund"]),
                  model=scripted_model([use(call("refund", "r1", order=42)), say("Done.")]))
    lead = agent(name="lead", tools=[refund], subagents=[clerk], approvers=[BOB],
                 model=scripted_model([
                     use(call("spawn_agent", "s1", agent="clerk", prompt="Refund 42")),
                     say("All done."),
                 ]))
    return lead, clerk


def as_person(request: Request) -> Principal:
    return PEOPLE[request.headers["x-who"]]


def client(store: Store, *served: Agent, who: str) -> httpx.AsyncClient:
    app = host(store, served, authenticate=as_person)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host",
                             headers={"x-who": who})


async def test_the_roots_approvers_decide_on_a_childs_thread(store: Store) -> None:
    lead, clerk = team()
    parked = await lead.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    [child] = await parked.thread.children()
    for who, may in (("bob", True), ("carol", False), ("alice", False)):
        async with client(store, lead, clerk, who=who) as http:
            got = await http.get("/v1/inbox")
            assert got.status_code == 200, got.text
            [item] = [i for i in got.json() if i["kind"] == "approval"]
            assert item["thread_id"] == child.thread_id
            assert item["may_decide"] is may, who
    challenge = item["approval"]["challenge_id"]
    path = f"/v1/threads/{child.thread_id}/approvals/{challenge}"
    for who in ("carol", "alice"):
        async with client(store, lead, clerk, who=who) as http:
            refused = await http.post(path, json={"decision": "grant"})
            assert refused.status_code == 403, (who, refused.text)
    async with client(store, clerk, who="bob") as http:  # a host without the root agent
        refused = await http.post(path, json={"decision": "grant"})
        assert refused.status_code == 403, refused.text
    async with client(store, lead, clerk, who="bob") as http:
        granted = await http.post(path, json={"decision": "grant"})
        assert granted.status_code < 300, granted.text
