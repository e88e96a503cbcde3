"""Human controls end to end on a real SQLite store: the run-level permission ceiling,
remembered thread rules, approvals (binding, single use, expiry, approvers, tenants, deny
reasons), cancellation from another handle and from Ctrl-C, and every budget limit."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from test_loop import ALICE, MALLORY, make_tools, types

from threads import (
    Budget,
    BudgetExhausted,
    Cancelled,
    Completed,
    ConfigError,
    ControlError,
    FakeClock,
    NotFoundError,
    Parked,
    Permissions,
    Price,
    Principal,
    StoreError,
    ThreadCost,
    agent,
    open_thread,
    sqlite,
)
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.testing.scripted import ScriptedModel, call, say, scripted_model, use

BOB = Principal("api", "acme", "bob")
DAY_MS = 24 * 60 * 60 * 1000


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


def writer_bot(
    applied: list[str], script: list[Any], **kwargs: Any
) -> Agent:
    return agent(name="t", model=scripted_model(script), tools=make_tools(applied), **kwargs)


def decisions(events: list[Any]) -> list[tuple[str, str]]:
    return [
        (e.data["decision"], e.data["source"]) for e in events if e.type == "permission_decision"
    ]


def results(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "tool_result"]


async def parked_for_approval(store: Store, bot: Agent, **kwargs: Any) -> Parked:
    parked = await bot.run("go", store=store, principal=ALICE, **kwargs)
    assert isinstance(parked, Parked), parked
    assert parked.reason == "awaiting_approval"
    return parked


# ---- permissions: ceiling and thread rules ------------------------------------------------


async def test_ceiling_narrows_never_widens(store: Store) -> None:
    applied: list[str] = []
    script = [use(call("write_file", path="a")), say("ok")]
    denied = await writer_bot(applied, script).run(
        "go", store=store, principal=ALICE, ceiling=Permissions(deny=("write_file",))
    )
    assert isinstance(denied, Completed)
    assert applied == []
    timeline = await denied.thread.timeline()
    assert decisions(timeline) == [("deny", "policy")]
    assert results(timeline)[0]["origin"] == "denied"
    # an agent deny is not opened by a permissive ceiling
    strict = writer_bot(applied, script, permissions=Permissions(deny=("write_file",)))
    still = await strict.run(
        "go", store=store, principal=ALICE, ceiling=Permissions(allow=("write_file",))
    )
    assert decisions(await still.thread.timeline()) == [("deny", "policy")]
    # a ceiling ask parks a call the agent allows
    asked = await writer_bot(applied, script).run(
        "go", store=store, principal=ALICE, ceiling=Permissions(ask=("write_file",))
    )
    assert isinstance(asked, Parked)
    assert applied == []


async def test_dont_ask_ceiling_turns_the_agents_ask_into_deny(store: Store) -> None:
    applied: list[str] = []
    bot = writer_bot(
        applied,
        [use(call("write_file", path="a")), say("ok")],
        permissions=Permissions(ask=("write_file",)),
    )
    result = await bot.run("go", store=store, principal=ALICE, ceiling=Permissions("dont_ask"))
    assert isinstance(result, Completed)
    assert decisions(await result.thread.timeline()) == [("deny", "mode")]


async def test_ceiling_is_checked_again_at_dispatch_on_a_rerun(store: Store) -> None:
    applied: list[str] = []
    script = [use(call("write_file", path="a")), say("ok")]
    bot = writer_bot(applied, script, permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    await handle.approve(pending.challenge_id, ALICE)
    rerun = await bot.run(
        None, store=store, thread=parked.thread.id, principal=ALICE,
        ceiling=Permissions(deny=("write_file",)),
    )
    assert isinstance(rerun, Completed)
    assert applied == []
    [res] = results(await handle.timeline())
    assert res["origin"] == "denied"
    assert "ceiling" in res["preview"]


async def test_remember_rule_allows_later_matching_calls(store: Store) -> None:
    applied: list[str] = []
    script = [
        use(call("write_file", "c1", path="b1")),
        use(call("write_file", "c2", path="b2")),
        use(call("write_file", "c3", path="secret")),
        say("ok"),
    ]
    bot = writer_bot(
        applied, script, permissions=Permissions(ask=("write_file",), deny=("write_file(path:s*)",))
    )
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    with pytest.raises(ControlError) as bad:
        await handle.approve(pending.challenge_id, ALICE, remember_rule="Write(")
    assert bad.value.code == "permission_rule_invalid"
    with pytest.raises(ControlError) as wide:
        await handle.approve(pending.challenge_id, ALICE, remember_rule="read_file")
    assert wide.value.code == "invalid_argument"
    await handle.approve(pending.challenge_id, ALICE, remember_rule="write_file(path:b*)")
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    timeline = await handle.timeline()
    [added] = [e for e in timeline if e.type == "permission_rule_added"]
    assert added.data == {
        "challenge_id": pending.challenge_id, "decision": "allow", "rule": "write_file(path:b*)"
    }
    assert added.actor == {"kind": "approver", "principal": ALICE.to_wire()}
    # c2 allowed by the remembered rule; c3 still denied by the deny rule
    assert decisions(timeline) == [("ask", "policy"), ("allow", "thread_rule"), ("deny", "policy")]
    assert len(applied) == 2


# ---- approvals ---------------------------------------------------------------------------


async def test_grant_binds_to_the_args_hash(store: Store) -> None:
    bot = writer_bot([], [use(call("write_file", path="a")), say("ok")],
                     permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    with pytest.raises(ControlError) as mismatch:
        await handle.approve(pending.challenge_id, ALICE, args_hash="0" * 64)
    assert mismatch.value.code == "approval_mismatch"
    await handle.approve(pending.challenge_id, ALICE, args_hash=pending.args_hash)
    with pytest.raises(ControlError) as again:
        await handle.deny(pending.challenge_id, ALICE)
    assert again.value.code == "approval_duplicate"


async def test_expired_approval_counts_as_denied(store: Store, clock: FakeClock) -> None:
    applied: list[str] = []
    bot = writer_bot(applied, [use(call("write_file", path="a")), say("ok")],
                     permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    clock.advance(DAY_MS + 1)
    with pytest.raises(ControlError) as late:
        await handle.approve(pending.challenge_id, ALICE)
    assert late.value.code == "approval_expired"
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert applied == []
    [res] = results(await handle.timeline())
    assert res["origin"] == "denied"
    assert "approval_expired" in res["preview"]
    with pytest.raises(ControlError) as after:
        await handle.approve(pending.challenge_id, ALICE)
    assert after.value.code == "approval_expired"


async def test_deny_reason_is_shown_to_the_model(store: Store) -> None:
    model = scripted_model([use(call("write_file", path="a")), say("ok")])
    bot = agent(name="t", model=model, tools=make_tools([]),
                permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    await handle.deny(pending.challenge_id, ALICE, reason="not on a Friday")
    assert isinstance(
        await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE), Completed
    )
    [tool_message] = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert "not on a Friday" in json.dumps(tool_message)


async def test_agent_approvers_are_enforced(store: Store) -> None:
    applied: list[str] = []
    script = [use(call("write_file", path="a")), say("ok")]
    bot = writer_bot(applied, script, permissions=Permissions(ask=("write_file",)),
                     approvers=[BOB])
    parked = await parked_for_approval(store, bot)
    [pending] = await parked.thread.pending_approvals()
    # the run's own handle knows the agent's approvers: the starter is not one
    with pytest.raises(ControlError) as starter:
        await parked.thread.approve(pending.challenge_id, ALICE)
    assert starter.value.code == "forbidden"
    # a handle opened without the agent falls back to the starter; the run then checks the
    # grant against the agent's approvers before acting on it: it counts as not made, and the
    # call waits on a new challenge
    bare = await open_thread(store, parked.thread.id)
    await bare.approve(pending.challenge_id, ALICE)
    again = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(again, Parked)
    assert again.reason == "awaiting_approval"
    assert applied == []
    assert results(await bare.timeline()) == []
    [fresh] = await bare.pending_approvals()
    assert fresh.challenge_id != pending.challenge_id
    await (await open_thread(store, parked.thread.id, agent=bot)).approve(fresh.challenge_id, BOB)
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(applied) == 1


async def test_an_agent_approver_grant_runs_the_call(store: Store) -> None:
    applied: list[str] = []
    bot = writer_bot(applied, [use(call("write_file", path="a")), say("ok")],
                     permissions=Permissions(ask=("write_file",)), approvers=[BOB])
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id, agent=bot, approvers=[BOB])
    [pending] = await handle.pending_approvals()
    await handle.approve(pending.challenge_id, BOB)
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(applied) == 1


async def test_another_tenant_is_never_allowed(store: Store) -> None:
    bot = writer_bot([], [use(call("write_file", path="a")), say("ok")],
                     permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id, approvers=[MALLORY])
    [pending] = await handle.pending_approvals()
    for action in (
        handle.approve(pending.challenge_id, MALLORY),
        handle.deny(pending.challenge_id, MALLORY),
        handle.cancel(MALLORY),
    ):
        with pytest.raises(ControlError) as refused:
            await action
        assert refused.value.code == "forbidden"
    with pytest.raises(NotFoundError):
        await open_thread(store, parked.thread.id, principal=MALLORY)


# ---- cancellation ------------------------------------------------------------------------


async def test_cancel_is_branch_busy_while_a_run_holds_the_thread(store: Store) -> None:
    bot = writer_bot([], [use(call("write_file", path="a")), say("ok")],
                     permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    branch = await store.root_branch(parked.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "a-live-run", 60_000)
    handle = await open_thread(store, parked.thread.id)
    with pytest.raises(StoreError) as busy:
        await handle.cancel(ALICE)
    assert busy.value.code == "branch_busy"
    await store.release_lease(lease)
    barrier = await handle.cancel(ALICE)  # no run holds it now
    assert (barrier.type, barrier.data) == ("cancel_requested", {"scope": "turn"})
    assert await handle.cancel(ALICE) == barrier  # in force already: nothing new
    result = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(result, Cancelled)
    timeline = await handle.timeline()
    assert types(timeline)[-2:] == ["cancelled", "turn_completed"]
    assert await handle.cancel(ALICE) == barrier  # the thread's latest word: the same answer
    assert types(await handle.timeline()) == types(timeline)
    assert sum(e.type == "cancel_requested" for e in timeline) == 1


async def test_cancel_after_a_later_turn_is_not_pending(store: Store) -> None:
    """A cancel carried out stops being the answer once a later turn ended otherwise."""
    bot = writer_bot([], [use(call("write_file", path="a")), say("again")],
                     permissions=Permissions(ask=("write_file",)))
    parked = await parked_for_approval(store, bot)
    handle = await open_thread(store, parked.thread.id)
    await handle.cancel(ALICE)
    assert isinstance(await bot.run(None, store=store, thread=parked.thread.id,
                                    principal=ALICE), Cancelled)
    assert isinstance(await bot.run("hello", store=store, thread=parked.thread.id,
                                    principal=ALICE), Completed)
    with pytest.raises(ControlError) as idle:
        await handle.cancel(ALICE)
    assert idle.value.code == "not_pending"


CTRL_C_SCRIPT = """
import sys
from pydantic import BaseModel
from threads import Principal, agent, sqlite, tool
from threads.testing.scripted import call, say, scripted_model, use

class Path_(BaseModel):
    path: str

async def wait(args, ctx):
    print("started", flush=True)
    await ctx.cancelled.wait()
    return "stopped"

async def write(args, ctx):
    print("WROTE", flush=True)
    return "written"

bot = agent(name="t", model=scripted_model(
    [use(call("wait", path="a")), use(call("write_file", path="b")), say("done")]),
    tools=[tool(name="wait", description="Wait.", input=Path_, execute=wait, effect="read_only"),
           tool(name="write_file", description="Write.", input=Path_, execute=write)])
result = bot.run_sync("go", store=sqlite(sys.argv[1]),
                      principal=Principal("api", "acme", "alice"))
print(result.status, result.thread.id, flush=True)
"""


def test_ctrl_c_on_run_sync_cancels_durably(tmp_path: Path) -> None:
    store_dir = tmp_path / "store"
    proc = subprocess.Popen(
        [sys.executable, "-c", CTRL_C_SCRIPT, str(store_dir)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    assert proc.stdout is not None
    assert proc.stdout.readline().strip() == "started"
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    status, thread_id = out.split()
    assert status == "cancelled"
    assert "WROTE" not in out

    async def check() -> None:
        store = sqlite(store_dir)
        try:
            timeline = await (await open_thread(store, thread_id)).timeline()
        finally:
            await store.close()
        [request] = [e for e in timeline if e.type == "cancel_requested"]
        assert request.actor["principal"]["subject"] == "alice"
        assert types(timeline)[-2:] == ["cancelled", "turn_completed"]
        # no model request after the interrupt: the write was never even asked for
        assert types(timeline).count("model_request") == 1
        assert "write_file" not in [e.data.get("name") for e in timeline]

    asyncio.run(check())


# ---- budgets -----------------------------------------------------------------------------

PRICE = Price(input=2, output=10)


def priced_bot(script: list[Any], budget: Budget | None = None, **kwargs: Any) -> Agent:
    model = scripted_model(script, context_window=1000, max_output_tokens=100, price=PRICE)
    return agent(name="t", model=model, tools=make_tools([]), budget=budget, **kwargs)


LOOP = [use(call("read_file", path="a")), use(call("read_file", path="b")), say("done")]
BOUND_IN, BOUND_OUT = 1000, 100
BOUND_COST = BOUND_IN * 2 + BOUND_OUT * 10


@pytest.mark.parametrize(
    ("limit", "value", "observed", "upper"),
    [
        ("max_model_requests", 2, 3, False),
        ("max_input_tokens", 1005, 10 + BOUND_IN, True),
        ("max_output_tokens", 102, 5 + BOUND_OUT, True),
        ("max_cost_nanos", 3000, 10 * 2 + 5 * 10 + BOUND_COST, True),
    ],
)
async def test_each_request_limit_stops_before_sending(
    store: Store, limit: str, value: int, observed: int, upper: bool
) -> None:
    bot = priced_bot(list(LOOP), Budget(**{limit: value}))
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)
    info = result.budget
    assert (info.limit, info.limit_value, info.scope) == (limit, value, "thread")
    assert (info.observed, info.observed_is_upper_bound) == (observed, upper)
    assert info.observed > info.limit_value
    timeline = await result.thread.timeline()
    assert types(timeline)[-2:] == ["budget_exceeded", "turn_completed"]
    assert types(timeline).count("model_request") == (2 if limit == "max_model_requests" else 1)


async def test_run_budget_is_per_run_and_agent_budget_per_thread(store: Store) -> None:
    bot = priced_bot([say("one"), say("two"), say("three")], Budget(max_turns=2))
    first = await bot.run("a", store=store, principal=ALICE, budget=Budget(max_model_requests=1))
    assert isinstance(first, Completed)
    [opened] = [e for e in await first.thread.timeline() if e.type == "user_input"]
    assert opened.data["budget"] == {"max_model_requests": 1}
    # a new run gets a fresh run budget
    second = await bot.run("b", store=store, thread=first.thread.id, principal=ALICE,
                           budget=Budget(max_model_requests=1))
    assert isinstance(second, Completed)
    third = await bot.run("c", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(third, BudgetExhausted)
    assert (third.budget.limit, third.budget.scope, third.budget.observed) == ("max_turns",
                                                                                "thread", 3)


async def test_run_scope_is_reported(store: Store) -> None:
    result = await priced_bot(list(LOOP)).run(
        "go", store=store, principal=ALICE, budget=Budget(max_model_requests=1)
    )
    assert isinstance(result, BudgetExhausted)
    assert (result.budget.scope, result.budget.limit) == ("run", "max_model_requests")


async def test_wall_clock_limit(store: Store, clock: FakeClock) -> None:
    async def slow(args: Any, ctx: Any) -> str:
        clock.advance(5_000)
        return "slow"

    from test_loop import Path_

    from threads import tool

    bot = agent(
        name="t", model=scripted_model([use(call("slow", path="a")), say("never")]),
        tools=[tool(name="slow", description="Slow.", input=Path_, execute=slow,
                    effect="read_only")],
        budget=Budget(max_wall_ms=1_000),
    )
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)
    assert (result.budget.limit, result.budget.observed) == ("max_wall_ms", 5_000)
    assert result.budget.observed_is_upper_bound is False


def test_cost_limit_without_price_is_refused_at_setup() -> None:
    model = scripted_model([say("x")])
    with pytest.raises(ConfigError) as at_agent:
        agent(name="t", model=model, budget=Budget(max_cost_nanos=10))
    assert at_agent.value.code == "budget_unenforceable"


class _NoMaxTokens(ScriptedModel):
    def params(self) -> dict[str, Any]:
        return {"temperature": 0}  # no max_tokens: a request's output has no pinned bound


def test_cost_limit_without_a_pinned_max_tokens_is_refused_at_setup() -> None:
    model = _NoMaxTokens([say("x")], price=PRICE)
    with pytest.raises(ConfigError) as at_agent:
        agent(name="t", model=model, budget=Budget(max_cost_nanos=10))
    assert at_agent.value.code == "budget_unenforceable"
    assert "max_tokens" in at_agent.value.message
    agent(name="t", model=model, budget=Budget(max_model_requests=1))  # other limits need none


async def test_run_cost_limit_without_price_is_refused(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("x")]))
    with pytest.raises(ConfigError) as at_run:
        await bot.run("go", store=store, budget=Budget(max_cost_nanos=10))
    assert at_run.value.code == "budget_unenforceable"
    assert await store.list_threads() == []  # refused before anything was written


async def test_usage_and_cost_read_back_with_unreported_usage_at_its_bound(
    store: Store,
) -> None:
    script = [use(call("read_file", path="a"), usage=(None, None)), say("done", usage=(7, 3))]
    bot = priced_bot(script, Budget(max_cost_nanos=BOUND_COST * 2 - 1))
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)  # the unreported reply counted at its bound
    assert result.budget.observed == 2 * BOUND_COST
    handle = await open_thread(store, result.thread.id)
    usage = await handle.usage()
    assert (usage.model_requests, usage.unknown_responses) == (1, 1)
    cost = await handle.cost()
    assert cost is not None
    assert cost.known_nanos == 0
    assert cost.upper_bound_nanos == BOUND_COST
    assert cost.complete is False

    done = await priced_bot([say("hi", usage=(7, 3))]).run("go", store=store, principal=ALICE)
    assert await done.thread.cost() == ThreadCost(
        currency="USD", known_nanos=7 * 2 + 3 * 10,
        upper_bound_nanos=7 * 2 + 3 * 10, complete=True, bounded=True,
    )
    assert (await done.thread.usage()).input_tokens == 7


async def test_cost_without_a_price_is_absent_not_free(store: Store) -> None:
    done = await agent(name="t", model=scripted_model([say("hi", usage=(7, 3))])).run(
        "go", store=store, principal=ALICE
    )
    assert await done.thread.cost() is None  # no price, so no currency: no cost projection
    assert (await done.thread.usage()).input_tokens == 7  # tokens are still counted


async def test_the_budget_guard_and_the_cost_projection_agree(store: Store) -> None:
    """One arithmetic: what the guard counts as spent is the projection's upper bound, and
    what it reserves is the format's attempt bound (a full window at the highest input-side
    price, here ``cache_write``, plus the pinned ``max_tokens`` at the output price)."""
    price = Price(input=2, output=10, cache_read=1, cache_write=5)
    bound = 1000 * 5 + 100 * 10
    model = scripted_model(
        [use(call("read_file", path="a"), usage=(None, None)), say("done", usage=(7, 3))],
        context_window=1000, max_output_tokens=100, price=price,
    )
    bot = agent(name="t", model=model, tools=make_tools([]),
                budget=Budget(max_cost_nanos=2 * bound - 1))
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)
    cost = await result.thread.cost()
    assert cost is not None
    assert (cost.known_nanos, cost.upper_bound_nanos) == (0, bound)
    assert result.budget.observed == cost.upper_bound_nanos + bound
