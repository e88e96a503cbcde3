"""A control on a subagent's thread continues its tree's root (digest §6.2: "a host resumes the
root after any control on a descendant"): the host runs the root, whose run reruns the child
under the root's ceiling and budgets, and both go on. Through the HTTP API: a grant or a deny
on the child, a cancel on the child, a cancel on the root parked on its child, and a grant on
a background child whose parent had no turn open."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from starlette.requests import Request

from threads import Parked, Permissions, agent, open_thread, tool
from threads.host.app import host
from threads.log.lines import Event
from threads.principal import Principal
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use

pytestmark = pytest.mark.timeout(60)

ALICE = Principal("test", "acme", "alice")  # starts the run
BOB = Principal("test", "acme", "bob")  # the root agent's approver
PEOPLE = {p.subject: p for p in (ALICE, BOB)}


def team(refunded: list[int], *, background: bool = False) -> tuple[Agent, Agent]:
    @tool(effect="unguarded")
    def refund(order: int) -> str:
        """Refund an order."""
        refunded.append(order)
        return f"refunded {order}"

    clerk = agent(name="clerk", tools=[refund], permissions=Permissions(ask=["refund"]),
                  model=scripted_model([use(call("refund", "r1", order=42)), say("Refunded.")]))
    spawn = call("spawn_agent", "s1", agent="clerk", prompt="Refund 42", background=background)
    replies = [use(spawn), say("Started it."), say("All done.")] if background else [
        use(spawn), say("All done.")]
    lead = agent(name="lead", tools=[refund], subagents=[clerk], approvers=[BOB],
                 model=scripted_model(replies))
    return lead, clerk


class Host:
    def __init__(self, store: Store, *served: Agent, who: str) -> None:
        def as_person(request: Request) -> Principal:
            return PEOPLE[request.headers["x-who"]]

        self.app = host(store, served, authenticate=as_person, log=lambda _: None)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                      base_url="http://host", headers={"x-who": who})

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        response = await self.http.post(path, json=body)
        await self.settle()
        return response

    async def settle(self) -> None:
        while self.app.state.runs.running:  # the runs the host started, until none is left
            for task in list(self.app.state.runs.running.values()):
                await task


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


async def parked_tree(store: Store, lead: Agent) -> tuple[str, str, str]:
    """The lead's run parked on its child's approval: (root, child, challenge)."""
    parked = await lead.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    [child] = await parked.thread.children()
    kid = await open_thread(store, child.thread_id, principal=ALICE)
    [approval] = await kid.pending_approvals()
    return parked.thread.id, child.thread_id, approval.challenge_id


async def timeline(store: Store, thread_id: str) -> list[Event]:
    return await (await open_thread(store, thread_id, principal=ALICE)).timeline()


async def test_a_grant_on_the_child_continues_the_root_and_both_finish(store: Store) -> None:
    refunded: list[int] = []
    lead, clerk = team(refunded)
    root, child, challenge = await parked_tree(store, lead)
    served = Host(store, lead, clerk, who="bob")
    granted = await served.post(f"/v1/threads/{child}/approvals/{challenge}",
                                {"decision": "grant"})
    assert granted.status_code < 300, granted.text
    assert refunded == [42]
    events = await timeline(store, root)
    assert types(events)[-3:] == ["model_request", "model_response", "turn_completed"]
    [finished] = [e for e in events if e.type == "agent_finished"]
    assert finished.data["status"] == "completed"
    [resumed] = [e for e in events if e.type == "resumed"]
    assert resumed.data["address"] == {"id": child, "kind": "child"}
    assert (await timeline(store, child))[-1].data == {"reason": "end_turn"}


async def test_a_deny_on_the_child_continues_the_root(store: Store) -> None:
    refunded: list[int] = []
    lead, clerk = team(refunded)
    root, child, challenge = await parked_tree(store, lead)
    served = Host(store, lead, clerk, who="bob")
    denied = await served.post(f"/v1/threads/{child}/approvals/{challenge}",
                               {"decision": "deny", "reason": "no"})
    assert denied.status_code < 300, denied.text
    assert refunded == []
    events = await timeline(store, root)
    assert events[-1].data == {"reason": "end_turn"}
    assert [e.data["status"] for e in events if e.type == "agent_finished"] == ["completed"]


async def test_a_cancel_on_the_child_ends_it_and_the_root_goes_on(store: Store) -> None:
    refunded: list[int] = []
    lead, clerk = team(refunded)
    root, child, _ = await parked_tree(store, lead)
    served = Host(store, lead, clerk, who="bob")
    cancelled = await served.post(f"/v1/threads/{child}/cancel", {})
    assert cancelled.status_code < 300, cancelled.text
    assert refunded == []
    assert (await timeline(store, child))[-1].data == {"reason": "cancelled"}
    events = await timeline(store, root)
    [finished] = [e for e in events if e.type == "agent_finished"]
    assert finished.data["status"] == "cancelled"
    assert events[-1].data == {"reason": "end_turn"}  # the root reacted to its child's end


async def test_a_cancel_on_the_root_ends_the_whole_tree(store: Store) -> None:
    refunded: list[int] = []
    lead, clerk = team(refunded)
    root, child, _ = await parked_tree(store, lead)
    served = Host(store, lead, clerk, who="bob")
    cancelled = await served.post(f"/v1/threads/{root}/cancel", {})
    assert cancelled.status_code < 300, cancelled.text
    assert refunded == []
    assert (await timeline(store, child))[-1].data == {"reason": "cancelled"}
    events = await timeline(store, root)
    assert types(events)[-2:] == ["cancelled", "turn_completed"]
    assert events[-1].data == {"reason": "cancelled"}


async def test_a_grant_on_a_background_child_wakes_its_idle_parent(store: Store) -> None:
    """The lead's turn was over when its background child parked: the grant on the child
    continues the lead, which records the child's end and reacts to it (``woken``)."""
    refunded: list[int] = []
    lead, clerk = team(refunded, background=True)
    root, child, challenge = await parked_tree(store, lead)
    assert (await (await open_thread(store, root, principal=ALICE)).fold()).turn is None
    served = Host(store, lead, clerk, who="bob")
    granted = await served.post(f"/v1/threads/{child}/approvals/{challenge}",
                                {"decision": "grant"})
    assert granted.status_code < 300, granted.text
    assert refunded == [42]
    events = await timeline(store, root)
    kinds = types(events)
    assert "woken" in kinds
    assert kinds[-1] == "turn_completed"
    assert [e.data["preview"] for e in events if e.type == "tool_result_late"] == ["Refunded."]


async def test_a_host_starting_after_a_grant_on_the_child_continues_the_root(
    store: Store,
) -> None:
    """The grant was recorded on the child while no host ran (the CLI, another process): the
    host's start finds the child's work and continues the root, never the child alone."""
    refunded: list[int] = []
    lead, clerk = team(refunded)
    root, child, challenge = await parked_tree(store, lead)
    as_root = await open_thread(store, child, principal=BOB, agent=lead)
    await as_root.approve(challenge, BOB)
    served = Host(store, lead, clerk, who="bob")
    runs = served.app.state.runs
    launched: list[str] = []
    launch = runs.launch

    def counted(agent: Agent, branch: Any, fold: Any) -> None:
        launched.append(branch.thread_id)
        launch(agent, branch, fold)

    runs.launch = counted
    await runs.recover()
    await served.settle()
    await runs.stop(1.0)
    assert launched == [root]
    assert refunded == [42]
    assert (await timeline(store, root))[-1].data == {"reason": "end_turn"}


async def test_a_cancel_on_an_idle_root_ends_its_parked_background_child(store: Store) -> None:
    """The lead's turn was over when its background child parked: a cancel on the lead is
    accepted (``scope: thread``), and the host's run of the lead records the child's
    cancelled end, without waking the lead."""
    refunded: list[int] = []
    lead, clerk = team(refunded, background=True)
    root, child, _ = await parked_tree(store, lead)
    served = Host(store, lead, clerk, who="bob")
    cancelled = await served.post(f"/v1/threads/{root}/cancel", {})
    assert cancelled.status_code < 300, cancelled.text
    assert refunded == []
    events = await timeline(store, root)
    assert "woken" not in types(events)
    [finished] = [e for e in events if e.type == "agent_finished"]
    assert finished.data["status"] == "cancelled"
    assert (await timeline(store, child))[-1].data == {"reason": "cancelled"}


async def test_a_second_cancel_on_a_barred_idle_root_answers_as_the_first(store: Store) -> None:
    """The root was cancelled (``scope: thread``) while idle, by a handle no host saw; a cancel
    over HTTP then finds it barred: 200 with the barrier in force, nothing new recorded, and
    the same again once the host's run carried the cancel out."""
    lead, clerk = team([], background=True)
    root, child, _ = await parked_tree(store, lead)
    barrier = await (await open_thread(store, root, principal=ALICE)).cancel(ALICE)
    served = Host(store, lead, clerk, who="bob")
    for _ in range(2):
        again = await served.post(f"/v1/threads/{root}/cancel", {})
        assert again.status_code == 200, again.text
        assert again.json() == {"event_id": barrier.event_id}
    events = await timeline(store, root)
    assert [e.event_id for e in events if e.type == "cancel_requested"] == [barrier.event_id]
    assert [e.data["status"] for e in events if e.type == "agent_finished"] == ["cancelled"]
    assert types(await timeline(store, child)).count("cancel_requested") == 1
