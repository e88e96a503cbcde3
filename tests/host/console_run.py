"""A library run in its own process, on the store a host serves: ``python console_run.py STORE
AGENT INPUT`` runs AGENT (from ``console_agents``) as alice of tenant acme, prints the thread
id as soon as the thread exists, then its result status when the run returns."""

from __future__ import annotations

import asyncio
import sys

from console_agents import agents

from threads import Principal
from threads.log.lines import Event
from threads.store.sqlite import sqlite

ALICE = Principal(issuer="test", tenant="acme", subject="alice")


async def main(store_path: str, name: str, text: str) -> None:
    store = sqlite(store_path)
    try:
        chosen = next(a for a in agents() if a.name == name)
        printed = False
        async with chosen.stream(text, store=store, principal=ALICE) as stream:
            async for item in stream:
                if not printed and isinstance(item, Event):
                    print(f"thread {item.thread_id}", flush=True)
                    printed = True
            result = await stream.result
        print(f"status {result.status}", flush=True)
    finally:
        await store.close()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
