"""Drill worker for MCP tools: one ``Agent.run`` whose only tools are a real MCP server's
(``tests/mcp/counting_server.py``), on a real SQLite store, in its own process.

``python mcp_worker.py run SPEC``; SPEC is the drill's (``store``, ``port`` of the fake
service, ``clock_file``, ``thread``, ``input``, ``kill``: a KillingStore kill point, which
with ``hold_at_gate`` holds instead of dying) plus ``tool`` (the server tool the script
calls), ``url`` (a running HTTP server: Streamable HTTP, or SSE when it ends in ``/sse``) or,
without it, a stdio child started with ``server`` (its spec: ``hold``, ``pid_key``).

The server's tools get these effect classes: ``charge`` idempotent (the server dedups by
``threads/effect_key``), ``refund`` reconcilable through the server's own ``find_refund``
(final), ``look_up`` and ``find_refund`` read-only, ``send_email`` unguarded (the server's
default).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))

from worker import STARTER, open_store, outcome, print_outcome

from threads import agent
from threads.mcp import LookupTool, McpServer, ToolEffect, mcp
from threads.run.agent import Agent
from threads.testing.scripted import call, say, scripted_model, use

SERVER = Path(__file__).parents[1] / "mcp" / "counting_server.py"
DAY_MS = 24 * 60 * 60 * 1000
ARGS: dict[str, dict[str, Any]] = {
    "look_up": {"account": "a1"},
    "charge": {"amount": 5},
    "refund": {"amount": 2},
    "send_email": {"to": "c@example.com"},
}
EFFECTS = {
    "charge": ToolEffect("idempotent", dedup_window_ms=DAY_MS),
    "refund": ToolEffect("reconcilable", reconcile=LookupTool("find_refund", finality="final")),
    "look_up": ToolEffect("read_only"),
    "find_refund": ToolEffect("read_only"),
}


def server_of(spec: dict[str, Any]) -> McpServer:
    options: dict[str, Any] = {
        "effects": EFFECTS,
        "tools": {"allow": [*ARGS, "find_refund"]},
        "setup_timeout_s": 60,
    }
    if spec.get("mcp_url"):
        return mcp(name="svc", url=spec["mcp_url"], **options)
    server_spec = {"transport": "stdio", "service_port": spec["port"], **spec.get("server", {})}
    return mcp(name="svc", command=sys.executable, args=[str(SERVER), json.dumps(server_spec)],
               **options)


def build(spec: dict[str, Any]) -> Agent:
    tool = spec["tool"]
    script = [use(call(f"mcp__svc__{tool}", **ARGS[tool])), say("all done"), say("bye")]
    return agent(name="mcp-drill", model=scripted_model(script), tools=[server_of(spec)])


async def run_once(spec: dict[str, Any]) -> dict[str, Any]:
    store = open_store(spec)
    try:
        result = await build(spec).run(spec.get("input"), thread=spec.get("thread"),
                                       store=store, principal=STARTER)
        return outcome(result, store)
    finally:
        await store.close()


if __name__ == "__main__":
    print_outcome(run_once)
