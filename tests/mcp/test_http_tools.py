"""An agent calling a real MCP server over Streamable HTTP and over SSE on loopback: both
transports work, headers reach the server, and neither their secret values nor a secret the
server echoes reach the log, an error or the model."""

from __future__ import annotations

import json

import pytest
from harness import free_port, http_process

from threads import Completed, ConfigError, agent
from threads.mcp import mcp
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService
from threads.testing.scripted import call, say, scripted_model, use

TOKEN = "Bearer tok-8c1f0e5a9d7b"


async def all_lines(store: SQLiteStore, thread_id: str) -> bytes:
    branch = await store.root_branch(thread_id)
    chain = await store.read_chain(branch.branch_id)
    return b"\n".join(e.line for s in chain.segments for e in s.events)


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_remote_server_over_http(
    transport: str, service: FakeService, sqlite_store: SQLiteStore
) -> None:
    with http_process(service.port, transport) as url:
        server = mcp(name="remote", url=url, headers={"Authorization": TOKEN},
                     effect="idempotent", dedup_window_ms=60_000)
        model = scripted_model([
            use(call("mcp__remote__charge", amount=7)),
            use(call("mcp__remote__request_headers")),
            say("done"),
        ])
        result = await agent(name="a", model=model, tools=[server]).run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    lines = await all_lines(sqlite_store, result.thread.id)
    assert b"charged 7" in lines
    # the header reached the server (it echoed it back), and the log holds it scrubbed
    assert b"tok-8c1f0e5a9d7b" not in lines
    assert b"[redacted]" in lines


async def test_falls_back_to_sse(service: FakeService) -> None:
    """A URL that only speaks the older SSE transport still connects."""
    with http_process(service.port, "sse") as url:
        names = await mcp(name="old", url=url, tools={"allow": ["look_up"]}).check()
    assert "mcp__old__look_up" in names


async def test_unreachable_url_is_named_without_its_secrets() -> None:
    url = f"http://user:pw-secret-999@127.0.0.1:{free_port()}/mcp?key=query-secret-777"
    server = mcp(name="down", url=url, headers={"X-Api-Key": "hdr-secret-555"},
                 setup_timeout_s=20)
    with pytest.raises(ConfigError) as caught:
        await server.check()
    assert caught.value.code == "mcp_unreachable"
    text = str(caught.value)
    assert "MCP server 'down'" in text
    for secret in ("pw-secret-999", "query-secret-777", "hdr-secret-555"):
        assert secret not in text


async def test_server_echoing_a_secret_is_scrubbed(
    service: FakeService, sqlite_store: SQLiteStore
) -> None:
    from harness import stdio

    server = stdio(service.port, env={"SECRET_TOKEN": "env-secret-4242"},
                   tools={"allow": ["echo_env"]})
    model = scripted_model([use(call("mcp__counting__echo_env", name="SECRET_TOKEN")),
                            say("done")])
    result = await agent(name="a", model=model, tools=[server]).run("x", store=sqlite_store)
    assert isinstance(result, Completed), result
    lines = await all_lines(sqlite_store, result.thread.id)
    assert b"env-secret-4242" not in lines
    assert b"[redacted]" in lines
    assert json.dumps(repr(server)).find("env-secret") == -1
