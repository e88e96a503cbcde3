"""A run handed the fold its caller just made (the host's, once it wrote the turn's input:
``RunOptions.fold``) takes it instead of reading and folding the branch again, but only while
the branch's head under the run's lease is still the one that fold ended at: a fold that
another writer's append made stale is never used, nor one opened from a snapshot (a worker's,
which told it there is work: the run reads and checks every line itself)."""

from __future__ import annotations

import pytest

import threads.store.fold_open as fold_open
from threads import agent, open_thread
from threads.log.fold import Fold
from threads.log.fold.saved import dump, restore
from threads.principal import Principal
from threads.run.agent import Agent
from threads.run.runner import RunOptions, start_run
from threads.run.thread import Thread
from threads.run.worker import Worker
from threads.run.writer import BranchWriter
from threads.store.protocol import Store
from threads.testing.scripted import say, scripted_model

pytestmark = pytest.mark.timeout(60)

ALICE = Principal(issuer="test", tenant="local", subject="alice")


def bot() -> Agent:
    return agent(name="demo", model=scripted_model([say("one"), say("two")]))


async def next_input(store: Store, branch_id: str, text: str) -> Fold:
    """The next turn's input written as the host writes it (under a lease of its own, then
    released); the writer's fold after it."""
    lease = await store.acquire_lease(branch_id, "host-start", 60_000)
    fold = (await store.read_chain(branch_id)).fold(store.clock.now_ms())
    writer = BranchWriter(store, lease, fold, ttl_ms=60_000)
    actor = {"kind": "user", "principal": ALICE.to_wire()}
    await writer.append([("user_input", {"source": "api", "text": text}, actor)])
    await writer.close()
    await store.release_lease(lease)
    return writer.fold


async def first_turn(store: Store) -> tuple[Agent, str, str]:
    """The agent, and the thread (and its root branch) after one completed turn."""
    spec = bot()
    first = await spec.run("hello", store=store, principal=ALICE)
    assert first.status == "completed"
    return spec, first.thread.id, (await store.root_branch(first.thread.id)).branch_id


async def continued(store: Store, spec: Agent, thread_id: str, fold: Fold) -> Thread:
    """The open turn run with ``fold`` handed over; the thread, its second turn completed."""
    result = await start_run(spec, None, RunOptions(thread_id, store, principal=ALICE, fold=fold))
    assert result.status == "completed"
    return result.thread


async def second_turn_done(thread: Thread) -> None:
    state = await thread.state()
    assert (state.turns_completed, state.status) == (2, "idle")


async def test_a_run_handed_a_current_fold_does_not_read_the_branch_again(
    store: Store, chain_reads: list[str]
) -> None:
    spec, thread_id, branch_id = await first_turn(store)
    fold = await next_input(store, branch_id, "and again")
    chain_reads.clear()
    thread = await continued(store, spec, thread_id, fold)
    assert chain_reads == []  # the old code read (and folded) the whole chain again
    await second_turn_done(thread)


async def test_a_fold_that_another_append_made_stale_is_not_used(
    store: Store, chain_reads: list[str]
) -> None:
    spec, thread_id, branch_id = await first_turn(store)
    stale = (await store.read_chain(branch_id)).fold(store.clock.now_ms())
    await next_input(store, branch_id, "written after the fold")  # the head moves on
    chain_reads.clear()
    thread = await continued(store, spec, thread_id, stale)
    assert chain_reads == [branch_id]
    await second_turn_done(thread)  # the stale fold had no open turn to run


async def test_a_fold_opened_from_a_snapshot_is_not_the_runs(
    store: Store, chain_reads: list[str]
) -> None:
    spec, thread_id, branch_id = await first_turn(store)
    fold = await next_input(store, branch_id, "and again")
    restored = restore(dump(fold), store.clock.now_ms())  # at the head, but no events
    chain_reads.clear()
    thread = await continued(store, spec, thread_id, restored)
    assert chain_reads == [branch_id]  # the run reads and checks every line itself
    await second_turn_done(thread)


async def test_a_worker_tells_work_from_the_snapshot_and_the_run_reads_the_log(
    store: Store, chain_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 1)  # a row with every append
    spec, thread_id, branch_id = await first_turn(store)
    await next_input(store, branch_id, "and again")  # an open turn no run drives
    assert await store.read_tail(branch_id) is not None
    chain_reads.clear()
    worker = Worker(store, [spec], poll_ms=10)
    await worker.run_once()
    assert worker.stats.runs == 1
    assert chain_reads == [branch_id]  # the run's read; the worker's look was the snapshot
    await second_turn_done(await open_thread(store, thread_id))
    chain_reads.clear()
    await worker.run_once()  # at rest now: the snapshot says so, no run, no read
    assert (worker.stats.runs, chain_reads) == (1, [])
