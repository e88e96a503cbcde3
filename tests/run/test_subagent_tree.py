"""The tree governed as one (digest §6.2), for the limits that are no spend: an ancestor's
``max_wall_ms`` (on the injected clock) and ``max_turns`` (every turn started in the tree
counts) refuse a child's request with ``budget_exceeded{scope: ancestor, owner_thread_id}``,
and the parent's next request is refused too; a handoff target is covered the same way. And a
cancel of a parent with no open turn whose background children have not reported bars them
(``scope: thread`` on the parent, ``scope: tree`` below) and their ends are still recorded,
without ``woken``."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from threads import (
    Budget,
    BudgetExhausted,
    Completed,
    ControlError,
    HandedOff,
    Parked,
    Permissions,
    Principal,
    agent,
    open_thread,
    tool,
)
from threads.clock import FakeClock
from threads.log.lines import Event
from threads.run.agent import Agent
from threads.run.thread import Thread
from threads.run.worker import Worker
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Note(BaseModel):
    text: str


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def ticking(clock: FakeClock, applied: list[str]) -> object:
    """A tool that takes 2 s of the injected clock."""

    async def slow(args: Note, ctx: object) -> str:
        clock.advance(2_000)
        applied.append(args.text)
        return f"noted {args.text}"

    return tool(name="write_note", description="Write a note.", input=Note, execute=slow,
                effect="idempotent", dedup_window_ms=60_000)


def clerk(note: object, *replies: object, **kwargs: object) -> Agent:
    return agent(name="clerk", model=scripted_model(list(replies)), tools=[note],
                 **kwargs)  # type: ignore[arg-type]


def boss(child: Agent, note: object, *replies: object, **kwargs: object) -> Agent:
    return agent(name="boss", model=scripted_model(list(replies)), instructions="Delegate.",
                 tools=[note], subagents=[child], **kwargs)  # type: ignore[arg-type]


async def kid_events(store: Store, parent_thread: object, index: int = 0) -> list[Event]:
    kids = await parent_thread.children()  # type: ignore[attr-defined]
    return await (await open_thread(store, kids[index].thread_id, principal=ALICE)).timeline()


@pytest.mark.parametrize("level", ["thread", "run"])
async def test_an_ancestors_wall_clock_refuses_the_childs_next_request(
    store: Store, clock: FakeClock, level: str,
) -> None:
    """The parent may take 1 s; its child's tool takes 2 s of the clock: the child's next
    request is refused under the parent's limit (``scope: ancestor``, the parent named), the
    child ends ``budget_exhausted`` and the parent's next request is refused too."""
    applied: list[str] = []
    note = ticking(clock, applied)
    limit = Budget(max_wall_ms=1_000)
    child = clerk(note, use(call("write_note", text="a")), say("never"))
    parent = boss(child, note, use(call("spawn_agent", agent="clerk", prompt="go")),
                  say("never"), **({"budget": limit} if level == "thread" else {}))
    result = await parent.run("go", store=store, principal=ALICE,
                              budget=limit if level == "run" else None)
    assert isinstance(result, BudgetExhausted)
    assert (result.budget.scope, result.budget.limit) == (level, "max_wall_ms")
    assert result.budget.observed >= 2_000
    assert applied == ["a"]
    events = await result.thread.timeline()
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "budget_exhausted"
    theirs = await kid_events(store, result.thread)
    [exceeded] = of_type(theirs, "budget_exceeded")
    assert exceeded.data["observed"] >= 2_000
    assert {k: v for k, v in exceeded.data.items() if k != "observed"} == {
        "limit": "max_wall_ms", "limit_value": 1_000, "observed_is_upper_bound": False,
        "owner_thread_id": result.thread.id, "scope": "ancestor",
    }
    assert len(of_type(theirs, "model_request")) == 1
    assert theirs[-1].data == {"reason": "budget_exhausted"}


async def test_the_childs_own_wall_clock_ends_only_the_child(
    store: Store, clock: FakeClock,
) -> None:
    """The child's own budget (no ancestor's) ends the child; the parent goes on."""
    applied: list[str] = []
    note = ticking(clock, applied)
    child = clerk(note, use(call("write_note", text="a")), say("never"),
                  budget=Budget(max_wall_ms=1_000))
    parent = boss(child, note, use(call("spawn_agent", agent="clerk", prompt="go")),
                  say("the clerk ran out of time"), budget=Budget(max_wall_ms=60_000))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "the clerk ran out of time"
    [exceeded] = of_type(await kid_events(store, result.thread), "budget_exceeded")
    assert (exceeded.data["scope"], exceeded.data["limit"]) == ("thread", "max_wall_ms")


@pytest.mark.parametrize("level", ["thread", "run"])
async def test_every_turn_in_the_tree_counts_against_an_ancestors_max_turns(
    store: Store, clock: FakeClock, level: str,
) -> None:
    """max_turns=2 on the parent: its own turn and the first child's are the two; the second
    child's first request is refused (observed 3, ``scope: ancestor``) and so is the parent's
    next request."""
    applied: list[str] = []
    note = ticking(clock, applied)
    limit = Budget(max_turns=2)
    child = clerk(note, say("one"), say("never"))
    parent = boss(child, note,
                  use(call("spawn_agent", agent="clerk", prompt="first")),
                  use(call("spawn_agent", agent="clerk", prompt="second")),
                  say("never"), **({"budget": limit} if level == "thread" else {}))
    result = await parent.run("go", store=store, principal=ALICE,
                              budget=limit if level == "run" else None)
    assert isinstance(result, BudgetExhausted)
    assert (result.budget.scope, result.budget.limit) == (level, "max_turns")
    assert (result.budget.observed, result.budget.limit_value) == (3, 2)
    events = await result.thread.timeline()
    assert [f.data["status"] for f in of_type(events, "agent_finished")] == [
        "completed", "budget_exhausted"]
    first, second = await kid_events(store, result.thread), await kid_events(
        store, result.thread, 1)
    assert of_type(first, "budget_exceeded") == []
    [exceeded] = of_type(second, "budget_exceeded")
    assert exceeded.data == {
        "limit": "max_turns", "limit_value": 2, "observed": 3,
        "observed_is_upper_bound": False, "owner_thread_id": result.thread.id,
        "scope": "ancestor",
    }
    assert of_type(second, "model_request") == []


async def test_a_thread_opens_no_turn_past_max_turns_counting_its_childrens(
    store: Store, clock: FakeClock,
) -> None:
    """max_turns=2, and the first turn's child took the second: the thread's next input is
    refused where the turn opens (no ``user_input`` is written)."""
    note = ticking(clock, [])
    child = clerk(note, say("one"))
    parent = boss(child, note, use(call("spawn_agent", agent="clerk", prompt="first")),
                  say("done"), say("never"), budget=Budget(max_turns=2))
    first = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(first, Completed)
    again = await parent.run("more", thread=first.thread.id, store=store, principal=ALICE)
    assert isinstance(again, BudgetExhausted)
    assert (again.budget.limit, again.budget.observed, again.budget.scope) == (
        "max_turns", 3, "thread")
    events = await again.thread.timeline()
    assert len(of_type(events, "user_input")) == 1


async def test_a_handoff_target_runs_under_the_sources_wall_clock(
    store: Store, clock: FakeClock,
) -> None:
    """The source's agent may take 1 s; the target's tool takes 2 s: the target's next request
    is refused under the source's limit (``scope: ancestor``, the source named)."""
    applied: list[str] = []
    note = ticking(clock, applied)
    target = agent(name="expert", model=scripted_model([
        use(call("write_note", text="a")), say("never")]), tools=[note])
    source = agent(name="desk", model=scripted_model([use(call("handoff", agent="expert"))]),
                   handoffs=[target], budget=Budget(max_wall_ms=1_000))
    result = await source.run("go", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    ran = result.target
    assert isinstance(ran, BudgetExhausted)
    assert (ran.budget.scope, ran.budget.limit) == ("ancestor", "max_wall_ms")
    assert applied == ["a"]
    [exceeded] = of_type(await ran.thread.timeline(), "budget_exceeded")
    assert exceeded.data["owner_thread_id"] == result.thread.id


async def test_a_handoff_target_counts_against_the_sources_max_turns(store: Store) -> None:
    """max_turns=1 on the source's agent: its turn was the one; the target's first turn is
    the second, refused before any request (``scope: ancestor``)."""
    target = agent(name="expert", model=scripted_model([say("never")]))
    source = agent(name="desk", model=scripted_model([use(call("handoff", agent="expert"))]),
                   handoffs=[target], budget=Budget(max_turns=1))
    result = await source.run("go", store=store, principal=ALICE)
    assert isinstance(result, HandedOff)
    ran = result.target
    assert isinstance(ran, BudgetExhausted)
    assert (ran.budget.scope, ran.budget.limit, ran.budget.observed) == (
        "ancestor", "max_turns", 2)
    assert of_type(await ran.thread.timeline(), "model_request") == []


# ---- cancel of a parent with no open turn ---------------------------------------------------


async def idle_parked_parent(
    store: Store, clock: FakeClock, applied: list[str]
) -> tuple[Agent, Thread]:
    """A parent whose turn is over, parked on its background child that waits for an approval
    of its ``write_note``: the parent agent and a handle on its thread."""
    note = ticking(clock, applied)
    child = clerk(note, use(call("write_note", text="x")), say("never"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child, note,
                  use(call("spawn_agent", agent="clerk", prompt="a", background=True)),
                  say("started"), say("never"))
    parked = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    thread = await open_thread(store, parked.thread.id, principal=ALICE)
    assert (await thread.fold()).turn is None
    return parent, thread


async def test_cancel_of_an_idle_parent_bars_its_parked_background_child(
    store: Store, clock: FakeClock,
) -> None:
    """The parent's turn is over; its background child waits for an approval (the parent is
    parked on it, no turn open). Cancel is accepted: ``cancel_requested{scope: thread}`` on
    the parent, the child barred; the next run records the child's cancelled end (late, no
    ``woken``) and nothing was applied."""
    applied: list[str] = []
    parent, thread = await idle_parked_parent(store, clock, applied)
    await thread.cancel(ALICE)
    own = (await thread.timeline())[-1]
    assert (own.type, own.data) == ("cancel_requested", {"scope": "thread"})
    barrier = (await kid_events(store, thread))[-1]
    assert barrier.data == {"reason": "ancestor cancelled", "scope": "tree"}
    assert barrier.actor == {"kind": "host", "principal": ALICE.to_wire()}

    ended = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert not isinstance(ended, Parked)
    events = await ended.thread.timeline()
    assert of_type(events, "woken") == []
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    [late] = of_type(events, "tool_result_late")
    assert late.data["preview"] == "cancelled: cancelled"
    assert applied == []
    assert [c.status for c in await thread.children()] == ["cancelled"]
    # Every child reported, and the cancel is still the thread's latest word: a second cancel
    # answers with it and records nothing.
    again = await thread.cancel(ALICE)
    assert (again.seq, again.event_id) == (own.seq, own.event_id)
    assert of_type(await thread.timeline(), "cancel_requested") == [own]


async def test_a_second_cancel_of_a_barred_idle_parent_answers_the_first_barrier(
    store: Store, clock: FakeClock,
) -> None:
    """Before any run carried the cancel out: the second cancel returns the barrier the first
    recorded, and neither the parent nor the child gets a second one."""
    _parent, thread = await idle_parked_parent(store, clock, [])
    first = await thread.cancel(ALICE)
    assert await thread.cancel(ALICE) == first
    assert of_type(await thread.timeline(), "cancel_requested") == [first]
    assert len(of_type(await kid_events(store, thread), "cancel_requested")) == 1


async def test_cancel_of_an_idle_parent_keeps_a_finished_childs_true_end(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process died after the background child finished, before the parent recorded it.
    A cancel now bars the child (it has no turn open) and the next run records the child's
    real end (completed) without ``woken``; a second cancel adds nothing to the parent."""
    note = ticking(clock, [])
    child = clerk(note, say("hi"))
    parent = boss(child, note,
                  use(call("spawn_agent", agent="clerk", prompt="hi", background=True)),
                  say("started"), say("never"))
    append = store.append

    async def dies_at_the_report(branch_id: str, events: list[Event], **kwargs: object) -> None:
        if any(e.type == "tool_result_late" for e in events):
            raise RuntimeError("the process died here")
        await append(branch_id, events, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "append", dies_at_the_report)
    with pytest.raises(RuntimeError):
        await parent.run("go", store=store, principal=ALICE)
    monkeypatch.setattr(store, "append", append)
    [info] = [t for t in await store.list_threads(ALICE.tenant)
              if (await (await open_thread(store, t.thread_id, principal=ALICE)).children())]
    thread = await open_thread(store, info.thread_id, principal=ALICE)
    await thread.cancel(ALICE)
    head = (await thread.timeline())[-1].seq
    await thread.cancel(ALICE)  # covered already: the parent gets nothing new
    assert (await thread.timeline())[-1].seq == head
    ended = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert isinstance(ended, Completed)
    events = await ended.thread.timeline()
    assert of_type(events, "woken") == []
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "completed"
    [late] = of_type(events, "tool_result_late")
    assert late.data["preview"] == "hi"


async def test_cancel_of_an_idle_parent_never_starts_an_uncreated_background_child(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process died after ``agent_spawned`` (background), before the child's thread
    existed, and after the parent's turn was over. A cancel, then the next run: the child is
    recorded cancelled with unknown usage and its thread is never created."""
    note = ticking(clock, [])
    child = clerk(note, say("never"))
    parent = boss(child, note,
                  use(call("spawn_agent", agent="clerk", prompt="a", background=True)),
                  say("started"), say("never"))
    create = store.create_branch
    made = 0

    async def dies_at_the_child(header: object, **kwargs: object) -> None:
        nonlocal made
        made += 1
        if made == 2:
            raise RuntimeError("the process died here")
        await create(header, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(store, "create_branch", dies_at_the_child)
    with pytest.raises(RuntimeError):
        await parent.run("go", store=store, principal=ALICE)
    monkeypatch.setattr(store, "create_branch", create)
    [info] = await store.list_threads(ALICE.tenant)
    thread = await open_thread(store, info.thread_id, principal=ALICE)
    [kid] = await thread.children()
    if (await thread.fold()).turn is not None:
        pytest.skip("the background child died before the parent's turn was over")
    await thread.cancel(ALICE)
    ended = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    events = await ended.thread.timeline()
    [finished] = of_type(events, "agent_finished")
    assert finished.data == {"child_thread_id": kid.thread_id, "status": "cancelled",
                             "usage": {"input_tokens": None, "output_tokens": None}}
    assert of_type(events, "woken") == []
    assert [t.thread_id for t in await store.list_threads(ALICE.tenant)] == [thread.id]


async def test_cancel_of_an_idle_thread_without_children_is_not_pending(store: Store) -> None:
    lone = agent(name="lone", model=scripted_model([say("hi")]))
    done = await lone.run("go", store=store, principal=ALICE)
    thread = await open_thread(store, done.thread.id, principal=ALICE)
    with pytest.raises(ControlError) as nothing:
        await thread.cancel(ALICE)
    assert nothing.value.code == "not_pending"


# ---- what a tree budget reads ----------------------------------------------------------------


async def test_a_tree_budget_reads_a_finished_childs_log_once(
    store: Store, clock: FakeClock, chain_reads: list[str],
) -> None:
    """Each of the parent's requests checks its budget over the tree. A child's spend can only
    grow when its log does, so once the child's end is recorded, the parent's next requests
    read its log no more (the run keeps its spend by the log's head)."""
    note = ticking(clock, [])
    child = clerk(note, say("one"))
    parent = boss(child, note,
                  use(call("spawn_agent", agent="clerk", prompt="first")),
                  *[use(call("write_note", text=str(i))) for i in range(6)],
                  say("done"), budget=Budget(max_model_requests=50))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    [kid] = await result.thread.children()
    kid_branch = (await store.root_branch(kid.thread_id)).branch_id
    events = await result.thread.timeline()
    finished = next(e for e in events if e.type == "agent_finished")
    later = [e for e in events if e.type == "model_request" and e.seq > finished.seq]
    assert len(later) == 7
    # read while the child ran, and to record its end (and once more by the spend memo); 9
    # before the memo: once more per request
    assert chain_reads.count(kid_branch) == 3


async def test_a_worker_continues_the_root_after_a_decision_on_the_child(
    store: Store, clock: FakeClock,
) -> None:
    """A grant recorded on the child's thread: a worker runs the tree's root (one run), which
    reruns the child, records its end and completes; the child's thread is not run alone."""
    applied: list[str] = []
    note = ticking(clock, applied)
    child = clerk(note, use(call("write_note", text="x")), say("wrote x"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child, note, use(call("spawn_agent", agent="clerk", prompt="a")),
                  say("all done"))
    parked = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    [kid] = await parked.thread.children()
    kid_thread = await open_thread(store, kid.thread_id, principal=ALICE)
    [approval] = await kid_thread.pending_approvals()
    await kid_thread.approve(approval.challenge_id, ALICE)
    worker = Worker(store, [parent, child], poll_ms=10)
    await worker.run_once()
    assert worker.stats.runs == 1
    assert worker.stats.outcomes == {"completed": 1}
    assert applied == ["x"]
    events = await parked.thread.timeline()
    assert events[-1].data == {"reason": "end_turn"}
    assert [c.status for c in await parked.thread.children()] == ["completed"]
