"""Hello world: one agent, one tool, the scripted model (no API key, no network).

    python examples/hello.py

The scripted model plays a fixed script of replies; swap in ``threads.openai.openai(...)`` or
``threads.anthropic.anthropic(...)`` for a real one. Everything the run does is in the thread's
log, which the last lines print.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile

from threads import Completed, agent, sqlite, tool
from threads.testing import call, say, scripted_model, use


@tool(effect="read_only")
def greeting(name: str) -> str:
    """Say hello to someone."""
    return f"Hello, {name}!"


bot = agent(
    name="greeter",
    model=scripted_model([use(call("greeting", name="world")), say("Hello, world!")]),
    instructions="Greet whoever the user names.",
    tools=[greeting],
)


async def main(store_dir: str) -> int:
    store = sqlite(store_dir)
    try:
        result = await bot.run("Please greet the world.", store=store)
        if not isinstance(result, Completed):
            print(f"the run ended {result.status}", file=sys.stderr)
            return 1
        print(result.output)
        for event in await result.thread.timeline():
            print(f"  {event.seq:>2} {event.type}")
        return 0
    finally:
        await store.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as directory:
        sys.exit(asyncio.run(main(directory)))
