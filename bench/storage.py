"""Bytes on disk of a growing chat, and of one huge tool output, in one run.

The chat is one thread whose scripted model asks for one read_only tool per turn, each tool
answering ~1 KB, so every model request is the previous one plus ~1.1 KB. For n = 50, 100,
200, 400 turns (a fresh store directory each) we print the bytes the directory holds once the
store is closed (``threads.db`` after its WAL is checkpointed, plus every artifact file) and
fit the growth exponent (least squares of log bytes on log n). Then one thread of five short
turns, one of whose tools returns 10 MB: a store that keeps that output once stays near 10 MB.

With ``--postgres URL`` the same runs go to a Postgres store instead (a fresh schema each,
dropped after), and the bytes are the schema's tables with their indexes and TOAST
(``pg_total_relation_size``).

    .venv/bin/python bench/storage.py [--postgres postgresql://postgres@127.0.0.1:5432/test]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import random
import tempfile
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path

from pydantic import BaseModel

from threads import Agent, agent, sqlite, tool
from threads.testing.scripted import call, say, scripted_model, use

SIZES = (50, 100, 200, 400)
WORDS = (
    "the", "store", "keeps", "each", "line", "as", "written", "and", "a", "reader", "checks",
    "every", "hash", "before", "it", "trusts", "what", "branch", "says", "about", "its", "head",
    "so", "crash", "leaves", "either", "all", "of", "an", "append", "or", "none", "while",
    "tool", "output", "here", "stands", "in", "for", "search", "result", "file",
)
TURN_BYTES = 880  # each turn adds ~1.08 KB to the request, as the 400-turn chat did
HUGE = "0123456789abcdef" * (10 * 1024 * 1024 // 16)  # 10 MiB


class Query(BaseModel):
    q: str


def turn_text(turn: int) -> str:
    """~``TURN_BYTES`` of prose, different every turn (seeded: the same in every run)."""
    rng = random.Random(turn)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < TURN_BYTES:
        words.append(rng.choice(WORDS) + (str(rng.randrange(1000)) if rng.random() < 0.2 else ""))
    return " ".join(words)


def chat_agent(turns: int, huge_at: int | None = None) -> Agent:
    async def lookup(args: Query, ctx: object) -> str:
        return HUGE if args.q == f"q{huge_at}" else turn_text(int(args.q[1:]))

    script = [use(call("lookup", q=f"q{i}")) for i in range(turns)] + [say("done")]
    lookup_tool = tool(
        name="lookup", description="Look up.", input=Query, execute=lookup, effect="read_only"
    )
    return agent(name="chat", model=scripted_model(script), tools=[lookup_tool])


def disk_bytes(root: Path) -> tuple[int, int]:
    """(sum of file sizes, blocks allocated) under ``root``."""
    files = [p for p in root.rglob("*") if p.is_file()]
    return sum(p.stat().st_size for p in files), sum(p.stat().st_blocks * 512 for p in files)


async def chat_bytes(root: Path, turns: int, huge_at: int | None = None) -> tuple[int, int]:
    store = sqlite(root)
    await chat_agent(turns, huge_at).run("go", store=store)
    await store.close()
    return disk_bytes(root)


async def postgres_chat_bytes(url: str, turns: int, huge_at: int | None = None) -> tuple[int, int]:
    """(bytes of the schema's tables, indexes and TOAST, the same again): Postgres allocates
    in pages, so there is no separate file-size figure."""
    import psycopg
    from psycopg import sql

    from threads.store.postgres import postgres

    schema = f"storage_{uuid.uuid4().hex[:12]}"
    store = postgres(url, schema=schema)
    try:
        await chat_agent(turns, huge_at).run("go", store=store)
    finally:
        await store.close()
    async with await psycopg.AsyncConnection.connect(url, autocommit=True) as conn:
        try:
            cursor = await conn.execute(
                "SELECT sum(pg_total_relation_size(c.oid))::bigint FROM pg_class c"
                " JOIN pg_namespace n ON n.oid = c.relnamespace"
                " WHERE n.nspname = %s AND c.relkind = 'r'",
                (schema,),
            )
            row = await cursor.fetchone()
            size = int(row[0]) if row is not None else 0
        finally:
            await conn.execute(
                sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
            )
    return size, size


def exponent(points: list[tuple[int, int]]) -> float:
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(b) for _, b in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


async def main(postgres_url: str | None) -> None:
    with tempfile.TemporaryDirectory(prefix="threads-storage-") as tmp:
        measure: Callable[[str, int, int | None], Awaitable[tuple[int, int]]]
        if postgres_url is None:
            measure = lambda name, n, huge: chat_bytes(Path(tmp) / name, n, huge)  # noqa: E731
        else:
            measure = lambda _name, n, huge: postgres_chat_bytes(postgres_url, n, huge)  # noqa: E731
            print(f"Postgres at {postgres_url}")
        points: list[tuple[int, int]] = []
        print(f"{'turns':>6} {'bytes':>12} {'allocated':>12} {'bytes/turn since last':>22}")
        for n in SIZES:
            size, allocated = await measure(f"chat{n}", n, None)
            marginal = f"{(size - points[-1][1]) / (n - points[-1][0]):>22,.0f}" if points else ""
            points.append((n, size))
            print(f"{n:>6} {size:>12,} {allocated:>12,} {marginal}")
        print(f"growth exponent over n={SIZES[0]}..{SIZES[-1]}: {exponent(points):.2f}")
        size, allocated = await measure("huge", 5, 1)
        print(f"5 turns, one 10 MiB tool output: {size:,} bytes ({size / len(HUGE):.2f}x the"
              f" output), {allocated:,} allocated")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--postgres", metavar="URL", help="measure a Postgres store instead")
    asyncio.run(main(parser.parse_args().postgres))
