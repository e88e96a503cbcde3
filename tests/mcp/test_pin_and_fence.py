"""The tool list is pinned with the thread (a server whose tools changed is a config change,
named), each run connects anew, and every MCP message passes the fence: a refusal at the
session (the caller's check) or where bytes leave (the stdio writer, the HTTP transport) sends
nothing to the server."""

from __future__ import annotations

from typing import Any

import pytest
from harness import http_process, stdio

from threads import Completed, ConfigError, Principal, agent
from threads.errors import StoreError
from threads.mcp import McpServer
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.testing.scripted import call, say, scripted_model, use
from threads.tools.context import RunContext
from threads.tools.tool import EffectUnknown


async def test_changed_tool_list_is_a_named_config_change(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    def bot(server: McpServer) -> Any:
        script = [use(call("mcp__counting__look_up", account="a")), say("ok")]
        return agent(name="a", model=scripted_model(script * 2), tools=[server])

    first = await bot(stdio(service.port)).run("x", store=sqlite_store)
    assert isinstance(first, Completed), first
    again = await bot(stdio(service.port)).run("again", thread=first.thread.id,
                                               store=sqlite_store)
    assert isinstance(again, Completed), again  # the same tools: the thread goes on
    changed = bot(stdio(service.port, spec={"hide": ["charge"]}))
    with pytest.raises(ConfigError) as caught:
        await changed.run("more", thread=first.thread.id, store=sqlite_store)
    assert "MCP server 'counting': removed mcp__counting__charge" in caught.value.message
    assert "changed: tools.mcp__counting__charge: removed" in caught.value.message


class SwitchFence:
    """Passes ``passes`` more checks once armed, then refuses every one."""

    def __init__(self) -> None:
        self.left: int | None = None
        self.checks = 0

    def refuse_after(self, passes: int) -> None:
        self.left = passes

    async def check(self) -> None:
        self.checks += 1
        if self.left is None:
            return
        if self.left == 0:
            raise StoreError("stale_epoch", "the test took the lease away")
        self.left -= 1


def context(key: str) -> RunContext:
    return RunContext(deps=None, thread_id="t", branch_id="b", principal=Principal("t", "t", "t"),
                      call_id="c", effect_key=key, attempt=1)


async def send_with(server: McpServer, fence: SwitchFence, passes: int, key: str) -> None:
    async with server.open(lambda: fence) as tools:
        email = next(t for t in tools if t.name.endswith("__send_email"))
        fence.refuse_after(passes)
        await email.execute(email.input.model_validate({"to": "x@example.com"}), context(key))


@pytest.mark.parametrize("where", ["session", "transport"])
async def test_stdio_fence_refusal_sends_nothing(service: FakeService, where: str) -> None:
    key = f"fence-stdio-{where}"
    fence = SwitchFence()
    server = stdio(service.port, timeout_s=5)
    # "session": the caller's own check refuses; "transport": it passes, the stdio writer's
    # check right before the bytes are written refuses
    expected = StoreError if where == "session" else EffectUnknown
    with pytest.raises(expected):
        await send_with(server, fence, 0 if where == "session" else 1, key)
    snapshot = service.client().snapshot()
    assert key not in snapshot["requests"]


@pytest.mark.parametrize("where", ["session", "transport"])
async def test_http_fence_refusal_sends_nothing(service: FakeService, where: str) -> None:
    key = f"fence-http-{where}"
    fence = SwitchFence()
    with http_process(service.port, "streamable-http") as url:
        from threads.mcp import mcp

        server = mcp(name="remote", url=url, timeout_s=5)
        with pytest.raises((StoreError, EffectUnknown)) as caught:
            await send_with(server, fence, 0 if where == "session" else 1, key)
    if where == "session":
        assert isinstance(caught.value, StoreError)
    assert key not in service.client().snapshot()["requests"]
