"""A host restarted with another permission policy for an agent can't loosen the threads that
agent started: a new run on such a thread is 400 ``invalid_request`` naming what changed, with
nothing appended, and a parked turn the restarted host resumes after an approval is refused
(``invalid_config``) before its tool runs. The app runs in process (httpx's ASGI transport),
once per store engine; "restart" is a second app over the same store."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

from threads import Permissions, Principal, agent, tool
from threads.host.app import host
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

pytestmark = pytest.mark.timeout(60)
ALICE = Principal(issuer="test", tenant="acme", subject="alice")


class Refund(BaseModel):
    order: str


class Served:
    """One host app over ``store`` serving the agent ``support`` under ``permissions``."""

    def __init__(self, store: Store, permissions: Permissions, refunded: list[str]) -> None:
        async def refund(args: Refund, _ctx: Any) -> str:
            refunded.append(args.order)
            return f"refunded {args.order}"

        bot = agent(
            name="support", instructions="Help.", permissions=permissions,
            model=scripted_model([use(call("refund", order="o-1")), say("done")]),
            tools=[tool(name="refund", description="Refund an order.", input=Refund,
                        execute=refund)],
        )
        self.app = host(store, [bot], authenticate=lambda _request: ALICE, log=lambda _: None)
        self.http = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app),
                                      base_url="http://host")

    async def post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        response = await self.http.post(path, json=body,
                                         headers={"idempotency-key": str(uuid.uuid4())})
        await self.settle()
        return response

    async def settle(self) -> None:
        while self.app.state.runs.running:  # the tasks the host started, until none is left
            for task in list(self.app.state.runs.running.values()):
                await task


async def lines_of(store: Store, thread_id: str) -> int:
    root = await store.root_branch(thread_id)
    return len(await store.stored_lines(root.branch_id))


async def test_a_host_restarted_with_a_looser_policy_runs_nothing_on_the_pinned_thread(
    store: Store,
) -> None:
    refunded: list[str] = []
    first = Served(store, Permissions(ask=["refund"]), refunded)
    started = await first.post("/v1/runs", {"agent": "support", "input": "refund o-1"})
    assert started.status_code == 202, started.text
    thread_id = started.json()["thread_id"]
    listed = await first.http.get(f"/v1/threads/{thread_id}/approvals")
    [pending] = listed.json()
    await first.http.aclose()
    assert refunded == []  # parked on the approval

    restarted = Served(store, Permissions(), refunded)  # the ask rule is gone
    before = await lines_of(store, thread_id)
    again = await restarted.post(
        "/v1/runs", {"agent": "support", "input": "and o-2", "thread_id": thread_id})
    assert again.status_code == 400, again.text
    error = again.json()["error"]
    assert error["code"] == "invalid_request"
    assert 'changed: policy.permissions.ask: ["refund"] -> []' in error["message"]
    assert await lines_of(store, thread_id) == before

    granted = await restarted.post(
        f"/v1/threads/{thread_id}/approvals/{pending['challenge_id']}", {"decision": "grant"})
    assert granted.status_code == 200, granted.text
    refusal = restarted.app.state.runs.refused[started.json()["branch_id"]]
    assert refusal.code == "invalid_config"
    assert 'policy.permissions.ask: ["refund"] -> []' in refusal.message
    assert refunded == []  # the restarted host's resume never ran the tool
    root = await store.root_branch(thread_id)
    types = [event.type for event in (await store.read_chain(root.branch_id)).events]
    assert "effect_begin" not in types
    await restarted.http.aclose()
