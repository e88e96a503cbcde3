"""A real MCP server (the official SDK's ``MCPServer``) for the MCP tests and drills, in its own
process, over stdio, Streamable HTTP or SSE.

Its effectful tools apply at the fake service (``threads.testing.fake_service``) under the
effect key the client sent in ``_meta`` as ``threads/effect_key``, so the tests read back from
the service how often each effect really happened: ``charge`` is deduplicated by key (an
idempotent server), ``refund`` and ``send_email`` apply every request, and ``find_refund`` looks
a refund up by key. ``hold`` makes a tool wait at a service gate before or after it applies, so
a drill can SIGKILL the client at that moment. The rest misbehave on purpose (``huge``, ``die``,
``hang``, ``rpc_error``, ``fail``) or report what the server was given (``environment``,
``echo_env``, ``request_headers``).

    python counting_server.py '{"transport": "stdio", "service_port": 1234}'
    python counting_server.py '{"transport": "streamable-http", "port": 8123, ...}'
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from threads.testing.fake_service import ServiceClient

SPEC: dict[str, Any] = json.loads(sys.argv[1]) if len(sys.argv) > 1 else {}
SERVICE = ServiceClient(SPEC.get("service_port", 0), SPEC.get("label", "mcp"))
server = MCPServer("counting")


def effect_key(ctx: Context) -> str:
    meta = ctx.request_context.meta or {}
    key = meta.get("threads/effect_key")
    if not isinstance(key, str):
        raise MCPError(code=-32602, message="no threads/effect_key in _meta")
    return key


async def hold(tool: str, when: str) -> None:
    spec = SPEC.get("hold") or {}
    if spec.get("tool") == tool and spec.get("when", "after") == when:
        await anyio.to_thread.run_sync(SERVICE.wait_gate, spec["gate"])


async def apply(tool: str, kind: str, ctx: Context, value: str, *, dedup: bool) -> str:
    key = effect_key(ctx)
    await hold(tool, "before")
    applied = await anyio.to_thread.run_sync(
        lambda: SERVICE.apply(kind, key, value, dedup=dedup)
    )
    await hold(tool, "after")
    return applied


@server.tool()
async def look_up(account: str) -> str:
    """Tell whether an account is open."""
    await hold("look_up", "after")
    return f"account {account} is open"


@server.tool()
async def charge(amount: int, ctx: Context) -> str:
    """Charge the card; the same effect key is charged once."""
    return await apply("charge", "charge", ctx, f"charged {amount}", dedup=True)


@server.tool()
async def refund(amount: int, ctx: Context) -> str:
    """Refund an amount; every request refunds."""
    return await apply("refund", "refund", ctx, f"refunded {amount}", dedup=False)


@server.tool()
async def find_refund(effect_key: str) -> str:
    """Find a refund by the effect key it was made under."""
    value = await anyio.to_thread.run_sync(SERVICE.lookup, effect_key)
    return json.dumps({"found": value is not None, "result": value})


@server.tool()
async def send_email(to: str, ctx: Context) -> str:
    """Send an email; every request sends one."""
    return await apply("send_email", "email", ctx, f"emailed {to}", dedup=False)


@server.tool()
async def huge(chars: int) -> str:
    """Answer with a very long text."""
    return "x" * chars


@server.tool()
async def die() -> str:
    """Exit the server in the middle of the call."""
    os._exit(3)


@server.tool()
async def hang() -> str:
    """Never answer."""
    await anyio.sleep_forever()
    return "unreachable"


@server.tool()
async def rpc_error() -> str:
    """Answer with a JSON-RPC error."""
    raise MCPError(code=-32602, message="the server refuses <this> & that")


@server.tool()
async def fail() -> str:
    """Fail: the answer is an error result (isError)."""
    raise ValueError("the tool failed")


@server.tool()
def environment() -> str:
    """The names in the environment this process was started with."""
    raw = Path("/proc/self/environ").read_bytes().split(b"\0")
    return json.dumps(sorted(item.split(b"=", 1)[0].decode() for item in raw if item))


@server.tool()
async def echo_env(name: str) -> str:
    """The value of one variable of this process's environment."""
    return os.environ.get(name, "")


@server.tool()
async def request_headers(ctx: Context) -> str:
    """The HTTP headers of this request (over HTTP), lowercased."""
    headers = ctx.headers or {}
    return json.dumps({k.lower(): v for k, v in headers.items()}, sort_keys=True)


@server.resource("note://greeting")
def greeting() -> str:
    return "hello from the server"


if SPEC.get("pid_key"):  # tell the tests which process this is
    SERVICE.apply("pid", SPEC["pid_key"], str(os.getpid()), dedup=False)
for hidden in SPEC.get("hide", []):  # a server whose tool list changed
    server.remove_tool(hidden)

if __name__ == "__main__":
    transport = SPEC.get("transport", "stdio")
    if transport == "stdio":
        server.run("stdio")
    elif transport == "sse":
        server.run("sse", host="127.0.0.1", port=SPEC["port"])
    else:
        server.run("streamable-http", host="127.0.0.1", port=SPEC["port"])
