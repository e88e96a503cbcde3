"""The calls of one model reply, end to end: every call is recorded and decided in part order
before any of them runs; then, in call order, an allowed call runs, a denied one gets its
``denied`` result and an ``ask`` opens its challenge and parks the run."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from threads import Completed, Parked, Permissions, Principal, agent, open_thread
from threads import tool as make_tool
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Args(BaseModel):
    target: str


def tools(ran: list[str]) -> list[Any]:
    def named(name: str, effect: str) -> Any:
        async def execute(args: Args, ctx: Any) -> str:
            ran.append(name)
            return f"{name} {args.target}"

        return make_tool(name=name, description=name, input=Args, execute=execute, effect=effect)

    return [named("read_file", "read_only"), named("send_email", "unguarded"),
            named("charge_card", "unguarded")]


async def test_calls_are_recorded_and_decided_before_any_runs(store: Store) -> None:
    ran: list[str] = []
    reply = use(
        call("read_file", "c1", target="README"),
        call("send_email", "c2", target="bob"),
        call("charge_card", "c3", target="c_42"),
    )
    bot = agent(
        name="t", model=scripted_model([reply, say("all done")]), tools=tools(ran),
        permissions=Permissions(allow=["read_file"], deny=["send_email"], ask=["charge_card"]),
    )
    parked = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "awaiting_approval"
    assert ran == ["read_file"]
    handle = await open_thread(store, parked.thread.id)
    timeline = await handle.timeline()
    after = [e for e in timeline if e.seq > next(
        e.seq for e in timeline if e.type == "model_response"
    )]
    assert [(e.type, e.data.get("call_id"), e.data.get("decision")) for e in after] == [
        ("tool_call", "c1", None), ("permission_decision", "c1", "allow"),
        ("tool_call", "c2", None), ("permission_decision", "c2", "deny"),
        ("tool_call", "c3", None), ("permission_decision", "c3", "ask"),
        ("tool_result", "c1", None), ("tool_result", "c2", None),
        ("approval_requested", "c3", None), ("parked", None, None),
    ]
    denied = next(e for e in after if e.type == "tool_result" and e.data["call_id"] == "c2")
    assert (denied.data["origin"], denied.data["is_error"], denied.data["preview"]) == (
        "denied", True, "denied"
    )
    requested = next(e for e in after if e.type == "approval_requested")
    assert requested.data["expires_at"] - requested.time == 60 * 60 * 1000  # open for 1 h

    [pending] = await handle.pending_approvals()
    await handle.approve(pending.challenge_id, ALICE)
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert done.output == "all done"
    assert ran == ["read_file", "charge_card"]  # the denied call never ran
