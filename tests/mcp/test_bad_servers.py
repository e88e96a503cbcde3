"""Servers that break the rules: every case ends in a coded outcome (a recorded result, an
in-doubt effect parked, or a setup ``ConfigError`` naming the server), nothing is raised out of
``run()`` mid-run, and nothing waits forever; cancelling a run mid-call lands and stops the
child."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import RAW_SERVER, stdio

from threads import Cancelled, Completed, ConfigError, Parked, agent
from threads.mcp import mcp
from threads.run.runner import RunOptions, start_run
from threads.run.runtime import CancelSignal
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.testing.scripted import call, say, scripted_model, use


def raw(mode: str, **options: Any) -> Any:
    return mcp(name="raw", command=sys.executable, args=[str(RAW_SERVER), mode], **options)


async def events_of(store: SQLiteStore, thread_id: str) -> list[Any]:
    branch = await store.root_branch(thread_id)
    chain = await store.read_chain(branch.branch_id)
    return [e for s in chain.segments for e in s.events]


def unknown_reasons(events: list[Any]) -> list[str]:
    return [e.data["reason"] for e in events if e.type == "effect_unknown"]


async def test_invalid_input_schema_names_the_tool(sqlite_store: SQLiteStore) -> None:
    bot = agent(name="a", model=scripted_model([say("never")]), tools=[raw("bad_schema")])
    with pytest.raises(ConfigError) as caught:
        await bot.run("x", store=sqlite_store)
    assert caught.value.code == "invalid_config"
    assert "MCP server 'raw'" in caught.value.message
    assert "'broken'" in caught.value.message


async def test_tool_list_too_big_to_pin_is_refused() -> None:
    with pytest.raises(ConfigError) as caught:
        await raw("many_tools").check()
    assert caught.value.code == "invalid_config"
    assert "at most 524288 are pinned" in caught.value.message


async def test_schema_pointing_at_a_url_fetches_nothing_and_refuses_the_call(
    sqlite_store: SQLiteStore,
) -> None:
    bot = agent(name="a", model=scripted_model([use(call("mcp__raw__poke", n=1)), say("x")]),
                tools=[raw("remote_ref")])
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    events = await events_of(sqlite_store, result.thread.id)
    (outcome,) = [e.data for e in events if e.type == "tool_result"]
    assert outcome["origin"] == "not_executed"
    assert "its schema could not be applied" in outcome["preview"]


async def test_banner_on_stdout_is_unreachable(sqlite_store: SQLiteStore) -> None:
    with pytest.raises(ConfigError) as caught:
        await raw("banner", setup_timeout_s=20).check()
    assert caught.value.code == "mcp_unreachable"


@pytest.mark.parametrize("mode", ["not_json", "bad_result"])
async def test_unreadable_answer_parks_an_unguarded_call(
    mode: str, sqlite_store: SQLiteStore
) -> None:
    bot = agent(name="a", model=scripted_model([use(call("mcp__raw__poke", n=1)), say("x")]),
                tools=[raw(mode)])
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Parked), result
    assert unknown_reasons(await events_of(sqlite_store, result.thread.id)) == [
        "transport_error"
    ]


async def test_answer_that_never_comes_is_bounded_by_the_timeout(
    sqlite_store: SQLiteStore,
) -> None:
    """Read-only: the timeout is an error result the model reads, and the turn goes on."""
    bot = agent(
        name="a",
        model=scripted_model([use(call("mcp__raw__poke", n=1)), say("gave up")]),
        tools=[raw("wrong_id", effect="read_only", timeout_s=1)],
    )
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    events = await events_of(sqlite_store, result.thread.id)
    (outcome,) = [e.data for e in events if e.type == "tool_result"]
    assert outcome["is_error"]
    assert "did not answer within 1 s" in outcome["preview"]


async def test_server_dying_mid_call_parks(service: FakeService, sqlite_store: SQLiteStore) -> None:
    bot = agent(name="a", model=scripted_model([use(call("mcp__counting__die")), say("x")]),
                tools=[stdio(service.port, tools={"allow": ["die"]})])
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Parked), result
    assert unknown_reasons(await events_of(sqlite_store, result.thread.id)) == [
        "transport_error"
    ]


async def test_hanging_call_times_out_in_doubt(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    bot = agent(name="a", model=scripted_model([use(call("mcp__counting__hang")), say("x")]),
                tools=[stdio(service.port, tools={"allow": ["hang"]}, timeout_s=1)])
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Parked), result
    assert unknown_reasons(await events_of(sqlite_store, result.thread.id)) == ["timeout"]


async def test_huge_result_is_cut_and_recorded(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    bot = agent(name="a",
                model=scripted_model([use(call("mcp__counting__huge", chars=3_000_000)),
                                      say("x")]),
                tools=[stdio(service.port, tools={"allow": ["huge"]}, effect="read_only")])
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    events = await events_of(sqlite_store, result.thread.id)
    (outcome,) = [e.data for e in events if e.type == "tool_result"]
    assert not outcome["is_error"]
    assert "ref" in outcome
    stored = await sqlite_store.get_artifact(outcome["ref"]["sha256"])
    assert b"[threads cut the last 2000000 characters of this result]" in stored


async def test_rpc_error_and_error_result_are_final(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    bot = agent(
        name="a",
        model=scripted_model([use(call("mcp__counting__rpc_error")),
                              use(call("mcp__counting__fail")), say("x")]),
        tools=[stdio(service.port, tools={"allow": ["rpc_error", "fail"]})],
    )
    result = await bot.run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    events = await events_of(sqlite_store, result.thread.id)
    first, second = [e.data for e in events if e.type == "tool_result"]
    assert first["is_error"]
    assert "error -32602: the server refuses &lt;this&gt; &amp; that" in (
        first["preview"]
    )
    assert second["is_error"]
    assert 'untrusted="true"' in second["preview"]
    assert unknown_reasons(events) == []
    assert [e.type for e in events].count("effect_commit") == 2


def gone(pid: int) -> bool:
    status = Path(f"/proc/{pid}/status")
    try:
        return "State:\tZ" in status.read_text()
    except FileNotFoundError:
        return True


async def test_cancel_lands_mid_call_and_stops_the_child(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    """A durable cancel while a read-only call hangs: the call is abandoned, the turn ends
    cancelled; then a run task cancelled outright while a call hangs closes the child too."""
    client = service.client()
    server = stdio(service.port, tools={"allow": ["look_up"]}, effect="read_only",
                   spec={"hold": {"tool": "look_up", "gate": "cancel-me"}, "pid_key": "pid-a"})
    bot = agent(name="a", model=scripted_model([use(call("mcp__counting__look_up", account="a")),
                                                say("x")]), tools=[server])
    signal = CancelSignal()
    run = asyncio.create_task(start_run(bot, "x", RunOptions(store=sqlite_store), cancel=signal))
    await asyncio.to_thread(client.await_waiting, "cancel-me")
    signal.request()
    result = await asyncio.wait_for(run, 60)
    assert isinstance(result, Cancelled), result
    assert gone(int(client.lookup("pid-a") or 0))

    server = stdio(service.port, tools={"allow": ["look_up"]}, effect="read_only",
                   spec={"hold": {"tool": "look_up", "gate": "kill-task"}, "pid_key": "pid-b"})
    bot = agent(name="b", model=scripted_model([use(call("mcp__counting__look_up", account="b")),
                                                say("x")]), tools=[server])
    task = asyncio.create_task(bot.run("x", store=sqlite_store))
    await asyncio.to_thread(client.await_waiting, "kill-task")
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 60)
    assert gone(int(client.lookup("pid-b") or 0))
    client.open_gate("cancel-me")
    client.open_gate("kill-task")
