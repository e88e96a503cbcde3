"""Handoffs in the real loop: ``agent(handoffs=[...])`` pins the targets, the ``handoff`` tool and
the system line; a listed target is one append (``handoff`` + result + ``turn_completed{handoff}``)
after which the reply's other calls never run; the target thread names its parent, gets the
forwarded transcript and the source's last input, and its first turn runs inside the same run;
an unlisted target is ``not_executed``; the source then takes no new input (rule 26) and a
rerun returns the same ``HandedOff``; the target runs under the source run's ceiling."""

from __future__ import annotations

import pytest

from threads import (
    Agent,
    Budget,
    BudgetExhausted,
    Completed,
    ConfigError,
    Failed,
    HandedOff,
    Permissions,
    Principal,
    agent,
    open_thread,
    tool,
)
from threads.errors import LogError
from threads.log.lines import Draft, Event
from threads.run.handoff_transcript import transcript
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing import Reply, call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
looked: list[int] = []
refunded: list[int] = []


@tool(effect="read_only")
def lookup_order(order: int) -> str:
    """Look an order up."""
    looked.append(order)
    return f"order {order}: paid"


@tool(effect="read_only")
def refund(order: int) -> str:
    """Refund an order."""
    refunded.append(order)
    return f"refunded {order}"


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def billing(*replies: Reply) -> Agent:
    script = list(replies) or [say("Your refund is on its way.")]
    return agent(name="billing", model=scripted_model(script), tools=[refund],
                 instructions="You handle billing.")


def triage(script: list[Reply]) -> Agent:
    return agent(name="triage", model=scripted_model(script),
                 instructions="You route customers.", tools=[lookup_order],
                 handoffs=[billing()])


HANDING_OFF = [
    use(call("lookup_order", "c1", order=42)),
    use(call("handoff", "h1", agent="billing"), call("lookup_order", "c3", order=7),
        text="Billing will take it from here."),
]


async def test_a_handoff_moves_the_conversation_to_a_new_thread(store: Store) -> None:
    looked.clear()
    bot = triage(HANDING_OFF)
    result = await bot.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    assert result.status == "handed_off"
    assert result.to_agent == "billing"
    assert isinstance(result.target, Completed)
    assert result.target.output == "Your refund is on its way."
    assert looked == [42]  # c3, after the handoff in the same reply, never ran

    source = await result.thread.timeline()
    started = source[0].data
    assert started["policy"]["handoffs"] == ["billing"]
    assert started["instructions"] == (
        "You route customers.\n\nAgents you can hand the conversation to: billing."
    )
    assert "handoff" in [t["name"] for t in started["tools"]]
    handoff, result_of_h1, ended = source[-3:]
    assert handoff.type == "handoff"
    assert handoff.data["call_id"] == "h1"
    assert handoff.data["to_agent"] == "billing"
    assert handoff.data["forwarded"] == "transcript"
    assert handoff.data["to_thread_id"] == result.to_thread.id
    assert result_of_h1.type == "tool_result"
    assert result_of_h1.data["preview"] == "handed off to billing"
    assert (result_of_h1.data["origin"], result_of_h1.data["is_error"]) == ("executed", False)
    assert (ended.type, ended.data) == ("turn_completed", {"reason": "handoff"})
    assert "c3" not in {e.data["call_id"] for e in of_type(source, "tool_result")}

    forwarded = await store.get_artifact(handoff.data["forwarded_ref"]["sha256"])
    assert handoff.data["forwarded_ref"]["media_type"] == "text/plain"
    assert forwarded.decode() == "\n".join([
        "user: Refund order 42",
        'tool_call c1 lookup_order: {"order":42}',
        "tool_result c1: order 42: paid",
        "assistant: Billing will take it from here.",
        'tool_call c3 lookup_order: {"order":7}',
    ])

    target = await result.to_thread.timeline()
    first = target[0].data
    assert first["agent_name"] == "billing"
    assert first["parent"] == {
        "branch_id": source[0].branch_id, "event_id": handoff.event_id,
        "relation": "handoff", "thread_id": result.thread.id,
    }
    injected, said = target[1], target[2]
    assert injected.type == "injected"
    assert injected.data == {
        "origin": {"id": result.thread.id}, "ref": handoff.data["forwarded_ref"],
        "source": "handoff", "trust": "untrusted_reference",
    }
    assert said.type == "user_input"
    assert said.data == {"source": "handoff", "text": "Refund order 42"}
    assert said.actor == {"kind": "user", "principal": ALICE.to_wire()}
    assert of_type(target, "turn_completed")[-1].data == {"reason": "end_turn"}


async def test_rerunning_the_source_returns_the_same_and_refuses_input(store: Store) -> None:
    bot = triage(HANDING_OFF)
    first = await bot.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(first, HandedOff)
    source_len = len(await first.thread.timeline())
    target_len = len(await first.to_thread.timeline())

    again = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(again, HandedOff)
    assert again.to_thread.id == first.to_thread.id
    assert isinstance(again.target, Completed)
    assert again.target.output == "Your refund is on its way."
    assert len(await first.thread.timeline()) == source_len  # nothing new on either thread
    assert len(await first.to_thread.timeline()) == target_len

    refused = await bot.run("one more thing", store=store, thread=first.thread.id,
                            principal=ALICE)
    assert isinstance(refused, Failed)
    assert refused.error.code == "invalid_transition"
    assert first.to_thread.id in refused.error.message
    handoff = of_type(await first.thread.timeline(), "handoff")[0]
    assert refused.error.seq == handoff.seq
    assert len(await first.thread.timeline()) == source_len


@pytest.mark.parametrize("kind", ["user_input", "steer", "model_request"])
async def test_no_writer_appends_input_or_a_request_after_a_handoff(
    store: Store, kind: str
) -> None:
    """Rule 26 on write: the writer's fold refuses the event before anything is stored."""
    result = await triage(HANDING_OFF).run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    branch = await store.root_branch(result.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "someone", 60_000)
    chain = await store.read_chain(branch.branch_id)
    writer = BranchWriter(store, lease, chain.fold(store.clock.now_ms()))
    data: dict[str, object] = {"source": "api", "text": "one more"}
    actor: dict[str, object] = {"kind": "user", "principal": ALICE.to_wire()}
    if kind == "model_request":
        data = {"attempt": 1, "declared_prefix": {"bytes": 1, "sha256": "0" * 64},
                "request_ref": {"bytes": 1, "media_type": "application/json",
                                "sha256": "0" * 64}}
        actor = {"kind": "host"}
    try:
        with pytest.raises(LogError) as exc:
            await writer.append([Draft(kind, data, actor)])
        assert exc.value.code == "invalid_transition"
        assert "handed off" in exc.value.message
    finally:
        await writer.close()
    assert (await store.get_branch(branch.branch_id)).head_seq == branch.head_seq


async def test_an_unlisted_target_is_not_executed(store: Store) -> None:
    bot = triage([use(call("handoff", "h1", agent="sales")), say("I'll help you myself.")])
    result = await bot.run("hi", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "I'll help you myself."
    events = await result.thread.timeline()
    [refused] = of_type(events, "tool_result")
    assert refused.data["preview"] == "sales is not a handoff target of this agent"
    assert (refused.data["origin"], refused.data["is_error"]) == ("not_executed", True)
    assert not of_type(events, "handoff")


async def test_the_target_runs_under_the_source_runs_ceiling(store: Store) -> None:
    refunded.clear()
    target = agent(name="billing", model=scripted_model([
        use(call("refund", "r1", order=42)), say("I could not refund it."),
    ]), tools=[refund])
    bot = agent(name="triage", model=scripted_model([use(call("handoff", "h1", agent="billing"))]),
                handoffs=[target])
    result = await bot.run("Refund order 42", store=store, principal=ALICE,
                           ceiling=Permissions(deny=["refund"]))
    assert isinstance(result, HandedOff)
    assert isinstance(result.target, Completed)
    assert refunded == []
    [denied] = of_type(await result.to_thread.timeline(), "tool_result")
    assert denied.data["origin"] == "denied"


async def test_the_target_can_be_opened_and_continued_on_its_own(store: Store) -> None:
    bot = triage(HANDING_OFF)
    result = await bot.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    opened = await open_thread(store, result.to_thread.id)
    assert (await opened.state()).status == "idle"
    # a scripted model answers by the thread's request count: its first reply was the first turn's
    follow_up = billing(say("Your refund is on its way."), say("Refunds take 3 days."))
    more = await follow_up.run("How long?", store=store, thread=result.to_thread.id,
                               principal=ALICE)
    assert isinstance(more, Completed)
    assert more.output == "Refunds take 3 days."


def test_handoff_targets_are_checked_when_the_agent_is_made() -> None:
    model = scripted_model([])
    with pytest.raises(ConfigError) as exc:
        agent(name="a", model=model, handoffs=[agent(name="a", model=model)])
    assert exc.value.code == "invalid_config"
    with pytest.raises(ConfigError) as exc:
        agent(name="a", model=model,
              handoffs=[agent(name="b", model=model), agent(name="b", model=model)])
    assert exc.value.code == "duplicate_name"


def test_tool_lines_are_capped_oldest_first() -> None:
    def event(seq: int, type_: str, data: dict[str, object]) -> Event:
        return Event(seq=seq, event_id=f"e{seq}", thread_id="t", branch_id="b", epoch=1,
                     type=type_, type_version=1, time=seq, actor={"kind": "host"},
                     prev_hash="", critical=True, data=data, line=b"", hash="")

    events = [
        event(1, "user_input", {"source": "api", "text": "hi"}),
        event(2, "tool_call", {"call_id": "a", "name": "x", "input": {}, "request_event_id": "r"}),
        event(3, "tool_result", {"call_id": "a", "preview": "1", "is_error": True,
                                 "origin": "executed", "completeness": "complete"}),
        event(4, "tool_call", {"call_id": "b", "name": "x", "input": {}, "request_event_id": "r"}),
        event(5, "tool_result", {"call_id": "b", "preview": "2", "is_error": False,
                                 "origin": "executed", "completeness": "complete"}),
    ]
    full = transcript(events, "h", 10_000).decode()
    assert full.splitlines() == [
        "user: hi", "tool_call a x: {}", "tool_result a (error): 1", "tool_call b x: {}",
        "tool_result b: 2",
    ]
    kept = len("tool_call b x: {}\n") + len("tool_result b: 2\n")
    capped = transcript(events, "h", kept).decode()
    assert capped.splitlines() == [
        "user: hi", "[2 earlier tool lines dropped]", "tool_call b x: {}", "tool_result b: 2",
    ]


async def test_the_budgets_that_covered_the_source_cover_the_target(store: Store) -> None:
    """The source's agent budget and the handing-off run's budget cover the target as ancestor
    budgets, with what the source spent before the handoff counted: the target's request past
    either is refused ``budget_exceeded{scope: ancestor}`` naming the source thread."""
    for limits in ({"agent": Budget(max_model_requests=3)},
                   {"run": Budget(max_model_requests=3)}):
        target = billing(use(call("refund", "r1", order=42)), say("Refunded."))
        bot = agent(name="triage", model=scripted_model(HANDING_OFF), tools=[lookup_order],
                    handoffs=[target], budget=limits.get("agent"))
        result = await bot.run("Refund order 42", store=store, principal=ALICE,
                               budget=limits.get("run"))
        assert isinstance(result, HandedOff)
        # the source made 2 requests; the target's first (3rd in the tree) is allowed, its
        # second would be the 4th
        assert isinstance(result.target, BudgetExhausted), limits
        assert result.target.budget.scope == "ancestor"
        events = await result.to_thread.timeline()
        [refused] = of_type(events, "budget_exceeded")
        assert refused.data["scope"] == "ancestor"
        assert refused.data["owner_thread_id"] == result.thread.id
        assert len(of_type(events, "model_request")) == 1


async def test_a_later_run_of_the_target_is_bound_by_the_sources_agent_budget(
    store: Store,
) -> None:
    """The source's agent budget covers the target for as long as it is in force (the source's
    life): a later ``Agent.run(thread=target)`` reads it again, with the source's spend and the
    target's own counted. Computed once at the handoff, it once bound only the first turn."""
    target = billing(say("Hello."), say("never: the tree's fourth request"))
    bot = agent(name="triage", model=scripted_model(HANDING_OFF), tools=[lookup_order],
                handoffs=[target], budget=Budget(max_model_requests=3))
    result = await bot.run("Refund order 42", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    assert isinstance(result.target, Completed)  # the third request of the tree
    later = await target.run("One more thing", thread=result.to_thread.id, store=store,
                             principal=ALICE)
    assert isinstance(later, BudgetExhausted), later
    assert (later.budget.scope, later.budget.limit, later.budget.observed) == (
        "ancestor", "max_model_requests", 4)
    [refused] = of_type(await later.thread.timeline(), "budget_exceeded")
    assert refused.data["owner_thread_id"] == result.thread.id


async def test_a_rerun_of_the_targets_first_turn_is_bound_by_the_handing_off_run(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The run that handed off had a budget; the process died in the target's first turn. The
    rerun of the target (that turn still open) is bound by that run's budget too, and a later
    turn of the target, a run of its own, is not."""
    target = billing(use(call("refund", "r1", order=42)), say("Refunded."), say("Later."))
    bot = agent(name="triage", model=scripted_model(HANDING_OFF), tools=[lookup_order],
                handoffs=[target])
    append = store.append
    dead: list[str] = []

    async def dies_at_the_refund(branch_id: str, events: list[Event], **kwargs: object) -> None:
        if not dead and any(e.type == "tool_result" and e.data["call_id"] == "r1"
                            for e in events):
            dead.append(branch_id)
            raise RuntimeError("the process died here")  # before the refund's result
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append", dies_at_the_refund)
    with pytest.raises(RuntimeError):
        await bot.run("Refund order 42", store=store, principal=ALICE,
                      budget=Budget(max_model_requests=3))
    monkeypatch.setattr(store, "append", append)
    [source_id] = [t.thread_id for t in await store.list_threads(ALICE.tenant)
                   if t.branch_id != dead[0]]
    target_id = next(t.thread_id for t in await store.list_threads(ALICE.tenant)
                     if t.branch_id == dead[0])
    rerun = await target.run(None, thread=target_id, store=store, principal=ALICE)
    assert isinstance(rerun, BudgetExhausted), rerun  # its 2nd request: the tree's 4th
    assert (rerun.budget.scope, rerun.budget.limit) == ("ancestor", "max_model_requests")
    [refused] = of_type(await rerun.thread.timeline(), "budget_exceeded")
    assert refused.data["owner_thread_id"] == source_id
    later = await target.run("And now?", thread=target_id, store=store, principal=ALICE)
    assert isinstance(later, Completed), later  # the handing-off run is over: not in force
