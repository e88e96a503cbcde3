"""The run loop end to end on a real SQLite store with the scripted model: event sequences,
input validation, tool errors, config pinning, deltas, parking and resolution, approvals,
cancellation, budgets and branch_busy."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from threads import (
    Budget,
    BudgetExhausted,
    Cancelled,
    Completed,
    ConfigError,
    ControlError,
    Failed,
    FakeClock,
    Parked,
    Permissions,
    Principal,
    TextDelta,
    agent,
    open_thread,
    tool,
)
from threads.log.lines import Event
from threads.log.render import prefix_digest, prefix_line
from threads.store.protocol import Store
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
MALLORY = Principal("api", "other", "mallory")


class Path_(BaseModel):
    path: str


def make_tools(
    applied: list[str], *, hang: asyncio.Event | None = None, started: asyncio.Event | None = None
) -> list[Any]:
    async def read(args: Path_, ctx: Any) -> str:
        applied.append(f"read:{args.path}")
        return f"contents of {args.path}"

    async def write(args: Path_, ctx: Any) -> str:
        applied.append(f"write:{args.path}:{ctx.effect_key}")
        if started is not None:
            started.set()
        if hang is not None:
            await hang.wait()
        return "written"

    async def boom(args: Path_, ctx: Any) -> str:
        raise RuntimeError("disk on fire")

    return [
        tool(name="read_file", description="Read.", input=Path_, execute=read, effect="read_only"),
        tool(name="write_file", description="Write.", input=Path_, execute=write),
        tool(name="boom", description="Fails.", input=Path_, execute=boom, effect="read_only"),
    ]


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


async def test_read_only_and_effectful_sequences(store: Store) -> None:
    applied: list[str] = []
    model = scripted_model(
        [use(call("read_file", path="a")), use(call("write_file", path="b")), say("done")]
    )
    bot = agent(name="t", model=model, tools=make_tools(applied))
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "done"
    assert types(await result.thread.timeline()) == [
        "thread_started",
        "user_input",
        "model_request",
        "model_response",
        "tool_call",
        "permission_decision",
        "tool_result",
        "model_request",
        "model_response",
        "tool_call",
        "permission_decision",
        "effect_begin",
        "effect_commit",
        "tool_result",
        "model_request",
        "model_response",
        "turn_completed",
    ]
    assert applied[0] == "read:a"
    assert applied[1].startswith("write:b:")
    state = await result.thread.state()
    assert state.status == "idle"
    assert [e.status for e in state.effects] == ["committed"]


async def test_invalid_input_never_runs_the_tool(store: Store) -> None:
    applied: list[str] = []
    model = scripted_model([use(call("write_file", nope=1)), say("ok")])
    result = await agent(name="t", model=model, tools=make_tools(applied)).run(
        "go", store=store, principal=ALICE
    )
    assert isinstance(result, Completed)
    assert applied == []
    timeline = await result.thread.timeline()
    [tool_result] = [e for e in timeline if e.type == "tool_result"]
    assert tool_result.data["is_error"] is True
    assert "invalid input" in tool_result.data["preview"]
    assert "permission_decision" not in types(timeline)
    # the model saw the error in its next request
    assert any(m["role"] == "tool" and m["is_error"] for m in model.requests[-1].messages)


async def test_a_tool_that_raises_becomes_an_error_result(store: Store) -> None:
    model = scripted_model([use(call("boom", path="x")), say("recovered")])
    result = await agent(name="t", model=model, tools=make_tools([])).run(
        "go", store=store, principal=ALICE
    )
    assert isinstance(result, Completed)
    [res] = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert res.data["is_error"] is True
    assert "disk on fire" in res.data["preview"]


async def test_unknown_tool_is_not_executed(store: Store) -> None:
    model = scripted_model([use(call("launch_rockets", path="x")), say("ok")])
    result = await agent(name="t", model=model, tools=make_tools([])).run(
        "go", store=store, principal=ALICE
    )
    [res] = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert res.data["origin"] == "not_executed"


async def test_config_change_starts_a_new_thread(store: Store) -> None:
    model = scripted_model([say("one"), say("two")])
    first = await agent(name="t", model=model, instructions="A").run(
        "hi", store=store, principal=ALICE
    )
    changed = agent(name="t", model=model, instructions="B")
    with pytest.raises(ConfigError, match="config change starts a new thread"):
        await changed.run("again", store=store, thread=first.thread.id, principal=ALICE)
    same = agent(name="t", model=model, instructions="A")
    again = await same.run("again", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(again, Completed)
    assert again.output == "two"


async def test_deltas_are_streamed_but_never_recorded(store: Store) -> None:
    text = "a fairly long answer streamed in pieces"
    model = scripted_model([say(text, chunks=5)])
    bot = agent(name="t", model=model)
    deltas: list[str] = []
    events: list[Event] = []
    async with bot.stream("hi", store=store, principal=ALICE) as live:
        async for item in live:
            if isinstance(item, TextDelta):
                deltas.append(item.text)
            else:
                events.append(item)
        result = await live.result
    assert len(deltas) == 5
    assert "".join(deltas) == text
    assert types(events) == types(await result.thread.timeline())
    raw = b"".join(e.line for e in await result.thread.timeline())
    assert raw.count(text.encode()) == 1  # only in the recorded model_response


@pytest.mark.engines("sqlite")  # the other process opens the store by its directory
async def test_handle_works_from_another_process(store: Store, tmp_path: Path) -> None:
    result = await agent(name="t", model=scripted_model([say("hello")])).run(
        "hi", store=store, principal=ALICE
    )
    script = (
        "import asyncio, dataclasses, json, sys\n"
        "from threads import open_thread, sqlite\n"
        "async def main():\n"
        "    s = sqlite(sys.argv[1])\n"
        "    t = await open_thread(s, sys.argv[2])\n"
        "    print(json.dumps(dataclasses.asdict(await t.state())))\n"
        "    await s.close()\n"
        "asyncio.run(main())\n"
    )
    out = await asyncio.to_thread(
        subprocess.run,
        [sys.executable, "-c", script, str(tmp_path / "store"), result.thread.id],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    state = json.loads(out.stdout)
    here = dataclasses.asdict(await result.thread.state())
    assert state == json.loads(json.dumps(here))
    assert state["turns_completed"] == 1


async def _crash_inside_effect(store: Store, applied: list[str]) -> str:
    """Run until write_file is executing, then cancel the run (a crash after effect_begin)."""
    hang, started = asyncio.Event(), asyncio.Event()
    model = scripted_model([use(call("write_file", "c1", path="b")), say("done")])
    bot = agent(name="t", model=model, tools=make_tools(applied, hang=hang, started=started))
    task = asyncio.create_task(bot.run("go", store=store, principal=ALICE))
    await started.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    [thread] = await store.list_threads()
    return thread.thread_id


async def test_in_doubt_unguarded_effect_parks_then_assume_done(store: Store) -> None:
    applied: list[str] = []
    thread_id = await _crash_inside_effect(store, applied)
    bot = agent(
        name="t",
        model=scripted_model([use(call("write_file", "c1", path="b")), say("done")]),
        tools=make_tools(applied),
    )
    parked = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "effect_unknown"
    [pending] = parked.pending
    assert pending.kind == "effect"
    # nothing runs while parked
    assert isinstance(await bot.run(None, store=store, thread=thread_id, principal=ALICE), Parked)
    handle = await open_thread(store, thread_id)
    with pytest.raises(ControlError) as denied:
        await handle.resolve_parked(pending.id, "assume_done", MALLORY)
    assert denied.value.code == "forbidden"
    with pytest.raises(ControlError) as nothing:
        await handle.resolve_parked("nope:c9", "assume_done", ALICE)
    assert nothing.value.code == "not_parked"
    await handle.resolve_parked(pending.id, "assume_done", ALICE)
    done = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(applied) == 1  # never sent again
    resolved = [e for e in await handle.timeline() if e.type == "effect_resolved"]
    assert resolved[0].actor == {"kind": "approver", "principal": ALICE.to_wire()}


async def test_assume_not_done_resends_with_the_same_key(store: Store) -> None:
    applied: list[str] = []
    thread_id = await _crash_inside_effect(store, applied)
    bot = agent(
        name="t",
        model=scripted_model([use(call("write_file", "c1", path="b")), say("done")]),
        tools=make_tools(applied),
    )
    parked = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(parked, Parked)
    handle = await open_thread(store, thread_id)
    assert isinstance(store.clock, FakeClock)
    store.clock.advance(60_001)  # past the zombie window: the holder that began it is gone
    await handle.resolve_parked(parked.pending[0].id, "assume_not_done", ALICE)
    done = await bot.run(None, store=store, thread=thread_id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(applied) == 2
    assert applied[0] == applied[1]  # same effect key
    begins = [e.data["attempt"] for e in await handle.timeline() if e.type == "effect_begin"]
    assert begins == [1, 2]


async def test_second_runner_gets_branch_busy(store: Store) -> None:
    bot = agent(name="t", model=scripted_model([say("one"), say("two")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    await store.acquire_lease(branch.branch_id, "someone-else", 60_000)
    head = branch.head_seq
    busy = await bot.run("again", store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(busy, Failed)
    assert busy.error.code == "branch_busy"
    assert (await store.get_branch(branch.branch_id)).head_seq == head  # nothing appended


async def test_approval_parks_then_runs_once_after_approve(store: Store) -> None:
    applied: list[str] = []
    script = [use(call("write_file", "c1", path="b")), say("done")]
    bot = agent(
        name="t",
        model=scripted_model(script),
        tools=make_tools(applied),
        permissions=Permissions(ask=("write_file(path:b*)",)),
    )
    parked = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(parked, Parked)
    assert parked.reason == "awaiting_approval"
    assert applied == []
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    assert pending.tool == "write_file"
    await handle.approve(pending.challenge_id, ALICE)
    with pytest.raises(ControlError) as twice:
        await handle.approve(pending.challenge_id, ALICE)
    assert twice.value.code == "approval_duplicate"
    done = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(done, Completed)
    assert len(applied) == 1


async def test_cancel_while_parked_never_runs_the_call(store: Store) -> None:
    applied: list[str] = []
    bot = agent(
        name="t",
        model=scripted_model([use(call("write_file", "c1", path="b")), say("x")]),
        tools=make_tools(applied),
        permissions=Permissions(ask=("write_file",)),
    )
    parked = await bot.run("go", store=store, principal=ALICE)
    handle = await open_thread(store, parked.thread.id)
    [pending] = await handle.pending_approvals()
    await handle.approve(pending.challenge_id, ALICE)
    await handle.cancel(ALICE)
    result = await bot.run(None, store=store, thread=parked.thread.id, principal=ALICE)
    assert isinstance(result, Cancelled)
    assert applied == []
    [res] = [e for e in await handle.timeline() if e.type == "tool_result"]
    assert res.data["origin"] == "not_executed"


async def test_budget_stops_before_sending(store: Store) -> None:
    model = scripted_model([use(call("read_file", path="a")), say("never")])
    bot = agent(name="t", model=model, tools=make_tools([]), budget=Budget(max_model_requests=1))
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, BudgetExhausted)
    assert result.budget.limit == "max_model_requests"
    assert len(model.requests) == 1
    timeline = await result.thread.timeline()
    assert types(timeline).count("model_request") == 1
    assert types(timeline)[-2:] == ["budget_exceeded", "turn_completed"]


async def test_a_run_under_no_budget_sums_no_spend(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Spend is linear in the thread's requests: summed before every request of a run no
    budget covers, it made each step grow with the conversation. A budgeted run counts each
    attempt into its running totals once it is settled (``threads.run.spend_tally``), and an
    open one at each read: never the whole thread again."""
    from threads.run import spend_tally

    counted: list[str] = []
    real_add = spend_tally._Totals.add

    def add(totals: Any, table: Any, attempt: Any) -> None:
        counted.append(attempt.event.event_id)
        real_add(totals, table, attempt)

    monkeypatch.setattr(spend_tally._Totals, "add", add)
    free = agent(name="t", model=scripted_model([use(call("read_file", path="a")), say("ok")]),
                 tools=make_tools([]))
    assert isinstance(await free.run("go", store=store, principal=ALICE), Completed)
    assert counted == []
    steps = 30
    script = [use(call("read_file", path="a")) for _ in range(steps)] + [say("ok")]
    capped = agent(name="t", model=scripted_model(script), tools=make_tools([]),
                   budget=Budget(max_model_requests=100))
    assert isinstance(await capped.run("go", store=store, principal=ALICE), Completed)
    # each attempt but the last is settled once (into the totals and the read that found it)
    assert len(counted) == 2 * steps
    assert len(set(counted)) == steps


async def test_a_large_tool_result_is_spilled_and_the_model_sees_its_preview(
    store: Store,
) -> None:
    """Render v1 (as upstream): a result without content shows the model exactly its preview;
    the full output is kept as the result's artifact."""
    big = "x" * (200 * 1024)

    async def dump(args: Path_, ctx: Any) -> str:
        return big

    model = scripted_model([use(call("dump", path="a")), say("ok")])
    bot = agent(
        name="t",
        model=model,
        tools=[
            tool(name="dump", description="Dump.", input=Path_, execute=dump, effect="read_only")
        ],
    )
    result = await bot.run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    [res] = [e for e in await result.thread.timeline() if e.type == "tool_result"]
    assert "ref" in res.data  # stored as an artifact, not inline in the line
    assert len(res.line) < 4096
    assert await store.get_artifact(res.data["ref"]["sha256"]) == big.encode()
    [tool_message] = [m for m in model.requests[-1].messages if m["role"] == "tool"]
    assert tool_message["content"] == [{"type": "text", "text": res.data["preview"]}]


class _HangingModel:
    """Records the request, then never answers: cancelling the run is a crash after dispatch."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.provider, self.name = inner.provider, inner.name
        self.context_window, self.max_output_tokens = inner.context_window, inner.max_output_tokens
        self.price = inner.price
        self.sent = asyncio.Event()

    async def aclose(self) -> None:
        """Nothing to release."""

    def adapter_ref(self) -> dict[str, Any]:
        return self.inner.adapter_ref()  # type: ignore[no-any-return]

    def params(self) -> dict[str, Any]:
        return self.inner.params()  # type: ignore[no-any-return]

    async def stream(self, request: Any, fence: Any) -> AsyncIterator[Any]:
        await fence.check()
        self.sent.set()
        await asyncio.Event().wait()
        yield None  # pragma: no cover - never reached


async def test_crash_resends_are_bounded(store: Store) -> None:
    hanging = _HangingModel(scripted_model([say("never")]))
    bot = agent(name="t", model=hanging)
    thread_id: str | None = None
    for _ in range(3):  # the first send, then two resends, each cut by a crash
        hanging.sent.clear()
        task = asyncio.create_task(
            bot.run("hi" if thread_id is None else None, store=store, thread=thread_id)
        )
        await hanging.sent.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        thread_id = thread_id or (await store.list_threads())[0].thread_id
    result = await bot.run(None, store=store, thread=thread_id)
    assert isinstance(result, Failed)
    assert result.error.code == "model_error"
    timeline = await result.thread.timeline()
    assert [e.data["attempt"] for e in timeline if e.type == "model_request"] == [1, 2, 3]
    assert types(timeline)[-1] == "turn_completed"


async def test_calls_a_crashed_writer_never_recorded_are_recorded_first(
    store: Store,
) -> None:
    """A log (from a writer that records calls one append at a time) ends with a reply whose
    second call has no tool_call: the next run records it and runs both, without asking the
    model again first."""
    applied: list[str] = []
    bot = agent(
        name="t",
        # reply #2 is the one written by hand below; the model is asked for #1 and #3 only
        model=scripted_model([say("first"), say("written by hand"), say("after the calls")]),
        tools=make_tools(applied),
    )
    first = await bot.run("hi", store=store, principal=ALICE)
    branch = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(branch.branch_id, "other-writer", 60_000)
    chain = await store.read_chain(branch.branch_id)
    from threads.run.writer import BranchWriter

    writer = BranchWriter(store, lease, chain.fold(store.clock.now_ms()))
    user = {"kind": "user", "principal": ALICE.to_wire()}
    parts = [
        {"type": "tool_use", "call_id": "c1", "name": "read_file", "input": {"path": "a"}},
        {"type": "tool_use", "call_id": "c2", "name": "read_file", "input": {"path": "b"}},
    ]
    await writer.append([("user_input", {"source": "api", "text": "read two"}, user)])
    [request] = await writer.append(
        [
            (
                "model_request",
                {
                    "attempt": 1,
                    # line 0 must be the thread's own (C7); the request bytes are not replayed
                    "declared_prefix": prefix_digest(prefix_line(writer.fold.thread_started)),
                    "request_ref": {
                        "bytes": 1,
                        "media_type": "application/x-ndjson",
                        "sha256": "0" * 64,
                    },
                },
                {"kind": "host"},
            )
        ]
    )
    response = {
        "completeness": "complete",
        "content": parts,
        "request_event_id": request.event_id,
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }
    reply = ("model_response", response, {"kind": "model"})
    await writer.append([reply, *writer_calls(parts[:1], request.event_id)])
    await store.release_lease(writer.lease)
    result = await bot.run(None, store=store, thread=first.thread.id, principal=ALICE)
    assert isinstance(result, Completed)
    assert result.output == "after the calls"
    assert sorted(applied) == ["read:a", "read:b"]
    calls = [e.data["call_id"] for e in await result.thread.timeline() if e.type == "tool_call"]
    assert calls == ["c1", "c2"]


def writer_calls(parts: list[dict[str, Any]], request_event_id: str) -> list[Any]:
    """tool_call + permission_decision per part, as a writer records them."""
    host = {"kind": "host"}
    items: list[Any] = []
    for p in parts:
        call = {"call_id": p["call_id"], "input": p["input"], "name": p["name"]}
        items.append(("tool_call", {**call, "request_event_id": request_event_id}, host))
        decision = {"call_id": p["call_id"], "decision": "allow", "source": "default"}
        items.append(("permission_decision", decision, host))
    return items


async def test_a_fork_runs_on_from_its_snapshot(store: Store) -> None:
    # the parent and the fork each get reply #2: both transcripts hold one reply at that point
    bot = agent(name="t", model=scripted_model([say("one"), say("two")]))
    first = await bot.run("hi", store=store, principal=ALICE)
    parent = await store.root_branch(first.thread.id)
    lease = await store.acquire_lease(parent.branch_id, "snapshotter", 60_000)
    from threads.run.writer import BranchWriter

    writer = BranchWriter(
        store, lease, (await store.read_chain(parent.branch_id)).fold(store.clock.now_ms())
    )
    snapshot = {
        "capture_class": "filesystem",
        "expires_at": None,
        "manifest_hash": "0" * 64,
        "provider": "fake",
        "quiesced": {"excluded": [], "frozen": [], "stopped": []},
        "sandbox_id": "sbx_parent",
        "snapshot_id": "snap_1",
    }
    [snap] = await writer.append([("snapshot", snapshot, {"kind": "host"})])
    await store.release_lease(writer.lease)
    handle = await open_thread(store, first.thread.id)
    assert [p.snapshot_event_id for p in await handle.fork_points()] == [snap.event_id]

    async def restore(data: dict[str, Any]) -> str:
        return f"restored-{data['snapshot_id']}"

    child = await handle.fork(snap.event_id, restore)
    before = (await store.read_chain(parent.branch_id)).events
    on_parent = await bot.run("on the parent", store=store, thread=first.thread.id, principal=ALICE)
    on_child = await bot.run("go on", store=store, thread=child, principal=ALICE)
    assert isinstance(on_parent, Completed)
    assert isinstance(on_child, Completed)
    assert on_child.output == on_parent.output == "two"
    chain = await store.read_chain(child)
    own = chain.segments[-1].events
    assert [e.type for e in own][:2] == ["fork", "user_input"]
    assert own[0].data["sandbox_id"] == "restored-snap_1"
    assert chain.segments[0].events == before  # parent rows referenced through the snapshot
