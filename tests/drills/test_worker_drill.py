"""Worker drills: many threads left mid-turn by a killed process are finished by workers.

Postgres (the fleet): a seeder starts 50 threads of the drill agent (idempotent, reconcilable and
unguarded tools against the fake service) and is SIGKILLed once each stopped at a seeded append;
3 worker processes share the store; one is SIGKILLed while it holds runs, another SIGSTOPped
while it holds runs, the store clock is moved past their leases (nobody sleeps), the third
takes everything over, and the stopped one is resumed after: its appends are refused. Parks are
resolved by the test as the operator (after checking the service). SQLite: the same with 10
threads and the real ``threads worker --once`` CLI.
At the end: every thread finished, no effect applied twice, every branch's ``seq`` contiguous
and its epochs never going back (no stale write accepted), the hash chain intact.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drill_harness import KILLED, LEASE_PAST_MS, STARTER, SUMMARY, write_atomic
from worker import OffsetClock

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres
from threads import ControlError, open_thread
from threads.errors import StoreError
from threads.log.fold import Fold
from threads.store.protocol import Store
from threads.testing.fake_service import FakeService
from threads.tools.tool import DEFAULT_SETTLE_MS

FLEET = Path(__file__).with_name("fleet.py")
DEADLINE_S = 60


class Fleet:
    """The store every process shares, the clock they all read, and the processes."""

    def __init__(self, tmp: Path, service: FakeService, *, url: str | None) -> None:
        self.service = service
        self.clock_file = tmp / "clock_offset_ms"
        self.offset = 0
        write_atomic(self.clock_file, "0")
        self.base: dict[str, Any] = {"port": service.port, "clock_file": str(self.clock_file),
                                     "profile": "drill"}
        if url is not None:
            self.base.update(url=url, schema=fresh_schema())
        else:
            self.base["store"] = str(tmp / "store")
        self.kills = 0
        self.resolved = 0
        self.procs: list[subprocess.Popen[str]] = []

    def advance(self, ms: int) -> None:
        self.offset += ms
        write_atomic(self.clock_file, str(self.offset))

    def spawn(self, mode: str, **fields: Any) -> subprocess.Popen[str]:
        spec = {**self.base, **fields}
        proc = subprocess.Popen(
            [sys.executable, str(FLEET), mode, json.dumps(spec)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        self.procs.append(proc)
        return proc

    def reap(self) -> None:
        """After a failed drill: end the processes this drill started and still runs."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)
                proc.kill()
                proc.communicate(timeout=30)

    def seed(self, count: int) -> None:
        """Leave ``count`` threads mid-turn: the seeder stops each, then is SIGKILLed."""
        seeder = self.spawn("seed", count=count, seed=8, label="seeder")
        assert seeder.stdout is not None
        line = seeder.stdout.readline()
        assert json.loads(line or "{}").get("ready") == count, seeder.communicate()[1]
        self.sigkill(seeder)

    def sigkill(self, proc: subprocess.Popen[str]) -> None:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=30)
        assert proc.returncode == KILLED
        self.kills += 1

    def store(self) -> Store:
        return _open(self.base)

    async def operator_pass(self) -> list[Fold]:
        """Fold every thread; settle each parked effect the way a careful operator does."""
        store = self.store()
        try:
            folds = []
            for root in await store.list_threads():
                fold = (await store.read_chain(root.branch_id)).fold(store.clock.now_ms())
                for kind, key in list(fold.parks):
                    assert kind == "effect", fold.parks
                    await self._resolve(store, root.thread_id, key)
                folds.append(fold)
            return folds
        finally:
            await store.close()

    async def _resolve(self, store: Store, thread_id: str, key: str) -> None:
        applied = self.service.client().count(key) >= 1
        thread = await open_thread(store, thread_id)
        try:
            await thread.resolve_parked(key, "assume_done" if applied else "assume_not_done",
                                        STARTER)
            self.resolved += 1
        except StoreError as exc:  # a worker holds it right now: next pass
            if exc.code != "branch_busy":
                raise
        except ControlError as exc:
            # An earlier holder may still be sending it: a careful operator waits the window
            # out (the clock moves, nobody sleeps), then checks the service again next pass.
            if exc.code != "holder_may_be_running":
                raise
            self.advance(DEFAULT_SETTLE_MS + 1)

    def settle_until_done(self, count: int, also: Any = None) -> list[Fold]:
        """Operator passes until every thread completed its turn (no sleep for a lease: the
        short pause only paces the polling)."""
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if also is not None:
                also()
            folds = asyncio.run(self.operator_pass())
            if len(folds) == count and all(finished(f) for f in folds):
                return folds
            time.sleep(0.1)
        stuck = [(f.status, [(e.seq, e.type, e.epoch) for e in f.events[-3:]])
                 for f in folds if not finished(f)]
        raise AssertionError(f"not finished: {stuck}")


def _open(spec: dict[str, Any]) -> Store:
    clock = OffsetClock(spec["clock_file"])
    if spec.get("url"):
        from threads.store.postgres import postgres

        return postgres(spec["url"], clock=clock, schema=spec["schema"], max_size=2)
    from threads.store.sqlite import sqlite

    return sqlite(spec["store"], clock=clock)


def finished(fold: Fold) -> bool:
    return fold.status == "idle" and fold.turns_completed >= 1


async def audit(fleet: Fleet) -> dict[str, int]:
    """Every branch: seq contiguous from 1, epochs never going back, chain verified (read_chain
    re-hashes it); and no effect key applied twice without an operator's assume_not_done."""
    store = fleet.store()
    counts = fleet.service.client().snapshot()["counts"]
    duplicates, events_seen = 0, 0
    try:
        for root in await store.list_threads():
            for branch in await store.list_branches(root.thread_id):
                events = (await store.read_chain(branch.branch_id)).events
                events_seen += len(events)
                assert [e.seq for e in events] == list(range(1, len(events) + 1))
                epochs = [e.epoch for e in events]
                assert epochs == sorted(epochs), f"an older epoch was accepted: {epochs}"
                accepted = {
                    e.data["call_id"] for e in events
                    if e.type == "effect_resolved" and e.data["by"] == "human"
                    and e.data["outcome"] == "assume_not_done"
                }
                for e in events:
                    if e.type == "tool_call" and e.data["call_id"] not in accepted:
                        key = f"{branch.branch_id}:{e.data['call_id']}"
                        duplicates += counts.get(key, 0) > 1
    finally:
        await store.close()
    return {"duplicates": duplicates, "events": events_seen}


def output(proc: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


@pytest.fixture
def pg_fleet(tmp_path: Path, service: FakeService) -> Iterator[Fleet]:
    fleet = Fleet(tmp_path, service, url=URL)
    try:
        yield fleet
    finally:
        fleet.reap()
        asyncio.run(drop_schema(fleet.base["schema"]))


@pytest.mark.drill
@needs_postgres
def test_three_workers_finish_fifty_threads_through_a_kill_and_a_stop(pg_fleet: Fleet) -> None:
    fleet, client = pg_fleet, pg_fleet.service.client()
    fleet.seed(50)
    fleet.advance(LEASE_PAST_MS)  # the seeder's leases are over
    killed = fleet.spawn("serve", label="A", gate="hold-A")
    stopped = fleet.spawn("serve", label="B", gate="hold-B")
    client.await_waiting("hold-A")  # A holds a run inside a tool
    fleet.sigkill(killed)
    client.await_waiting("hold-B")
    stopped.send_signal(signal.SIGSTOP)
    fleet.advance(LEASE_PAST_MS)  # A's and B's leases are over
    client.open_gate("hold-B")  # B sees it only once resumed
    survivor = fleet.spawn("serve", label="C")
    try:
        fleet.settle_until_done(50)
    except AssertionError:
        survivor.send_signal(signal.SIGTERM)
        out, _ = survivor.communicate(timeout=30)
        raise AssertionError(out[-6000:]) from None
    stopped.send_signal(signal.SIGCONT)
    stopped.send_signal(signal.SIGTERM)
    survivor.send_signal(signal.SIGTERM)
    late, last = output(stopped), output(survivor)
    refused = [m for m in late if m.get("refused")]
    stale = sum(m.get("outcomes", {}).get("stale_epoch", 0) for m in late)
    assert refused or stale, late  # the resumed worker's writes were refused
    assert all(m["refused"] == "stale_epoch" for m in refused), refused
    folds = asyncio.run(fleet.operator_pass())
    assert len(folds) == 50
    assert all(finished(f) for f in folds)
    report = asyncio.run(audit(fleet))
    assert report["duplicates"] == 0
    runs = sum(m.get("runs", 0) for m in late + last)
    SUMMARY.append(
        f"worker drill (postgres): threads=50 kills={fleet.kills} (seeder + 1 worker) stops=1"
        f" resolved={fleet.resolved} worker_runs={runs} stale_writes_refused={len(refused)}"
        f" stale_runs={stale} duplicates={report['duplicates']} events={report['events']}"
    )


@pytest.mark.drill
def test_threads_worker_once_finishes_threads_on_sqlite(
    tmp_path: Path, service: FakeService, request: pytest.FixtureRequest
) -> None:
    fleet = Fleet(tmp_path, service, url=None)
    request.addfinalizer(fleet.reap)
    # ``threads worker`` reads the system clock: the seeder's clock runs a lease behind, so the
    # leases it held are over for the CLI the moment it is killed (nobody waits for them).
    fleet.advance(-LEASE_PAST_MS)
    fleet.seed(10)
    env = {**os.environ, "THREADS_DRILL_PORT": str(service.port)}
    command = [sys.executable, "-m", "threads.cli", "worker", "fleet:agents",
               "--store", fleet.base["store"], "--once", "--concurrency", "4"]

    def one_pass() -> None:
        done = subprocess.run(command, cwd=FLEET.parent, env=env, capture_output=True,
                              text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert "worker done" in done.stdout

    fleet.settle_until_done(10, also=one_pass)
    report = asyncio.run(audit(fleet))
    assert report["duplicates"] == 0
    SUMMARY.append(
        f"worker drill (sqlite, threads worker --once): threads=10 kills={fleet.kills}"
        f" resolved={fleet.resolved} duplicates={report['duplicates']}"
    )
