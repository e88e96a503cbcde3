"""``mcp(...)`` checks its description at once (no server needed): each mistake is a coded
``ConfigError``; secrets stay out of its ``repr``; an agent takes it beside its own tools."""

from __future__ import annotations

from typing import Any

import pytest

from threads import ConfigError, Found, Reconcile, agent, tool
from threads.mcp import LookupTool, ToolEffect, mcp
from threads.testing.scripted import say, scripted_model

CMD = {"command": "server"}


async def found(key: str, ctx: Any) -> Found[str]:
    return Found(key)


@pytest.mark.parametrize(
    ("options", "code", "words"),
    [
        ({"name": "Bad-Name", **CMD}, "invalid_config", "must match"),
        ({"name": "a__b", **CMD}, "invalid_config", "without '__'"),
        ({"name": "x"}, "invalid_config", "exactly one of url= or command="),
        ({"name": "x", "url": "http://h/mcp", **CMD}, "invalid_config", "exactly one"),
        ({"name": "x", "url": "ftp://h"}, "invalid_config", "http(s)"),
        ({"name": "x", "runs": "sandbox", **CMD}, "capability_missing", "host"),
        ({"name": "x", "effect": "idempotent", **CMD}, "invalid_config", "dedup_window_ms"),
        ({"name": "x", "dedup_window_ms": 5, **CMD}, "invalid_config", "only goes with"),
        ({"name": "x", "effect": "reconcilable", **CMD}, "invalid_config", "needs reconcile"),
        ({"name": "x", "effect": "sandbox_local", **CMD}, "invalid_config", "effect must be"),
        ({"name": "x", "tools": {"allow": []}, **CMD}, "invalid_config", "no tools"),
        ({"name": "x", "tools": {"only": ["a"]}, **CMD}, "invalid_config", "allow"),
        ({"name": "x", "effects": {"t": "idempotent"}, **CMD}, "invalid_config", "ToolEffect"),
        ({"name": "x", "effects": {"t": ToolEffect("idempotent")}, **CMD}, "invalid_config",
         "tool 't'"),
        ({"name": "x", "timeout_s": 0, **CMD}, "invalid_config", "timeout_s"),
        ({"name": "x", "headers": {"a": 1}, **CMD}, "invalid_config", "headers"),
    ],
)
def test_mistakes_are_coded_config_errors(options: dict[str, Any], code: str, words: str) -> None:
    with pytest.raises(ConfigError) as caught:
        mcp(**options)
    assert caught.value.code == code
    assert words in caught.value.message


def test_valid_descriptions() -> None:
    mcp(name="a", command="s", effect="reconcilable", reconcile=Reconcile(found, "final"))
    mcp(name="b", url="https://example.com/mcp", effects={
        "pay": ToolEffect("reconcilable", reconcile=LookupTool("find_payment", "final")),
        "get": ToolEffect("read_only"),
    })


def test_secrets_stay_out_of_repr() -> None:
    server = mcp(name="s", url="https://example.com/mcp",
                 headers={"Authorization": "Bearer abcdef123456"}, )
    shown = repr(server) + repr(mcp(name="t", command="x", env={"KEY": "abcdef123456"}))
    assert "abcdef123456" not in shown


def test_agent_takes_servers_beside_tools_and_refuses_a_twin() -> None:
    @tool(effect="read_only")
    def ping() -> str:
        """Ping."""
        return "pong"

    model = scripted_model([say("x")])
    bot = agent(name="a", model=model, tools=[ping, mcp(name="s", command="x")])
    assert [t.name for t in bot.tools] == ["ping"]
    assert [s.label for s in bot.sources] == ["MCP server 's'"]
    with pytest.raises(ConfigError) as caught:
        bot.config()
    assert "known once they are connected" in caught.value.message
    with pytest.raises(ConfigError) as twin:
        agent(name="a", model=model, tools=[mcp(name="s", command="x"), mcp(name="s", url="http://h")])
    assert twin.value.code == "duplicate_name"
