"""Bytes on disk of a growing chat, and of one huge tool output, in one run.

The chat is one thread whose scripted model asks for one read_only tool per turn, each tool
answering ~1 KB, so every model request is the previous one plus ~1.1 KB. For n = 50, 100,
200, 400 turns (a fresh store directory each) we print the bytes the directory holds once the
store is closed (``threads.db`` after its WAL is checkpointed, plus every artifact file) and
fit the growth exponent (least squares of log bytes on log n). Then one thread of five short
turns, one of whose tools returns 10 MB: a store that keeps that output once stays near 10 MB.

    .venv/bin/python bench/storage.py
"""

from __future__ import annotations

import asyncio
import math
import random
import tempfile
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


def exponent(points: list[tuple[int, int]]) -> float:
    xs = [math.log(n) for n, _ in points]
    ys = [math.log(b) for _, b in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mx) ** 2 for x in xs
    )


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="threads-storage-") as tmp:
        points: list[tuple[int, int]] = []
        print(f"{'turns':>6} {'bytes':>12} {'allocated':>12} {'bytes/turn since last':>22}")
        for n in SIZES:
            size, allocated = await chat_bytes(Path(tmp) / f"chat{n}", n)
            marginal = f"{(size - points[-1][1]) / (n - points[-1][0]):>22,.0f}" if points else ""
            points.append((n, size))
            print(f"{n:>6} {size:>12,} {allocated:>12,} {marginal}")
        print(f"growth exponent over n={SIZES[0]}..{SIZES[-1]}: {exponent(points):.2f}")
        size, allocated = await chat_bytes(Path(tmp) / "huge", 5, huge_at=1)
        print(f"5 turns, one 10 MiB tool output: {size:,} bytes ({size / len(HUGE):.2f}x the"
              f" output), {allocated:,} allocated")


if __name__ == "__main__":
    asyncio.run(main())
