"""The store thread: grouped jobs queued together reach their batch in one call, in order, and a
job of another kind queued among them runs right after the group without splitting it; the stop
still comes after everything queued before it; a job runs in place, on its caller's thread, only
while nothing is queued or running."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest

from threads.store.sqlite.worker import Outcome, StoreThread


class Recorder:
    """A batch that records each call's items, and solo jobs that record themselves."""

    def __init__(self) -> None:
        self.calls: list[list[Any]] = []
        self.ran: list[str] = []

    def batch(self, items: list[Any]) -> list[Outcome]:
        self.calls.append(list(items))
        self.ran.extend(f"group:{item}" for item in items)
        return [(f"done {item}", None) for item in items]

    def solo(self, name: str) -> Any:
        def job() -> str:
            self.ran.append(f"solo:{name}")
            return name

        return job


async def test_a_solo_job_among_grouped_ones_runs_after_their_group() -> None:
    worker = StoreThread("test-worker")
    recorder = Recorder()
    gate = threading.Event()
    try:
        blocker = worker.run(gate.wait)  # holds the thread while the rest queues up
        first = worker.run_grouped("a", recorder.batch)
        read = worker.run(recorder.solo("read"))
        second = worker.run_grouped("b", recorder.batch)
        third = worker.run_grouped("c", recorder.batch)
        gate.set()
        results = await asyncio.gather(blocker, first, read, second, third)
    finally:
        worker.stop()
    assert results[1:] == ["done a", "read", "done b", "done c"]
    assert recorder.calls == [["a", "b", "c"]]  # one batch call: one transaction
    assert recorder.ran == ["group:a", "group:b", "group:c", "solo:read"]


async def test_the_stop_comes_after_every_job_queued_before_it() -> None:
    worker = StoreThread("test-worker")
    recorder = Recorder()
    gate = threading.Event()
    blocker = worker.run(gate.wait)
    jobs = [
        worker.run_grouped("a", recorder.batch),
        worker.run(recorder.solo("read")),
        worker.run_grouped("b", recorder.batch),
    ]
    stopping = threading.Thread(target=worker.stop)
    gate.set()
    stopping.start()
    assert await asyncio.gather(blocker, *jobs) == [True, "done a", "read", "done b"]
    stopping.join(timeout=10)
    assert not stopping.is_alive()
    assert sorted(recorder.ran) == ["group:a", "group:b", "solo:read"]


async def test_a_group_is_capped_and_the_rest_keeps_its_order() -> None:
    worker = StoreThread("test-worker")
    recorder = Recorder()
    gate = threading.Event()
    try:
        blocker = worker.run(gate.wait)
        grouped = [worker.run_grouped(i, recorder.batch) for i in range(70)]
        late = worker.run(recorder.solo("late"))
        gate.set()
        await asyncio.gather(blocker, *grouped, late)
    finally:
        worker.stop()
    assert [len(call) for call in recorder.calls] == [64, 6]
    assert [item for call in recorder.calls for item in call] == list(range(70))
    assert recorder.ran[-1] == "solo:late"


async def test_a_job_runs_in_place_only_while_nothing_is_queued_or_running() -> None:
    worker = StoreThread("test-worker")
    recorder = Recorder()
    gate = threading.Event()
    try:
        here = threading.get_ident()
        assert worker.here(threading.get_ident) == here  # idle: on this thread
        blocker = worker.run(gate.wait)
        queued = worker.run(recorder.solo("queued"))
        assert worker.here(recorder.solo("in place")) is None  # one runs, one waits: not now
        gate.set()
        assert await asyncio.gather(blocker, queued) == [True, "queued"]
        # The thread lets go of its lock before it wakes the caller: the next job can run here.
        assert worker.here(recorder.solo("after")) == "after"
    finally:
        worker.stop()
    assert recorder.ran == ["solo:queued", "solo:after"]


async def test_what_a_job_in_place_raises_reaches_its_caller_and_frees_the_thread() -> None:
    worker = StoreThread("test-worker")

    def fails() -> None:
        raise ValueError("no")

    try:
        with pytest.raises(ValueError, match="no"):
            worker.here(fails)
        assert await worker.run(lambda: "still serving") == "still serving"
    finally:
        worker.stop()
