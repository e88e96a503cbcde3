"""A 1,000-turn chat against a model with an 8k-token window, compaction on (issue 32 item 4).

One thread, one run per turn: the user writes ~250 bytes, the model (``ChatModel``) looks it up
with one read_only tool answering ~500 bytes, then replies ``re: <the user's text>``, so each
turn adds ~1 KB to the conversation. The window is 8,192 tokens (a quarter token per byte) with
a reserve of 1,024, so the thread outgrows it every ~25 turns: old tool results are cleared at
70% of the window and the oldest conversation is summarized at 85%, keeping the newest 2,000
tokens. The model reports a prompt cache (the request lines it shares from the start with the
previous request), so the thread's ``cache_breaks`` say which requests broke it and why.

Printed: turns completed (every one must be, none ``context_exhausted``), compactions, context
edits, failed compactions, bytes on disk at each checkpoint (the SQLite store closed, as
``bench/storage.py`` measures) with the fitted growth exponent of bytes on turns, and the cache
breaks by likely cause.

    .venv/bin/python bench/long_chat.py [--turns 1000] [--window 8192]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from storage import exponent  # bench/storage.py, beside this file: the same fit
from threads import (
    Completed,
    ContextPolicy,
    Principal,
    RunContext,
    agent,
    open_thread,
    sqlite,
    tool,
)
from threads.store.protocol import Store
from threads.testing.chat_model import ChatModel

USER = Principal("api", "local", "bench")
WORDS = (
    "the", "store", "keeps", "each", "line", "as", "written", "and", "a", "reader", "checks",
    "every", "hash", "before", "it", "trusts", "what", "branch", "says", "about", "its", "head",
    "so", "crash", "leaves", "either", "all", "of", "an", "append", "or", "none", "while",
)


class Query(BaseModel):
    query: str


def prose(seed: int, size: int) -> str:
    """~``size`` bytes of words, different for every seed (the same in every run)."""
    rng = random.Random(seed)
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < size:
        words.append(rng.choice(WORDS) + (str(rng.randrange(1000)) if rng.random() < 0.2 else ""))
    return " ".join(words)


async def _lookup(args: Query, ctx: RunContext) -> str:
    return prose(zlib.crc32(args.query.encode()), 500)


LOOKUP = tool(name="lookup", description="Look it up.", input=Query, execute=_lookup,
              effect="read_only")


def policy(window: int) -> ContextPolicy:
    """The numbers a small window needs (the reference's defaults assume 200k)."""
    reserve = window // 8
    return ContextPolicy(reserve_tokens=reserve, keep_tail_tokens=(window - reserve) // 4,
                         compact_permille=850, clear_permille=700, keep_recent=3)


@dataclass
class Figures:
    turns: int = 0
    thread_id: str = ""
    completed: int = 0
    exhausted: int = 0
    compactions: int = 0
    failed: int = 0
    edits: int = 0
    checkpoints: list[tuple[int, int]] = field(default_factory=list)  # (turns, bytes)
    breaks: Counter[str] = field(default_factory=Counter)
    break_requests: list[str] = field(default_factory=list)
    compaction_requests: set[str] = field(default_factory=set)
    seconds: float = 0.0


def store_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


Checkpoint = Callable[[int, Store], Awaitable[Store]]


async def long_chat(
    store: Store, turns: int, window: int, checkpoint: Checkpoint | None = None,
) -> Figures:
    """Run the chat in ``store``; after each turn ``checkpoint(turn, store)`` (when given) may
    measure it and hands back the store to go on with."""
    model = ChatModel(context_window=window, calls="lookup", prompt_cache=True)
    bot = agent(name="chat", model=model, tools=[LOOKUP], context=policy(window))
    figures = Figures(turns=turns)
    thread: str | None = None
    started = time.perf_counter()
    for turn in range(1, turns + 1):
        result = await bot.run(f"turn {turn}: " + prose(turn, 250), store=store, principal=USER,
                               thread=thread)
        thread = result.thread.id
        if isinstance(result, Completed):
            figures.completed += 1
        elif getattr(getattr(result, "error", None), "code", None) == "context_exhausted":
            figures.exhausted += 1
        if checkpoint is not None:
            store = await checkpoint(turn, store)
    figures.seconds = time.perf_counter() - started
    assert thread is not None
    figures.thread_id = thread
    handle = await open_thread(store, thread, principal=USER)
    log = await handle.timeline()
    figures.compactions = sum(e.type == "compacted" for e in log)
    figures.failed = sum(e.type == "compaction_failed" for e in log)
    figures.edits = sum(e.type == "context_edited" for e in log)
    figures.compaction_requests = {e.event_id for e in log if e.type == "model_request"
                                   and e.data.get("purpose") == "compaction"}
    for entry in await handle.cache_breaks():
        figures.breaks[entry["likely_cause"]] += 1
        figures.break_requests.append(entry["request_event_id"])
    return figures


async def main(turns: int, window: int) -> None:
    marks = {max(1, turns * k // 8) for k in (1, 2, 4, 8)}
    points: list[tuple[int, int]] = []
    with tempfile.TemporaryDirectory(prefix="threads-long-chat-") as tmp:
        root = Path(tmp)

        async def measure(turn: int, store: Store) -> Store:
            if turn not in marks:
                return store
            await store.close()  # the WAL checkpointed: the bytes at rest
            points.append((turn, store_bytes(root)))
            return sqlite(root)

        f = await long_chat(sqlite(root), turns, window, measure)
        f.checkpoints = points
    print(f"{turns} turns, {window}-token window: {f.completed} completed,"
          f" {f.exhausted} context_exhausted, in {f.seconds:.0f} s")
    print(f"compactions {f.compactions}, failed compactions {f.failed}, context edits {f.edits}")
    print(f"{'turns':>6} {'bytes on disk':>14} {'bytes/turn since last':>22}")
    for i, (n, size) in enumerate(f.checkpoints):
        prev = f.checkpoints[i - 1] if i else None
        marginal = f"{(size - prev[1]) / (n - prev[0]):>22,.0f}" if prev else ""
        print(f"{n:>6} {size:>14,} {marginal}")
    if len(f.checkpoints) > 1:
        print(f"growth exponent of bytes on turns: {exponent(f.checkpoints):.2f}")
    print(f"cache breaks: {sum(f.breaks.values())} ({dict(f.breaks)})")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--window", type=int, default=8192)
    args = parser.parse_args()
    asyncio.run(main(args.turns, args.window))
