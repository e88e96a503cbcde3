"""Takeover drill process: ``python takeover.py run SPEC`` runs the drill agent's thread once on
a SQLite directory (``store``, on the ``clock_file`` offset clock) or a Postgres schema
(``url`` + ``schema``, on the database's clock) and prints the outcome
as one JSON line. With ``gate`` the first tool waits at that service gate, so the parent can
SIGKILL the process while it holds the thread's lease.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from worker import STARTER, OffsetClock, build_agent

from threads import Failed
from threads.store.protocol import Store


def open_store(spec: dict[str, Any]) -> Store:
    """Postgres on the database's lease clock; SQLite on the parent's offset clock, if any."""
    if spec.get("url"):
        from threads.store.postgres import postgres

        return postgres(spec["url"], schema=spec["schema"], max_size=2)
    from threads.store.sqlite import sqlite

    clock = OffsetClock(spec["clock_file"]) if spec.get("clock_file") else None
    return sqlite(spec["store"], clock=clock)


async def run(spec: dict[str, Any]) -> dict[str, Any]:
    store = open_store(spec)
    try:
        result = await build_agent(spec).run(
            spec.get("input"), thread=spec.get("thread"), store=store, principal=STARTER,
            wait=spec.get("wait", False),
        )
    finally:
        await store.close()
    out: dict[str, Any] = {"status": result.status, "thread": result.thread.id}
    if isinstance(result, Failed):
        out.update(error=result.error.code, message=result.error.message)
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(json.loads(sys.argv[2])))), flush=True)
