"""An agent calling a real MCP server over stdio: naming, results, the child's environment,
resources, allow/deny, the effect key in ``_meta``, and a server that can't be reached."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from harness import stdio

from threads import Completed, ConfigError, agent
from threads.mcp import mcp
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.testing.scripted import call, say, scripted_model, use


def results(thread_events: list[Any]) -> list[str]:
    return [e.data["preview"] for e in thread_events if e.type == "tool_result"]


async def events_of(store: SQLiteStore, thread_id: str) -> list[Any]:
    branch = await store.root_branch(thread_id)
    chain = await store.read_chain(branch.branch_id)
    return [e for s in chain.segments for e in s.events]


async def test_tools_are_named_listed_and_called(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    server = stdio(service.port, effect="idempotent", dedup_window_ms=60_000)
    model = scripted_model([use(call("mcp__counting__charge", amount=5)), say("done")])
    bot = agent(name="a", model=model, tools=[server])
    result = await bot.run("charge it", store=sqlite_store)
    assert isinstance(result, Completed), result
    events = await events_of(sqlite_store, result.thread.id)
    started = events[0].data
    names = [t["name"] for t in started["tools"]]
    assert names == sorted(names)
    assert "mcp__counting__charge" in names
    assert "mcp__counting__read_resource" in names
    charge = next(t for t in started["tools"] if t["name"] == "mcp__counting__charge")
    assert charge["effect_class"] == "idempotent"
    assert charge["dedup_window_ms"] == 60_000
    assert charge["input_schema"]["properties"]["amount"]["type"] == "integer"
    (text,) = results(events)
    assert text == '<reference source="mcp" id="charge" untrusted="true">charged 5</reference>'
    branch = await sqlite_store.root_branch(result.thread.id)
    key = f"{branch.branch_id}:" + next(e.data["call_id"] for e in events if e.type == "tool_call")
    # the server applied it under the call's effect key, which it read from _meta
    assert service.client().count(key) == 1


async def test_child_gets_only_path_home_and_env(
    service: FakeService, sqlite_store: SQLiteStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret-never-shared")
    server = stdio(service.port, env={"GREETING": "hi"}, tools={"allow": ["environment"]})
    model = scripted_model([use(call("mcp__counting__environment")), say("done")])
    result = await agent(name="a", model=model, tools=[server]).run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    (text,) = results(await events_of(sqlite_store, result.thread.id))
    body = text.split(">", 1)[1].rsplit("<", 1)[0]
    assert set(json.loads(body)) == {"PATH", "HOME", "GREETING"}


async def test_allow_deny_and_resources(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    allowed = stdio(service.port, tools={"allow": ["look_up"]})
    assert await allowed.check() == ["mcp__counting__look_up", "mcp__counting__read_resource"]
    denied = await stdio(service.port, tools={"deny": ["die", "hang"]}).check()
    assert "mcp__counting__die" not in denied
    assert "mcp__counting__charge" in denied
    model = scripted_model(
        [use(call("mcp__counting__read_resource", uri="note://greeting")), say("done")]
    )
    result = await agent(name="a", model=model, tools=[allowed]).run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    (text,) = results(await events_of(sqlite_store, result.thread.id))
    assert "hello from the server" in text
    assert 'id="read_resource"' in text


async def test_filter_naming_a_missing_tool_is_refused(service: FakeService) -> None:
    with pytest.raises(ConfigError) as caught:
        await stdio(service.port, tools={"allow": ["lok_up"]}).check()
    assert caught.value.code == "invalid_config"
    assert "'lok_up'" in caught.value.message


async def test_unreachable_server_names_it_and_starts_nothing(sqlite_store: SQLiteStore) -> None:
    server = mcp(name="gone", command=sys.executable, args=["-c", "import sys; sys.exit(2)"],
                 env={"TOKEN": "supersecret-token-123"})
    bot = agent(name="a", model=scripted_model([say("never")]), tools=[server])
    with pytest.raises(ConfigError) as caught:
        await bot.run("x", store=sqlite_store)
    assert caught.value.code == "mcp_unreachable"
    assert "MCP server 'gone'" in caught.value.message
    assert "supersecret" not in str(caught.value)


async def test_missing_command_is_unreachable(tmp_path: Path) -> None:
    server = mcp(name="nope", command=str(tmp_path / "no-such-binary"))
    with pytest.raises(ConfigError) as caught:
        await server.check()
    assert caught.value.code == "mcp_unreachable"


async def test_the_host_refuses_agents_with_mcp_servers(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    from threads.host.app import host

    bot = agent(name="a", model=scripted_model([say("x")]), tools=[stdio(service.port)])
    with pytest.raises(ConfigError) as caught:
        host(sqlite_store, [bot], authenticate=lambda _request: None)
    assert caught.value.code == "capability_missing"
    assert "(a)" in caught.value.message
