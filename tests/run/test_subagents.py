"""Subagents in the real loop (``agent(..., subagents=[...])``, ``threads.run.spawn``): the
``spawn_agent`` tool and its system line are pinned; a call that can't spawn is closed
``not_executed`` with the digest's words and nothing is spawned; a spawn records
``agent_spawned`` before the child's thread exists, the child's thread names it as parent,
starts from the prompt (``source: parent_agent``) and has only tools its parent has; the
child's end comes back in one append (``agent_finished`` + ``tool_result``), its output (or
structured output as canonical JSON) as the call's result, usage summed; ``Thread.children()``
lists the children. Both engines."""

from __future__ import annotations

import asyncio

import pytest
from pydantic import BaseModel

from threads import (
    Budget,
    BudgetExhausted,
    Cancelled,
    Completed,
    ControlError,
    Failed,
    Parked,
    Permissions,
    Principal,
    RunResult,
    agent,
    open_thread,
    tool,
)
from threads.errors import ConfigError
from threads.log.lines import Event
from threads.run import runner
from threads.run.agent import Agent
from threads.run.child_run import ChildRun
from threads.run.worker import Worker
from threads.store.protocol import Store
from threads.testing import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
BOB = Principal("api", "acme", "bob")


class Note(BaseModel):
    text: str


class Verdict(BaseModel):
    fixed: bool


applied: list[str] = []


async def write_note(args: Note, ctx: object) -> str:
    applied.append(args.text)
    return f"noted {args.text}"


async def secret(args: Note, ctx: object) -> str:
    return "never"


NOTE = tool(name="write_note", description="Write a note.", input=Note, execute=write_note,
            effect="idempotent", dedup_window_ms=60_000)
SECRET = tool(name="secret", description="Only the child has it.", input=Note, execute=secret)


def of_type(events: list[Event], type_: str) -> list[Event]:
    return [e for e in events if e.type == type_]


def clerk(*replies: object, **kwargs: object) -> Agent:
    return agent(name="clerk", model=scripted_model(list(replies)), tools=[NOTE, SECRET],
                 **kwargs)  # type: ignore[arg-type]


def boss(child: Agent, *replies: object, **kwargs: object) -> Agent:
    return agent(name="boss", model=scripted_model(list(replies)), instructions="Delegate.",
                 tools=[NOTE], subagents=[child], **kwargs)  # type: ignore[arg-type]


async def test_a_foreground_child_runs_in_its_own_thread_and_answers_the_call(
    store: Store,
) -> None:
    applied.clear()
    child = clerk(use(call("write_note", text="hi")), say("wrote hi"))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="write hi")), say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "done"
    assert applied == ["hi"]
    events = await result.thread.timeline()
    started = events[0].data
    assert started["instructions"] == (
        "Delegate.\n\nSubagents you can start with spawn_agent: clerk."
    )
    spawn_spec = next(t for t in started["tools"] if t["name"] == "spawn_agent")
    assert spawn_spec["effect_class"] == "read_only"
    [spawned] = of_type(events, "agent_spawned")
    assert spawned.data["mode"] == "foreground"
    assert spawned.data["isolation"] == "none"
    assert spawned.data["agent_name"] == "clerk"
    child_id = spawned.data["child_thread_id"]
    finished_at = next(i for i, e in enumerate(events) if e.type == "agent_finished")
    finished, shown = events[finished_at], events[finished_at + 1]
    assert shown.type == "tool_result"
    assert shown.seq == finished.seq + 1
    assert finished.data["status"] == "completed"
    assert finished.data["usage"] == {"input_tokens": 20, "output_tokens": 10}
    assert shown.data["preview"] == "wrote hi"
    assert not shown.data["is_error"]
    assert shown.data["origin"] == "executed"
    output = await store.get_artifact(finished.data["output_ref"]["sha256"])
    assert output == b"wrote hi"

    kid = await open_thread(store, child_id, principal=ALICE)
    kid_events = await kid.timeline()
    assert kid_events[0].data["parent"] == {
        "branch_id": (await result.thread.branches())[0].branch_id,
        "event_id": spawned.event_id, "relation": "subagent", "thread_id": result.thread.id,
    }
    # the child's only tools are those its parent has too (``secret`` is dropped)
    assert [t["name"] for t in kid_events[0].data["tools"]] == ["write_note"]
    first = kid_events[1]
    assert first.type == "user_input"
    assert first.data == {"source": "parent_agent",
                                                         "text": "write hi"}
    assert first.actor["principal"] == ALICE.to_wire()
    # the child's header came after the spawn was durable
    assert kid_events[0].time >= spawned.time
    children = await result.thread.children()
    assert [(c.thread_id, c.agent_name, c.status) for c in children] == [
        (child_id, "clerk", "completed")
    ]
    assert (await result.thread.state()).status == "idle"


@pytest.mark.parametrize(
    ("arguments", "words"),
    [
        ({"agent": "nobody", "prompt": "x"},
         "not executed: unknown agent nobody: not one of this agent's subagents"),
        ({"agent": "clerk", "prompt": "x", "isolation": "worktree"},
         "not executed: isolation worktree is not supported yet"),
        ({"agent": "clerk", "prompt": "x", "isolation": "forked_sandbox"},
         "not executed: isolation forked_sandbox is not supported yet"),
    ],
)
async def test_a_call_that_cannot_spawn_is_closed_and_spawns_nothing(
    store: Store, arguments: dict[str, str], words: str
) -> None:
    parent = boss(clerk(say("unused")), use(call("spawn_agent", **arguments)), say("ok"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    assert of_type(events, "agent_spawned") == []
    [closed] = of_type(events, "tool_result")
    assert closed.data["origin"] == "not_executed"
    assert closed.data["is_error"]
    assert closed.data["preview"] == words
    assert await result.thread.children() == ()


async def test_a_parked_child_parks_its_parent_until_it_is_approved(store: Store) -> None:
    """The child asks for an approval: the parent parks on it (``kind: child``, the child's
    reason), the call stays pending and nothing more starts; approving on the child's thread
    and running the parent again continues both, the park ended by ``resumed`` caused by the
    ``agent_spawned``."""
    applied.clear()
    child = clerk(use(call("write_note", text="x")), say("wrote x"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child,
                  use(call("spawn_agent", agent="clerk", prompt="a"),
                      call("spawn_agent", agent="clerk", prompt="b")),
                  say("both done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Parked)
    assert result.reason == "awaiting_approval"
    [kid] = await result.thread.children()
    assert kid.status == "running"
    assert [(p.kind, p.id) for p in result.pending] == [("child", kid.thread_id)]
    events = await result.thread.timeline()
    assert len(of_type(events, "agent_spawned")) == 1  # the second call waits
    [park] = of_type(events, "parked")
    assert park.data == {"address": {"id": kid.thread_id, "kind": "child"},
                         "reason": "awaiting_approval"}
    state = await result.thread.state()
    assert [(p.kind, p.id) for p in state.parked] == [("child", kid.thread_id)]

    again = await parent.run(None, thread=result.thread.id, store=store, principal=ALICE)
    assert isinstance(again, Parked)  # still waiting: nothing new recorded
    assert len(await again.thread.timeline()) == len(events)

    await approve_child(store, kid.thread_id)
    second = await parent.run(None, thread=result.thread.id, store=store, principal=ALICE)
    assert isinstance(second, Parked)  # the second child asks too
    [kid, kid2] = await second.thread.children()
    assert kid.status == "completed"
    assert [(p.kind, p.id) for p in second.pending] == [("child", kid2.thread_id)]
    await approve_child(store, kid2.thread_id)
    done = await parent.run(None, thread=result.thread.id, store=store, principal=ALICE)
    assert isinstance(done, Completed)
    assert done.output == "both done"
    assert applied == ["x", "x"]
    events = await done.thread.timeline()
    spawned = of_type(events, "agent_spawned")
    resumed = of_type(events, "resumed")
    assert [r.data for r in resumed] == [
        {"address": {"id": k.thread_id, "kind": "child"}, "cause_event_id": s.event_id}
        for k, s in zip((kid, kid2), spawned, strict=True)
    ]
    assert [c.status for c in await done.thread.children()] == ["completed", "completed"]


async def approve_child(store: Store, thread_id: str) -> None:
    kid = await open_thread(store, thread_id, principal=ALICE)
    [pending] = await kid.pending_approvals()
    await kid.approve(pending.challenge_id, ALICE)


async def test_structured_output_comes_back_as_canonical_json(store: Store) -> None:
    child = agent(name="judge", model=scripted_model([use(call("final_output", fixed=True))]),
                  output=Verdict)
    parent = agent(name="boss", model=scripted_model([
        use(call("spawn_agent", agent="judge", prompt="is it fixed?")), say("ok")]),
        subagents=[child])
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    [finished] = of_type(events, "agent_finished")
    [shown] = [e for e in of_type(events, "tool_result") if e.seq == finished.seq + 1]
    assert shown.data["preview"] == '{"fixed":true}'
    assert finished.data["output_ref"]["media_type"] == "application/json"


async def test_a_child_out_of_its_own_budget_ends_only_the_child(store: Store) -> None:
    child = clerk(use(call("write_note", text="a")), use(call("write_note", text="b")),
                  say("never"), budget=Budget(max_model_requests=1))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="go")), say("ok"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "ok"
    events = await result.thread.timeline()
    [spawned] = of_type(events, "agent_spawned")
    assert spawned.data["budget"] == {"max_model_requests": 1}
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "budget_exhausted"
    shown = next(e for e in events if e.seq == finished.seq + 1)
    assert shown.data["is_error"]
    assert shown.data["preview"] == "budget_exhausted: budget exhausted: max_model_requests"
    [kid] = await result.thread.children()
    assert kid.status == "budget_exhausted"


async def test_the_child_is_decided_under_its_parents_permissions_too(store: Store) -> None:
    """Stricter wins: the parent denies write_note, so the child's call is denied."""
    applied.clear()
    child = clerk(use(call("write_note", text="x")), say("could not"))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="go")), say("ok"),
                  permissions=Permissions(deny=["write_note"]))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert applied == []
    [kid] = await result.thread.children()
    events = await (await open_thread(store, kid.thread_id, principal=ALICE)).timeline()
    [denied] = of_type(events, "tool_result")
    assert denied.data["origin"] == "denied"


def test_subagents_are_checked_when_the_agent_is_described() -> None:
    child = clerk(say("x"))
    with pytest.raises(ConfigError) as twice:
        agent(name="boss", model=scripted_model([]), subagents=[child, child])
    assert twice.value.code == "duplicate_name"
    with pytest.raises(ConfigError) as wrong:
        agent(name="boss", model=scripted_model([]), subagents=["clerk"])  # type: ignore[list-item]
    assert wrong.value.code == "invalid_config"


async def test_cancel_reaches_every_unfinished_child_and_the_parent_records_its_end(
    store: Store,
) -> None:
    """Cancel on a parent parked on its child: the child is barred (``scope: tree``, ``ancestor
    cancelled``, actor host with the canceller's principal); the parent's next run runs the
    child to its cancelled end, records it, then ends ``cancelled``."""
    applied.clear()
    child = clerk(use(call("write_note", text="x")), say("never"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="a")), say("never"))
    parked = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    [kid] = await parked.thread.children()
    thread = await open_thread(store, parked.thread.id, principal=ALICE)
    await thread.cancel(ALICE)
    kid_thread = await open_thread(store, kid.thread_id, principal=ALICE)
    barrier = (await kid_thread.timeline())[-1]
    assert barrier.type == "cancel_requested"
    assert barrier.data == {"reason": "ancestor cancelled", "scope": "tree"}
    assert barrier.actor == {"kind": "host", "principal": ALICE.to_wire()}
    await thread.cancel(ALICE)  # cancelled again: the barred child gets nothing new
    assert (await kid_thread.timeline())[-1].seq == barrier.seq

    ended = await parent.run(None, thread=parked.thread.id, store=store, principal=ALICE)
    assert isinstance(ended, Cancelled)
    assert applied == []
    events = await ended.thread.timeline()
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    shown = next(e for e in events if e.seq == finished.seq + 1)
    assert shown.data["preview"] == "cancelled: cancelled"
    assert [e.type for e in events[-2:]] == ["cancelled", "turn_completed"]
    [kid] = await ended.thread.children()
    assert kid.status == "cancelled"
    kid_events = await kid_thread.timeline()
    assert kid_events[-1].type == "turn_completed"
    assert kid_events[-1].data == {"reason": "cancelled"}


async def test_a_spawn_cancelled_before_its_child_existed_never_starts_it(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The process died after ``agent_spawned``, before the child's thread was created; the
    parent is cancelled: its next run records the child ``cancelled`` with unknown usage and
    never creates the thread."""
    child = clerk(say("never"))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="a")), say("never"))
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
    [thread_info] = await store.list_threads(ALICE.tenant)
    thread = await open_thread(store, thread_info.thread_id, principal=ALICE)
    [kid] = await thread.children()
    await thread.cancel(ALICE)
    ended = await parent.run(None, thread=thread.id, store=store, principal=ALICE)
    assert isinstance(ended, Cancelled)
    [finished] = of_type(await ended.thread.timeline(), "agent_finished")
    assert finished.data == {"child_thread_id": kid.thread_id, "status": "cancelled",
                             "usage": {"input_tokens": None, "output_tokens": None}}
    assert [t.thread_id for t in await store.list_threads(ALICE.tenant)] == [thread.id]


@pytest.mark.parametrize("level", ["thread", "run"])
async def test_the_parents_budget_covers_the_whole_tree(store: Store, level: str) -> None:
    """3 model requests for the tree: the parent's first, the child's first two; the child's
    third is refused under its ancestor's budget (``scope: ancestor``, the owner named), the
    child ends ``budget_exhausted``, and the parent's next request is refused too."""
    applied.clear()
    limit = Budget(max_model_requests=3)
    child = clerk(use(call("write_note", text="a")), use(call("write_note", text="b")),
                  say("never"))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="go")), say("never"),
                  **({"budget": limit} if level == "thread" else {}))
    result = await parent.run("go", store=store, principal=ALICE,
                              budget=limit if level == "run" else None)
    assert isinstance(result, BudgetExhausted)
    assert (result.budget.scope, result.budget.limit) == (level, "max_model_requests")
    assert (result.budget.observed, result.budget.limit_value) == (4, 3)
    assert applied == ["a", "b"]
    events = await result.thread.timeline()
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "budget_exhausted"
    [kid] = await result.thread.children()
    kid_events = await (await open_thread(store, kid.thread_id, principal=ALICE)).timeline()
    [exceeded] = of_type(kid_events, "budget_exceeded")
    assert exceeded.data == {
        "limit": "max_model_requests", "limit_value": 3, "observed": 4,
        "observed_is_upper_bound": False, "owner_thread_id": result.thread.id,
        "scope": "ancestor",
    }
    assert len(of_type(kid_events, "model_request")) == 2
    [parent_exceeded] = of_type(events, "budget_exceeded")
    assert parent_exceeded.data["scope"] == level


async def test_a_background_child_reports_later_and_wakes_the_parent(store: Store) -> None:
    """``background: true`` returns at once (a deferred placeholder); the child's end comes
    later as ``agent_finished`` + ``tool_result_late``, with ``woken`` when the parent's turn is
    over, and ``run()`` returns once the parent reacted: its output is that reaction."""
    applied.clear()
    child = clerk(use(call("write_note", text="bg")), say("wrote bg"))
    parent = boss(child,
                  use(call("spawn_agent", agent="clerk", prompt="write bg", background=True)),
                  say("started it"),
                  say("the clerk is done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "the clerk is done"
    assert applied == ["bg"]
    events = await result.thread.timeline()
    [spawned] = of_type(events, "agent_spawned")
    assert spawned.data["mode"] == "background"
    placeholder = events[events.index(spawned) + 1]
    assert placeholder.type == "tool_result"
    assert placeholder.data["origin"] == "deferred"
    assert placeholder.data["preview"] == "started in background"
    at = next(i for i, e in enumerate(events) if e.type == "agent_finished")
    finished, late, woken = events[at:at + 3]
    assert finished.data["status"] == "completed"
    assert late.type == "tool_result_late"
    assert late.data["preview"] == "wrote bg"
    assert "origin" not in late.data
    assert woken.type == "woken"
    assert woken.data == {"causes": [late.event_id]}
    assert woken.actor == {"kind": "host", "principal": ALICE.to_wire()}
    assert events[at - 1].type == "turn_completed"  # the parent's first turn was over
    assert [e.type for e in events[-1:]] == ["turn_completed"]
    [kid] = await result.thread.children()
    assert (kid.mode, kid.status) == ("background", "completed")


async def test_a_late_result_during_an_open_turn_is_ordinary_input(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The child ends while the parent's turn still works (its tool waits until the child's
    run has returned): the end is recorded at the parent's next step boundary, no ``woken``."""
    child_done = asyncio.Event()
    run_child = runner.run_child

    async def watching(store: Store, child: ChildRun) -> RunResult:
        result = await run_child(store, child)
        child_done.set()  # the child's task ends in this same step: it returns right after
        return result

    monkeypatch.setattr(runner, "run_child", watching)

    async def waits_for_the_child(args: Note, ctx: object) -> str:
        await asyncio.wait_for(child_done.wait(), 30)
        return "waited"

    waits = tool(name="write_note", description="Write a note.", input=Note,
                 execute=waits_for_the_child)
    parent = agent(name="boss", model=scripted_model([
        use(call("spawn_agent", agent="clerk", prompt="q", background=True),
            call("write_note", text="meanwhile")),
        say("done"),
    ]), tools=[waits], subagents=[clerk(say("quick"))])
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "done"
    events = await result.thread.timeline()
    assert of_type(events, "woken") == []
    [late] = of_type(events, "tool_result_late")
    assert late.data["preview"] == "quick"
    assert late.seq < of_type(events, "turn_completed")[0].seq


async def test_a_failed_parent_run_stops_its_unreported_background_children(
    store: Store,
) -> None:
    """The parent's run ends ``failed`` (``output_invalid``) while its child is inside a tool
    that never returns: the child is stopped and barred (``parent run ended``), run to its
    cancelled end (the call closed ``not executed: cancelled``), and that end is recorded
    without ``woken``."""

    inside = asyncio.Event()

    async def forever(args: Note, ctx: object) -> str:
        inside.set()
        await asyncio.Event().wait()
        return "never"

    async def until_inside(args: Note, ctx: object) -> str:
        await asyncio.wait_for(inside.wait(), 30)
        return "it is working"

    stuck = tool(name="write_note", description="Write a note.", input=Note, execute=forever,
                 effect="read_only")
    watch = tool(name="watch", description="Wait.", input=Note, execute=until_inside,
                 effect="read_only")
    child = agent(name="clerk", model=scripted_model([use(call("write_note", text="x")),
                                                      say("never")]), tools=[stuck])
    parent = agent(name="boss", model=scripted_model([
        use(call("spawn_agent", agent="clerk", prompt="slow", background=True),
            call("watch", text="child")),
        say("plain text, not a verdict"),
    ]), tools=[stuck, watch], subagents=[child], output=Verdict, output_retries=1)
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Failed)
    assert result.error.code == "output_invalid"
    events = await result.thread.timeline()
    assert of_type(events, "woken") == []
    [finished] = of_type(events, "agent_finished")
    assert finished.data["status"] == "cancelled"
    [late] = of_type(events, "tool_result_late")
    assert late.seq == finished.seq + 1
    assert late.data["preview"] == "cancelled: cancelled"
    [kid] = await result.thread.children()
    assert kid.status == "cancelled"
    kid_events = await (await open_thread(store, kid.thread_id, principal=ALICE)).timeline()
    [barrier] = of_type(kid_events, "cancel_requested")
    assert barrier.data == {"reason": "parent run ended", "scope": "tree"}
    [closed] = of_type(kid_events, "tool_result")
    assert closed.data["preview"] == "not executed: cancelled"


async def test_a_worker_resumes_the_parent_of_an_unreported_background_child(
    store: Store, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The parent's run died before it recorded its background child's end: a worker continues
    the parent (never the child's thread on its own), which records the end and reacts."""
    child = clerk(say("hi"))
    parent = boss(child,
                  use(call("spawn_agent", agent="clerk", prompt="hi", background=True)),
                  say("started"), say("reacted"))
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
    assert [c.status for c in await thread.children()] == ["running"]
    worker = Worker(store, [parent, child], poll_ms=10)
    await worker.run_once()
    assert worker.stats.runs == 1  # the parent; the child's thread is not run on its own
    events = await thread.timeline()
    assert [e.type for e in events[-6:]] == [
        "agent_finished", "tool_result_late", "woken", "model_request", "model_response",
        "turn_completed",
    ]
    assert [c.status for c in await thread.children()] == ["completed"]


async def test_one_running_child_per_name(store: Store) -> None:
    """A second spawn of a name whose background child has not ended is refused
    (``member_active``), nothing spawned; once it ended, the name may be spawned again."""
    child = clerk(say("one"), say("two"))
    parent = boss(child,
                  use(call("spawn_agent", agent="clerk", prompt="a", background=True),
                      call("spawn_agent", agent="clerk", prompt="b")),
                  say("waiting"),
                  use(call("spawn_agent", agent="clerk", prompt="c")),
                  say("done"))
    result = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    events = await result.thread.timeline()
    results = of_type(events, "tool_result")
    assert results[1].data["preview"] == "not executed: member_active: clerk is still running"
    assert results[1].data["origin"] == "not_executed"
    assert [c.status for c in await result.thread.children()] == ["completed", "completed"]


async def test_the_roots_approvers_decide_for_a_child(store: Store) -> None:
    """The parent names BOB its approver: on the child's thread (opened with the root agent,
    which names its approvers) BOB's grant stands; ALICE's (who started the run) does not, so
    the child's next run asks again."""
    applied.clear()
    child = clerk(use(call("write_note", text="x")), say("ok"),
                  permissions=Permissions(ask=["write_note"]))
    parent = boss(child, use(call("spawn_agent", agent="clerk", prompt="a")), say("done"),
                  approvers=[BOB])
    parked = await parent.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    [kid] = await parked.thread.children()
    kid_thread = await open_thread(store, kid.thread_id, principal=ALICE)
    [first] = await kid_thread.pending_approvals()
    await kid_thread.approve(first.challenge_id, ALICE)  # the starter, not the root's approver
    again = await parent.run(None, thread=parked.thread.id, store=store, principal=ALICE)
    assert isinstance(again, Parked)
    assert applied == []
    [second] = await kid_thread.pending_approvals()
    assert second.challenge_id != first.challenge_id
    with pytest.raises(ControlError):  # a handle that knows no agent: only the starter
        await kid_thread.approve(second.challenge_id, BOB)
    as_root = await open_thread(store, kid.thread_id, principal=BOB, agent=parent)
    await as_root.approve(second.challenge_id, BOB)
    done = await parent.run(None, thread=parked.thread.id, store=store, principal=ALICE)
    assert isinstance(done, Completed)
    assert applied == ["x"]
