"""What the tests of a continuing run opened from the fold row share (``tests/run/test_run_open``
and ``tests/drills/test_run_open_drill``): an agent whose scripted thread holds replies,
read-only and effectful calls, retries, a fallback and an approval; ids made deterministic, so
that the same run on two copies of a store writes the same bytes; and that comparison, with the
row and without it."""

from __future__ import annotations

import contextlib
import hashlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

import threads.log.ids as ids
import threads.run.runner as runner
from threads import FakeClock, agent, sqlite, tool
from threads.principal import LOCAL_OPERATOR
from threads.run.agent import Agent
from threads.run.budget import Budget
from threads.run.context_policy import ContextPolicy
from threads.run.drafts import user_input
from threads.run.hooks import Extension, HookDecision, ToolResultView
from threads.run.permissions import Permissions
from threads.run.results import RunResult
from threads.run.retry_policy import RetryPolicy
from threads.run.thread import ControlError, open_thread
from threads.run.writer import BranchWriter
from threads.store.capabilities import controls_of
from threads.store.control_items import Command
from threads.store.snapshot_row import StoredSnapshot
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


@tool(effect="read_only")
def dump(x: str) -> str:
    """Reads a long page about ``x`` (its result is kept as an artifact)."""
    return f"{x}: " + "page " * 4000


STEPS = ("say", "look", "put", "two", "rate", "overloaded", "wire")
# and a ``final_output`` the schema rejects (an unknown tool for an agent with no ``output``),
# and a long result (an artifact; its line alone may be past ``SNAPSHOT_BYTES``)
WIDE_STEPS = (*STEPS, "reject", "long")
# the agents a thread may be built and continued with: the plain one, ones a run from the row
# serves too (a thread-scoped fallback, a structured output), and ones it must not (``GATED``)
KINDS = ("plain", "thread_fallback", "output", "budget", "context", "extension")
GATED = frozenset({"budget", "context", "extension"})


class Answer(BaseModel):
    answer: str


async def _proceed(view: ToolResultView) -> HookDecision:
    return HookDecision()


def script_of(turns: list[list[str]], kind: str = "plain") -> list[ScriptItem]:
    """A thread's replies, turn after turn (a scripted model answers by the replies its
    request already holds): each step, then a closing reply (a valid ``final_output`` for an
    agent of ``kind`` ``output``)."""
    out: list[ScriptItem] = []
    for n, steps in enumerate(turns):
        for i, step in enumerate(steps):
            tag = f"{n}.{i}"
            if step == "long":
                out.append(use(call("dump", f"dump-{tag}", x=tag)))
            elif step == "reject":
                out.append(use(call("final_output", f"bad-{tag}", answer=3)))
            elif step == "look":
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
        if kind == "output":
            out.append(use(call("final_output", f"out-{n}", answer=f"done {n}")))
        else:
            out.append(say(f"done {n}"))
    return out


def bot(turns: list[list[str]], kind: str = "plain") -> Agent[None, Any]:
    model = ScriptedModel(script_of(turns, kind))
    spares = [use(call("final_output", f"spare-{n}", answer="from the spare"))
              if kind == "output" else say("from the spare") for n in range(64)]
    fallback = ScriptedModel(spares, name="spare-1")
    return agent(
        name="b", model=model, tools=[look, put, wire, dump], fallback=[fallback],
        permissions=Permissions(ask=["wire"]),
        retry=RetryPolicy(fallback_scope="thread") if kind == "thread_fallback" else None,
        output=Answer if kind == "output" else None,
        budget=Budget(max_turns=100) if kind == "budget" else None,
        context=ContextPolicy() if kind == "context" else None,
        extensions=[Extension("watch", before_tool_result=_proceed)] if kind == "extension"
        else (),
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


async def lines_of(
    root: Path, thread_id: str
) -> tuple[list[bytes], StoredSnapshot | None, StoredSnapshot | None]:
    """The thread's stored lines, its fold row and its listing row."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        branch = await store.root_branch(thread_id)
        rows = await store.stored_rows(branch.branch_id)
        _, listing = await store.read_summary(branch.branch_id)
        return [r.line for r in rows], await store.read_fold_row(branch.branch_id), listing
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


async def host_input(root: Path, thread_id: str, text: str) -> None:
    """The next turn's input written as the host writes it before the turn's run (under a
    lease of its own, then released); none while a turn is open or parked (the host refuses
    it, and the run goes on with the open turn)."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        branch = await store.root_branch(thread_id)
        lease = await store.acquire_lease(branch.branch_id, "host", 60_000)
        fold = (await store.read_chain(branch.branch_id)).fold(NOW)
        writer = BranchWriter(store, lease, fold, ttl_ms=60_000)
        if fold.turn is None and not fold.parks:
            await writer.append([user_input(text, LOCAL_OPERATOR, None)])
        await writer.close()
        await store.release_lease(lease)
    finally:
        await store.close()


async def queue(root: Path, thread_id: str, command: Command) -> None:
    """``command`` queued for the thread's holder, as another process queues it while a run
    holds the lease (here: found waiting by the next run)."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        controls = controls_of(store)
        assert controls is not None
        await controls.queue_control(tenant_id=LOCAL_OPERATOR.tenant, thread_id=thread_id,
                                     principal=LOCAL_OPERATOR.to_wire(), command=command)
    finally:
        await store.close()


async def between(root: Path, thread_id: str, change: str) -> None:
    """A person's change between two turns, through the thread's handle: ``mode`` (a
    ``mode_changed``), ``settings`` (a ``settings_changed`` of the model's params), ``spare``
    (the next requests go to the fallback model). One the thread refuses (a turn open, say)
    is left out."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        handle = await open_thread(store, thread_id)
        with contextlib.suppress(ControlError):
            if change == "mode":
                await handle.change_mode(LOCAL_OPERATOR, "accept_edits")
            elif change == "settings":
                await handle.change_settings(LOCAL_OPERATOR, provider="scripted",
                                             model="scripted-1", model_params={"t": 1})
            elif change == "spare":
                await handle.change_settings(LOCAL_OPERATOR, provider="scripted",
                                             model="spare-1")
    finally:
        await store.close()


async def continued_both_ways(
    tmp_path: Path, thread_id: str, turns: list[list[str]], reads: Reads, *, host: bool = False,
    kind: str = "plain", queued: Command | None = None, change: str | None = None,
) -> tuple[bool, RunResult | str, RunResult | str]:
    """The same continuing run on two copies of the store, with the row and without it;
    asserts the lines appended (and the rows written) are the same. Whether the row served.
    ``host``: its input written first, as the host does, and the run given none. ``kind``:
    the agent's (``bot``). ``queued``: a control waiting in the inbox when the run opens.
    ``change``: one made before the run (``between``)."""
    outcomes = []
    served = False
    for way in ("row", "chain"):
        copy = tmp_path / way
        shutil.copytree(tmp_path / "base", copy)
        spec = bot(turns, kind)
        with contextlib.ExitStack() as stack:
            stack.enter_context(same_ids(b"continue"))
            if way == "chain":
                patch = pytest.MonkeyPatch()
                stack.callback(patch.undo)
                patch.setattr(runner, "window_serves", lambda *a, **k: False)
            if change is not None:
                await between(copy, thread_id, change)
            if host:
                await host_input(copy, thread_id, "and now")
            if queued is not None:
                await queue(copy, thread_id, queued)
            before = reads.chains
            outcomes.append(await run(copy, spec, None if host else "and now", thread_id))
            if way == "row":
                served = reads.chains == before
    # the lines, and the fold and listing rows too, body and all
    assert await lines_of(tmp_path / "row", thread_id) == await lines_of(
        tmp_path / "chain", thread_id
    )
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


