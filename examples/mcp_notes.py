"""An agent using a local MCP server's tools, crash-safe (no API key, no network).

    python examples/mcp_notes.py          # the agent: starts the server below, calls its tools
    python examples/mcp_notes.py serve    # the server alone, speaking MCP on stdin/stdout

The server (built with the official MCP SDK) keeps notes in the file ``NOTES_FILE`` names, and
files each note under the effect key threads sends in the request's ``_meta``
(``threads/effect_key``): a resend after a crash finds the note already there. So the agent
declares ``add_note`` idempotent, and ``list_notes`` read-only; any other tool of the server
would stay ``unguarded`` (a call a crash left in doubt parks for a person).
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer

from threads import Completed, agent, sqlite
from threads.mcp import ToolEffect, mcp
from threads.testing import call, say, scripted_model, use


def serve() -> None:
    server = MCPServer("notes")
    notes = Path(os.environ["NOTES_FILE"])

    def read() -> dict[str, str]:
        return dict(json.loads(notes.read_text())) if notes.exists() else {}

    @server.tool()
    def add_note(text: str, ctx: Context) -> str:
        """Add a note."""
        key = str((ctx.request_context.meta or {}).get("threads/effect_key", text))
        saved = read()
        if key not in saved:  # the same key twice is one note: a resend changes nothing
            saved[key] = text
            notes.write_text(json.dumps(saved))
        return f"noted: {saved[key]}"

    @server.tool()
    def list_notes() -> str:
        """List every note."""
        return "\n".join(read().values()) or "no notes yet"

    server.run("stdio")


async def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        notes = mcp(
            name="notes",
            command=sys.executable,
            args=[__file__, "serve"],
            env={"NOTES_FILE": str(Path(tmp) / "notes.json")},  # all it gets, with PATH and HOME
            effects={
                "add_note": ToolEffect("idempotent", dedup_window_ms=24 * 60 * 60 * 1000),
                "list_notes": ToolEffect("read_only"),
            },
        )
        bot = agent(
            name="note-taker",
            model=scripted_model([
                use(call("mcp__notes__add_note", text="buy milk")),
                use(call("mcp__notes__list_notes")),
                say("Noted. Your notes: buy milk."),
            ]),
            tools=[notes],
        )
        store = sqlite(Path(tmp) / "store")
        try:
            result = await bot.run("Remember to buy milk.", store=store)
            assert isinstance(result, Completed), result
            print(result.output)
            for event in await result.thread.timeline():
                if event.type in ("tool_call", "effect_begin", "effect_commit", "tool_result"):
                    print(f"  {event.seq:>2} {event.type}")
        finally:
            await store.close()


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        serve()
    else:
        asyncio.run(main())
