"""Lease drills in real processes: one writer per thread, and a holder that lost its lease
writes and sends nothing.

(a) 2 to 8 long-lived racer processes start the same thread at once, race after race: exactly
one runs, the rest fail ``branch_busy``; the winner is held inside its tool (a service gate) until
every loser has answered, so the races really overlap. (b) A holder is SIGSTOPped, the store clock
is moved past its lease, another process takes over and finishes, and the old holder is resumed:
its appends are refused (``stale_epoch``) and nothing of it reaches the log or the service.
A SIGKILLed holder's takeover (at once on this host, after expiry from another) is
``test_takeover_drill.py``.
"""

from __future__ import annotations

import asyncio
import json
import os
import queue
import random
import signal
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    LEASE_PAST_MS,
    SUMMARY,
    WORKER,
    Drill,
    duplicates,
    log_events,
    log_lines,
)

from threads import open_thread
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

RACES = 110
RACERS = 8
ANSWER_TIMEOUT_S = 60


class Racer:
    """A long-lived worker that runs the thread once per ``go <race>`` line."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(WORKER), "racer", json.dumps(spec)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        )
        self.answers: queue.Queue[dict[str, Any]] = queue.Queue()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.answers.put(json.loads(line))

    def go(self, race: int) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(f"go {race}\n")
        self.proc.stdin.flush()

    def answer(self) -> dict[str, Any]:
        return self.answers.get(timeout=ANSWER_TIMEOUT_S)

    def stop(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait(timeout=30)
        self.reader.join(timeout=30)
        assert self.proc.stdout is not None
        self.proc.stdout.close()


def check_chain(drill: Drill) -> None:
    """The stored log still verifies (hash chain, contiguous seqs)."""

    async def verify() -> None:
        store = SQLiteStore(drill.store_dir)
        try:
            await open_thread(store, drill.thread_id())
        finally:
            await store.close()

    asyncio.run(verify())
    seqs = [e["seq"] for e in log_events(drill.store_dir)]
    assert seqs == list(range(1, len(seqs) + 1))


def one_race(racers: list[Racer], race: int, service: FakeService) -> tuple[list[dict], int]:
    """Start ``racers`` at once; returns their answers and the executors the service saw."""
    client = service.client()
    before = len(client.snapshot()["log"])
    for racer in racers:
        racer.go(race)
    pending = list(racers)
    answers = [_first_answer(pending) for _ in range(len(racers) - 1)]
    client.open_gate(f"race-{race}")
    answers.append(_first_answer(pending))
    executors = {entry["who"] for entry in client.snapshot()["log"][before:]}
    return answers, len(executors)


def _first_answer(pending: list[Racer]) -> dict[str, Any]:
    """The next answer from any racer still running (losers answer while the winner waits)."""
    waited = 0.0
    while waited < ANSWER_TIMEOUT_S:
        for racer in pending:
            try:
                answer = racer.answers.get(timeout=0.01)
            except queue.Empty:
                continue
            pending.remove(racer)
            return answer
        waited += 0.01 * len(pending)
    raise AssertionError("a racer did not answer")


@pytest.mark.timeout(300)
def test_racers_one_runs_the_rest_are_busy(service: FakeService, tmp_path: Path) -> None:
    drill = Drill(tmp_path, service)
    assert drill.run(profile="race", input="setup")["status"] == "completed"
    thread = drill.thread_id()
    seed = int(os.environ.get("THREADS_DRILL_SEED") or random.SystemRandom().randrange(2**32))
    rng = random.Random(seed)
    racers = [Racer(drill.spec(profile="race", thread=thread, label=f"racer{i}"))
              for i in range(RACERS)]
    try:
        for racer in racers:
            assert racer.answer() == {"ready": True}
        busy = double = 0
        for race in range(1, RACES + 1):
            chosen = rng.sample(racers, rng.randint(2, RACERS))
            answers, executors = one_race(chosen, race, service)
            statuses = sorted(a["status"] for a in answers)
            assert statuses == ["completed"] + ["failed"] * (len(chosen) - 1), (race, answers)
            assert all(a["error"] == "branch_busy" for a in answers if a["status"] == "failed")
            busy += len(chosen) - 1
            double += executors > 1
            assert executors == 1, f"race {race}: {executors} executors (seed {seed})"
    finally:
        for racer in racers:
            racer.stop()
    check_chain(drill)
    assert duplicates(drill) == {}
    turns = sum(1 for e in log_events(drill.store_dir) if e["type"] == "turn_completed")
    assert turns == RACES + 1
    SUMMARY.append(
        f"races: {RACES} races of 2-{RACERS} processes, {RACES} winners, {busy} branch_busy,"
        f" {double} double executors (seed {seed})"
    )


STOP_POINTS = ["in_read_only_tool", "after_effect_begin_before_send"]


def stop_fields(point: str, port: int) -> dict[str, Any]:
    """Where the holder waits to be SIGSTOPped: inside a read-only tool, or right after its
    charge's ``effect_begin`` committed, before the fence check that precedes the send."""
    if point == "in_read_only_tool":
        return {"gate": f"hold-{point}"}
    return {"kill": {"type": "effect_begin", "tool": "charge_card", "nth": 1,
                     "hold_at_gate": f"hold-{point}", "port": port}}


@pytest.mark.parametrize("point", STOP_POINTS)
def test_stopped_holder_resumed_after_takeover_writes_nothing(
    point: str, service: FakeService, tmp_path: Path
) -> None:
    drill = Drill(tmp_path, service)
    client = service.client()
    start = len(client.snapshot()["log"])
    spec = drill.spec(label="holder", input="go", **stop_fields(point, service.port))
    holder = subprocess.Popen(
        [sys.executable, str(WORKER), "run", json.dumps(spec)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    client.await_waiting(f"hold-{point}")
    os.kill(holder.pid, signal.SIGSTOP)
    try:
        drill.advance(LEASE_PAST_MS)  # the holder's lease is over by the store's clock
        taken = drill.run(thread=drill.thread_id(), input=None, label="taker")
        assert taken["status"] == "completed", taken
    finally:
        lines, sent = log_lines(drill.store_dir), client.snapshot()["log"][start:]
        client.open_gate(f"hold-{point}")
        os.kill(holder.pid, signal.SIGCONT)
    out, err = holder.communicate(timeout=60)
    assert holder.returncode == 0, err
    result = json.loads(out.strip().splitlines()[-1])
    assert result["status"] == "failed", result
    assert result["error"] == "stale_epoch", result
    refused = result["refused_appends"]  # the store refused each append the holder tried
    assert set(refused) <= {"stale_epoch"}, refused
    assert log_lines(drill.store_dir) == lines, "the stale holder reached the log"
    assert client.snapshot()["log"][start:] == sent, "the stale holder reached the service"
    assert sent, "the taker applied the effects"
    assert all(entry["who"] == "taker" for entry in sent)
    events = log_events(drill.store_dir)
    takeover = next(i for i, e in enumerate(events) if e["epoch"] > events[0]["epoch"])
    assert all(e["epoch"] > events[0]["epoch"] for e in events[takeover:])
    check_chain(drill)
    assert duplicates(drill) == {}
    SUMMARY.append(
        f"lease: SIGSTOPped holder ({point}) resumed after takeover:"
        f" {len(refused)} append(s) refused"
        " stale_epoch, 0 stale writes accepted, 0 stale sends"
    )
