"""Per-step framework overhead of a scripted run vs a raw SQLite commit, in one run.

A step is one model turn that calls a read_only tool: model_request (durable before dispatch,
together with the previous tool_result), model_response + tool_call + permission_decision (one
transaction), then the tool runs. Two durable transactions per step. We print the
median time per step and per durable transaction next to a raw sqlite3 INSERT+COMMIT of a
~400-byte line with the same pragmas (WAL, synchronous=FULL), and the ratios.
"""

from __future__ import annotations

import asyncio
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

from threads import Agent, agent, sqlite, tool
from threads.testing.scripted import call, say, scripted_model, use

STEPS = 100
RAW_COMMITS = 400


class Query(BaseModel):
    q: str


async def lookup(args: Query, ctx: object) -> str:
    return f"result for {args.q}"


def raw_commit_us(path: Path) -> float:
    db = sqlite3.connect(path, isolation_level=None)
    db.execute("PRAGMA journal_mode=WAL")
    db.execute("PRAGMA synchronous=FULL")
    db.execute("CREATE TABLE t (seq INTEGER PRIMARY KEY, line BLOB) STRICT")
    line = b"x" * 400
    samples = []
    for i in range(RAW_COMMITS):
        start = time.perf_counter_ns()
        db.execute("BEGIN")
        db.execute("INSERT INTO t VALUES (?, ?)", (i, line))
        db.execute("COMMIT")
        samples.append((time.perf_counter_ns() - start) / 1000)
    db.close()
    return statistics.median(samples)


def bench_agent() -> Agent:
    script = [use(call("lookup", q=f"q{i}")) for i in range(STEPS)] + [say("done")]
    lookup_tool = tool(
        name="lookup", description="Look up.", input=Query, execute=lookup, effect="read_only"
    )
    return agent(name="bench", model=scripted_model(script), tools=[lookup_tool])


async def steps_us(path: Path) -> tuple[float, float]:
    """Steady state: a first run opens and warms the store; the second run is timed."""
    store = sqlite(path)
    await bench_agent().run("warm up", store=store)
    bot = bench_agent()
    original = store.append
    commits = 0

    async def counting_append(*args: object, **kwargs: object) -> None:
        nonlocal commits
        commits += 1
        await original(*args, **kwargs)  # type: ignore[arg-type]

    store.append = counting_append  # type: ignore[method-assign]
    start = time.perf_counter_ns()
    await bot.run("go", store=store)
    elapsed_us = (time.perf_counter_ns() - start) / 1000
    await store.close()
    return elapsed_us / STEPS, elapsed_us / commits


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        raw = raw_commit_us(Path(tmp) / "raw.db")
        per_step, per_txn = asyncio.run(steps_us(Path(tmp) / "store"))
    print(f"raw sqlite INSERT+COMMIT (median)         {raw:9.1f} µs")
    print(
        f"threads scripted step (model turn + tool) {per_step:9.1f} µs  = {per_step / raw:.2f}x raw"
    )
    print(
        f"threads per durable transaction           {per_txn:9.1f} µs  = {per_txn / raw:.2f}x raw"
    )


if __name__ == "__main__":
    main()
