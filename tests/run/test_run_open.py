"""A continuing run opened from the fold row and the lines from its request checkpoint on
(``threads.run.run_open``) writes exactly what it writes after reading the whole chain: for
random threads (turns of replies, read-only and effectful calls, two calls in one reply,
rate-limited retries, a fallback after an overloaded model, a parked approval, a turn a crash
left open) and a random continuing turn, the lines appended and the outcome are the same with
the row and without it (ids made deterministic, on copies of one store). And when the row does
not hold (damaged, another fold code's, a head not in the chain, a tail that does not chain),
the run reads every line and behaves as before."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import threads.log.ids as ids
import threads.run.runner as runner
import threads.store.fold_open as fold_open
from threads import FakeClock, agent, sqlite, tool
from threads.run.agent import Agent
from threads.run.permissions import Permissions
from threads.run.results import RunResult
from threads.store.sqlite.store import SQLiteStore
from threads.testing.scripted import (
    ScriptedModel,
    ScriptItem,
    call,
    overloaded,
    rate_limited,
    say,
    use,
)

pytestmark = pytest.mark.timeout(300)

NOW = 1_760_000_000_000


@tool(effect="read_only")
def look(x: str) -> str:
    """Reads ``x``."""
    return f"saw {x}"


@tool
def put(x: str) -> str:
    """Writes ``x``."""
    return f"put {x}"


@tool
def wire(x: str) -> str:
    """Moves money (asks a person first)."""
    return f"wired {x}"


STEPS = ("say", "look", "put", "two", "rate", "overloaded", "wire")


def script_of(turns: list[list[str]]) -> list[ScriptItem]:
    """A thread's replies, turn after turn (a scripted model answers by the replies its
    request already holds): each step, then a closing reply."""
    out: list[ScriptItem] = []
    for n, steps in enumerate(turns):
        for i, step in enumerate(steps):
            tag = f"{n}.{i}"
            if step == "look":
                out.append(use(call("look", f"look-{tag}", x=tag)))
            elif step == "put":
                out.append(use(call("put", f"put-{tag}", x=tag), text="putting"))
            elif step == "two":
                out.append(use(call("look", f"look-{tag}", x=tag),
                               call("put", f"put-{tag}", x=tag)))
            elif step == "rate":
                out.append(rate_limited(0))
            elif step == "overloaded":
                out.extend([overloaded(), overloaded(), overloaded()])
            elif step == "wire":
                out.append(use(call("wire", f"wire-{tag}", x=tag)))
        out.append(say(f"done {n}"))
    return out


def bot(turns: list[list[str]]) -> Agent:
    model = ScriptedModel(script_of(turns))
    fallback = ScriptedModel([say("from the spare")] * 64, name="spare-1")
    return agent(
        name="b", model=model, tools=[look, put, wire], fallback=[fallback],
        permissions=Permissions(ask=["wire"]),
    )


@contextlib.contextmanager
def same_ids(seed: bytes) -> Iterator[None]:
    """uuid7 made deterministic: the same run on two copies mints the same ids."""
    counter = [0]

    def take(count: int) -> bytes:
        counter[0] += 1
        block = hashlib.sha256(seed + counter[0].to_bytes(8, "big")).digest()
        return (block * (count // len(block) + 1))[:count]

    saved = ids.random_bytes, ids._last_ms, ids._counter
    ids.random_bytes = take
    ids._last_ms, ids._counter = -1, 0
    try:
        yield
    finally:
        ids.random_bytes, ids._last_ms, ids._counter = saved


async def run(root: Path, spec: Agent, text: str | None, thread: str | None) -> RunResult | str:
    """The run's outcome, or the exception it raised (as text: both ways must raise alike)."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        return await spec.run(text, thread=thread, store=store)
    except Exception as exc:  # a script that runs out, say
        return f"{type(exc).__name__}: {exc}"
    finally:
        await store.close()


async def lines_of(root: Path, thread_id: str) -> tuple[list[bytes], list[Any]]:
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        branch = await store.root_branch(thread_id)
        rows = await store.stored_rows(branch.branch_id)
        return [r.line for r in rows], [await store.read_fold_row(branch.branch_id)]
    finally:
        await store.close()


class Reads:
    """Counts the whole-chain reads of every store opened meanwhile."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.chains = 0
        read_chain = SQLiteStore.read_chain

        async def counted(store: SQLiteStore, branch_id: str) -> Any:
            self.chains += 1
            return await read_chain(store, branch_id)

        monkeypatch.setattr(SQLiteStore, "read_chain", counted)


async def build(root: Path, turns: list[list[str]], park: bool, open_turn: bool) -> str:
    """A thread of ``turns`` (a parked approval after them when ``park``; a turn the run
    left open after its model request, its script run out, when ``open_turn``)."""
    thread_id = None
    with same_ids(b"build"):
        for n in range(len(turns)):
            result = await run(root, bot(turns[: n + 1]), f"turn {n}", thread_id)
            assert not isinstance(result, str), result
            thread_id = result.thread.id
        assert thread_id is not None
        if park:
            # parks on the approval (unless a fallback model answers instead)
            await run(root, bot([*turns, ["wire"]]), "wire it", thread_id)
        if open_turn:
            await run(root, bot(turns[:-1]), "unanswered", thread_id)  # the script runs out
    return thread_id


async def continued_both_ways(
    tmp_path: Path, thread_id: str, turns: list[list[str]], reads: Reads
) -> tuple[bool, RunResult | str, RunResult | str]:
    """The same continuing run on two copies of the store, with the row and without it;
    asserts the lines appended (and the rows written) are the same. Whether the row served."""
    outcomes = []
    served = False
    for way in ("row", "chain"):
        copy = tmp_path / way
        shutil.copytree(tmp_path / "base", copy)
        spec = bot(turns)
        with contextlib.ExitStack() as stack:
            stack.enter_context(same_ids(b"continue"))
            if way == "chain":
                patch = pytest.MonkeyPatch()
                stack.callback(patch.undo)
                patch.setattr(runner, "window_serves", lambda *a, **k: False)
            before = reads.chains
            outcomes.append(await run(copy, spec, "and now", thread_id))
            if way == "row":
                served = reads.chains == before
    row_lines, row_rows = await lines_of(tmp_path / "row", thread_id)
    chain_lines, chain_rows = await lines_of(tmp_path / "chain", thread_id)
    assert row_lines == chain_lines
    assert [r and (r.seq, r.head_hash) for r in row_rows] == [
        r and (r.seq, r.head_hash) for r in chain_rows
    ]
    row, chain = outcomes
    assert type(row) is type(chain)
    if isinstance(row, str):
        assert row == chain
    else:
        assert not isinstance(chain, str)
        assert (row.status, getattr(row, "output", None)) == (
            chain.status, getattr(chain, "output", None)
        )
    return served, row, chain


turns_strategy = st.lists(st.lists(st.sampled_from(STEPS), max_size=3), min_size=1, max_size=4)


@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=turns_strategy, last=st.lists(st.sampled_from(STEPS), max_size=4),
    every=st.integers(min_value=1, max_value=7), park=st.booleans(), open_turn=st.booleans(),
)
async def test_a_run_from_the_row_writes_what_a_run_from_the_chain_writes(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    turns: list[list[str]], last: list[str], every: int, park: bool, open_turn: bool,
) -> None:
    tmp_path = tmp_path_factory.mktemp("runs")
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", every)
    reads = Reads(monkeypatch)
    thread_id = await build(tmp_path / "base", turns, park, open_turn)
    await continued_both_ways(tmp_path, thread_id, [*turns, last], reads)


async def test_a_quiet_thread_continues_from_the_row_without_reading_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, ["look", "rate"]],
                                               reads)
    assert served
    assert not isinstance(row, str)
    assert row.status == "completed"


async def test_a_fallback_after_the_row_reads_the_chain_and_writes_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    turns = [["look"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    # the settings_changed a fallback appends ends the checkpoint's use: the fold is read whole
    served, row, _ = await continued_both_ways(
        tmp_path, thread_id, [*turns, ["overloaded", "look"]], reads
    )
    assert not served
    assert not isinstance(row, str)
    assert row.status == "completed"


def _damage(root: Path, damage: str) -> None:
    with sqlite3.connect(root / "threads.db") as db:
        seq, body = db.execute(
            "SELECT seq, body FROM fold_snapshots WHERE kind = 'fold'"
        ).fetchone()
        if damage == "body":  # a byte of the checkpoint's compressed request
            db.execute("UPDATE fold_snapshots SET body = ? WHERE kind = 'fold'",
                       (bytes(body[:-3]) + b"\0\0\0",))
        elif damage == "fold_code":
            db.execute("UPDATE fold_snapshots SET fold_code = 'other' WHERE kind = 'fold'")
        elif damage == "head":
            db.execute("UPDATE fold_snapshots SET head_hash = ? WHERE kind = 'fold'", ("0" * 64,))
        elif damage == "tail":  # the line after the row no longer chains from it
            (line,) = db.execute("SELECT line FROM events WHERE seq = ?", (seq + 1,)).fetchone()
            damaged = bytes(line).replace(b'"prev_hash":"', b'"prev_hash":"0', 1)
            db.execute("UPDATE events SET line = ? WHERE seq = ?", (damaged, seq + 1))


@pytest.mark.parametrize("damage", ["none", "body", "fold_code", "head", "tail"])
async def test_a_row_that_does_not_hold_makes_the_run_read_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    base = tmp_path / "base"
    turns = [["look", "put"], ["two"]]
    thread_id = await build(base, turns, False, False)
    _damage(base, damage)
    served, row, _chain = await continued_both_ways(tmp_path, thread_id, [*turns, ["look"]],
                                                   reads)
    assert served == (damage == "none")
    assert not isinstance(row, str)
    # a broken chain stops the run whichever way it opens
    assert row.status == ("failed" if damage == "tail" else "completed")

