"""Per-step cost of a scripted run vs a raw SQLite commit, its growth with the conversation, and
the cost of opening a long thread; all from one run.

A step is one model turn that calls a read_only tool: model_request (durable before dispatch,
together with the previous tool_result), model_response + tool_call + permission_decision (one
transaction), then the tool runs. Printed:

- µs per step (median over a run of ``--steps`` steps on a warmed store) and its ratio to one
  raw sqlite3 INSERT + COMMIT of a ~400-byte line with the same pragmas (WAL, synchronous=FULL);
- the same step with an ``idempotent`` tool (its effect is bracketed: ``effect_begin`` durable
  with the reply before the send, ``effect_commit`` written with the result and the next request);
- the step cost at conversation length N=50 and N=800 (median of the steps around each point
  of one long run, so the ratio shows work that grows with the conversation), in wall time and
  in the process's CPU time (which a disk shared with other work does not blur);
- open + state of a 10,001-event thread (``open_thread`` then ``Thread.state``), in ms.

Run: ``python bench/steps.py [--steps N] [--long N]``. The raw commits are timed interleaved
with the runs (before, between and after), so both sides see the same disk conditions.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

import open_state  # bench/open_state.py, beside this file
from threads import Agent, agent, sqlite, tool
from threads.testing.scripted import call, say, scripted_model, use

RAW_COMMITS = 200
OPEN_EVENTS = open_state.EVENTS
WINDOW = 25  # steps each side of a point of the long run
DAY_MS = 86_400_000  # the idempotent tool's dedup window


class Query(BaseModel):
    q: str


class RawLog:
    """The floor: one ~400-byte INSERT + COMMIT, same pragmas as the store."""

    def __init__(self, path: Path) -> None:
        self.db = sqlite3.connect(path, isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, line BLOB) STRICT")
        self.seq = 0

    def commits_us(self, count: int) -> list[float]:
        line = b"x" * 400
        samples = []
        for _ in range(count):
            self.seq += 1
            start = time.perf_counter_ns()
            self.db.execute("BEGIN")
            self.db.execute("INSERT INTO t VALUES (?, ?)", (self.seq, line))
            self.db.execute("COMMIT")
            samples.append((time.perf_counter_ns() - start) / 1000)
        return samples


class StepClock:
    """Stamps each tool execution: the time between two is one whole step (wall time, and the
    CPU time of the whole process, which a busy shared disk does not blur)."""

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.cpu: list[int] = []

    async def lookup(self, args: Query, ctx: object) -> str:
        self.stamps.append(time.perf_counter_ns())
        self.cpu.append(time.process_time_ns())
        return f"result for {args.q}"

    def steps_us(self) -> list[float]:
        return _gaps_us(self.stamps)

    def cpu_us(self) -> list[float]:
        return _gaps_us(self.cpu)


def _gaps_us(stamps: list[int]) -> list[float]:
    return [(b - a) / 1000 for a, b in itertools.pairwise(stamps)]


def bench_agent(steps: int, clock: StepClock, *, idempotent: bool = False) -> Agent:
    script = [use(call("lookup", q=f"q{i}")) for i in range(steps)] + [say("done")]
    lookup_tool = tool(
        name="lookup", description="Look up.", input=Query, execute=clock.lookup,
        **({"effect": "idempotent", "dedup_window_ms": DAY_MS} if idempotent else
           {"effect": "read_only"}),
    )
    return agent(name="bench", model=scripted_model(script), tools=[lookup_tool])


async def run_steps(path: Path, steps: int, *, idempotent: bool = False) -> StepClock:
    """One run of ``steps`` steps on a fresh thread of a warmed store, stamped."""
    store = sqlite(path)
    try:
        await bench_agent(3, StepClock(), idempotent=idempotent).run("warm up", store=store)
        clock = StepClock()
        await bench_agent(steps, clock, idempotent=idempotent).run("go", store=store)
        return clock
    finally:
        await store.close()


async def open_and_state_ms(directory: Path) -> tuple[int, float]:
    """(events, ms) of ``open_thread`` + ``state()`` on a fresh store object (median of 5;
    ``bench/open_state.py`` times it alone)."""
    thread_id = await open_state.build(directory, OPEN_EVENTS)
    opened = [await open_state.open_and_state_ms(directory, thread_id) for _ in range(5)]
    return OPEN_EVENTS, statistics.median(opened)


def at(steps: list[float], n: int) -> float:
    """Median step cost around conversation length ``n`` (steps are numbered from 1)."""
    return statistics.median(steps[max(n - WINDOW, 0) : n + WINDOW])


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=200, help="steps of the timed run")
    parser.add_argument("--long", type=int, default=825, help="steps of the growth run")
    args = parser.parse_args()
    if args.long < 800 + WINDOW:  # the N=800 figure is the median of the steps around it
        parser.error(f"--long must be at least {800 + WINDOW}")
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        raw = RawLog(directory / "raw.db")
        raw_us = raw.commits_us(RAW_COMMITS)
        per_step = (await run_steps(directory / "steps", args.steps)).steps_us()
        raw_us += raw.commits_us(RAW_COMMITS)
        idempotent = (await run_steps(directory / "idem", args.steps, idempotent=True)).steps_us()
        raw_us += raw.commits_us(RAW_COMMITS)
        long_run = await run_steps(directory / "long", args.long)
        raw_us += raw.commits_us(RAW_COMMITS)
        events, open_ms = await open_and_state_ms(directory / "open")
        raw.db.close()
    floor = statistics.median(raw_us)
    step = statistics.median(per_step)
    at_50, at_800 = at(long_run.steps_us(), 50), at(long_run.steps_us(), 800)
    cpu_50, cpu_800 = at(long_run.cpu_us(), 50), at(long_run.cpu_us(), 800)
    print("(medians; ratios are from this one run)")
    rows = [
        ("raw sqlite3 INSERT+COMMIT", f"{floor:9.1f} µs"),
        (f"read_only model->tool step ({args.steps} steps)", f"{step:9.1f} µs"
         f" = {step / floor:5.2f}x raw"),
        (f"same, idempotent tool ({args.steps} steps)",
         f"{statistics.median(idempotent):9.1f} µs"
         f" = {statistics.median(idempotent) / floor:5.2f}x raw"),
        ("step at N=50", f"{at_50:9.1f} µs"),
        ("step at N=800", f"{at_800:9.1f} µs = {at_800 / at_50:5.2f}x N=50"),
        ("CPU of a step at N=50 (all threads)", f"{cpu_50:9.1f} µs"),
        ("CPU of a step at N=800 (all threads)",
         f"{cpu_800:9.1f} µs = {cpu_800 / cpu_50:5.2f}x N=50"),
        (f"open + state of a {events:,}-event thread", f"{open_ms:9.1f} ms"),
    ]
    for label, value in rows:
        print(f"{label:44s} {value}")

if __name__ == "__main__":
    asyncio.run(main())
