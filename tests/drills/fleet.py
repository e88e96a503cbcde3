"""Fleet drill processes: a seeder that leaves many threads mid-turn, and a worker that serves.

``python fleet.py seed SPEC`` starts ``count`` threads of the drill agent at once; each run stops
dead (its coroutine waits forever, lease held) right after a seeded number of committed appends,
and the process prints ``{"ready": n}`` once every thread reached its point, for the parent to
SIGKILL it. ``python fleet.py serve SPEC`` runs ``threads.run.worker.Worker`` until SIGTERM and
prints every append the store refused (``{"refused": code}``) and, at the end, its stats.

SPEC: ``url`` (Postgres) or ``store`` (SQLite directory), ``schema``, ``port`` (fake service),
``clock_file`` (offset clock), ``label``, ``gate`` (a service gate ``look_up`` waits on),
``count``, ``seed``, ``concurrency``. ``agents()`` gives the drill agent to ``threads worker``
(``THREADS_DRILL_PORT`` names the service).
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
from typing import Any

from worker import STARTER, OffsetClock, build_agent

from threads.errors import StoreError
from threads.run.agent import Agent
from threads.run.worker import Worker
from threads.store.protocol import Store


def agents() -> list[Agent]:
    return [build_agent({"port": int(os.environ["THREADS_DRILL_PORT"]), "label": "cli"})]


def open_store(spec: dict[str, Any]) -> Store:
    clock = OffsetClock(spec["clock_file"])
    if spec.get("url"):
        from threads.store.postgres import postgres

        return postgres(spec["url"], clock=clock, schema=spec["schema"], max_size=8)
    from threads.store.sqlite import sqlite

    return sqlite(spec["store"], clock=clock)


class Proxy:
    """Forwards everything to the store it wraps; subclasses override ``append``."""

    def __init__(self, inner: Store) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


# one uninterrupted run of the drill script (its first input is written with the thread, not
# appended); a stop point past it is never reached
APPENDS = 13


class StopDead(Proxy):
    """Stops a thread's run for good just before or right after its nth append (seeded per
    branch, at most ``APPENDS``): a crash at that point once the parent kills the process.
    Before an ``effect_commit``, the effect was applied but not recorded."""

    def __init__(self, inner: Store, seed: int, count: int) -> None:
        super().__init__(inner)
        self.seed, self.count = seed, count
        self.appends: dict[str, int] = {}
        self.stopped = 0

    async def append(self, branch_id: str, events: Any, **kwargs: Any) -> None:
        choose = random.Random(f"{self.seed}:{branch_id}")
        before = choose.random() < 0.5
        stop_at = choose.randint(3 if before else 2, APPENDS)
        n = self.appends[branch_id] = self.appends.get(branch_id, 0) + 1
        if before and n == stop_at:
            await self._stop()
        await self.inner.append(branch_id, events, **kwargs)
        if n == stop_at:
            await self._stop()

    async def _stop(self) -> None:
        self.stopped += 1
        if self.stopped == self.count:
            print(json.dumps({"ready": self.stopped}), flush=True)
        await asyncio.Event().wait()


class Refusals(Proxy):
    """Prints each append the store refused: a stale holder's writes show up here."""

    async def append(self, branch_id: str, events: Any, **kwargs: Any) -> None:
        try:
            await self.inner.append(branch_id, events, **kwargs)
        except StoreError as exc:
            print(json.dumps({"refused": exc.code, "branch": branch_id}), flush=True)
            raise


async def seed(spec: dict[str, Any]) -> None:
    store = StopDead(open_store(spec), spec["seed"], spec["count"])
    bot = build_agent(spec)
    runs = [
        bot.run(f"help customer {i}", store=store, principal=STARTER)  # type: ignore[arg-type]
        for i in range(spec["count"])
    ]
    await asyncio.gather(*runs)


async def serve(spec: dict[str, Any]) -> None:
    store = Refusals(open_store(spec))
    worker = Worker(
        store, [build_agent(spec)], concurrency=spec.get("concurrency", 4),  # type: ignore[arg-type]
        poll_ms=50, grace_ms=2000, log=lambda line: print(json.dumps({"log": line}), flush=True),
    )
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    print(json.dumps({"serving": spec["label"]}), flush=True)
    try:
        stats = await worker.serve(stop)
    finally:
        await store.inner.close()
    print(json.dumps({"runs": stats.runs, "outcomes": stats.outcomes}), flush=True)


def main() -> None:
    mode, spec = sys.argv[1], json.loads(sys.argv[2])
    asyncio.run(seed(spec) if mode == "seed" else serve(spec))


if __name__ == "__main__":
    main()
