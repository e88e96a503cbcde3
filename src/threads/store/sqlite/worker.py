"""A dedicated thread that runs a store's blocking calls one at a time, off the event loop.

Why not ``run_in_executor``: a durable append is a few tens of µs of SQLite work plus an
fsync, and the executor's hand-off (work item, concurrent future, chained asyncio future) cost
about 45 µs per call in ``bench/append.py``; a ``SimpleQueue`` and one ``call_soon_threadsafe``
cost about 19 µs. Invariant: jobs run one at a time, under one lock (so one SQLite connection
is only ever used by one thread at a time), in the order submitted except as grouping says
below; each caller gets its job's result or exception.

A job may also run in place (``here``), on its caller's thread, when nothing is queued or
running: no hand-off at all (a queue put, a wake-up of this thread, ``call_soon_threadsafe`` and
the event loop's wake-up cost ~150 µs per append on a busy machine), at the price of the
caller's thread waiting for the job. The store decides when that is worth it.

Grouped jobs (``run_grouped``): the jobs submitted with the same ``Batch`` that are queued when
the thread gets to one of them are handed to that batch together, in order, so it can run them
in one transaction (``threads.store.sqlite.group_commit``). Nothing waits for a group to fill:
a group is whatever queued up while the previous job ran. A job of another kind queued among them (a
read, a solo write) runs right after the group instead of splitting it, so one look at a
thread's inbox does not cost every other thread its own fsync. Each caller awaits its job before
it submits the next, so no caller's own jobs are ever reordered; jobs of different callers
were never ordered by anything but the race to the queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections import deque
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

Outcome = tuple[Any, BaseException | None]  # a job's result, or the exception it raised
# Runs the queued items of one group together; one outcome per item, in order.
Batch = Callable[[list[Any]], list[Outcome]]

MAX_GROUP = 64  # most jobs handed to one batch call

# (loop, future, job): a solo job is a callable; a grouped one is (batch, item).
_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Any, Batch | None]
_Waiter = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]"]


class StoreThread:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._running = threading.Lock()  # held while a job runs, here or on the thread
        self._backlog: deque[_Job | None] = deque()  # taken off the queue, not run yet, in order
        # Daemon: a store the program never closed must not keep the interpreter alive; SQLite
        # transactions are atomic, so stopping mid-job loses nothing that was committed.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``fn``; await the returned future for its result."""
        return self._submit(fn, None)

    def run_grouped(self, item: Any, batch: Batch) -> asyncio.Future[Any]:
        """Queue ``item`` for ``batch``; await the returned future for its own outcome."""
        return self._submit(item, batch)

    def here(self, fn: Callable[[], T]) -> T | None:
        """``fn()`` run now on the calling thread, when no job is queued or running; None when
        it did not run (submit it instead). What ``fn`` raises propagates."""
        if self._backlog or not self._jobs.empty() or not self._running.acquire(blocking=False):
            return None
        try:
            return fn()
        finally:
            self._running.release()

    def _submit(self, payload: Any, batch: Batch | None) -> asyncio.Future[Any]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()
        self._jobs.put((loop, future, payload, batch))
        return future

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        backlog = self._backlog
        while True:
            job = backlog.popleft() if backlog else self._jobs.get()
            if job is None:
                return
            with self._running:
                waiters, outcomes = self._run_job(job, backlog)
            _deliver(waiters, outcomes)  # once the lock is free: a woken caller may run ``here``

    def _run_job(
        self, job: _Job, backlog: deque[_Job | None]
    ) -> tuple[list[_Waiter], list[Outcome]]:
        """``job`` run (with the jobs of its batch queued behind it); who waits, and what for."""
        loop, future, payload, batch = job
        if batch is None:
            return [(loop, future)], [_call(payload)]
        group = self._gather(job, batch, backlog)
        try:
            outcomes = batch([member[2] for member in group])
        except BaseException as exc:  # the batch itself failed: every member hears why
            outcomes = [(None, exc)] * len(group)
        return [(member[0], member[1]) for member in group], outcomes

    def _gather(self, first: _Job, batch: Batch, backlog: deque[_Job | None]) -> list[_Job]:
        """``first`` and the jobs of the same batch waiting behind it (in ``backlog``, then on
        the queue), at most ``MAX_GROUP``. Every other job taken off the queue meanwhile is
        left in ``backlog``, in order; nothing is taken past the stop."""
        group = [first]
        others: list[_Job | None] = []
        while backlog and len(group) < MAX_GROUP:
            waiting = backlog.popleft()
            if waiting is None:
                backlog.appendleft(waiting)
                break
            (group if waiting[3] == batch else others).append(waiting)
        others.extend(backlog)
        backlog.clear()
        stopped = None in others
        while not stopped and len(group) < MAX_GROUP:
            try:
                queued = self._jobs.get_nowait()
            except queue.Empty:
                break
            if queued is not None and queued[3] == batch:
                group.append(queued)
            else:
                others.append(queued)
                stopped = queued is None
        backlog.extend(others)
        return group


def _call(fn: Callable[[], Any]) -> Outcome:
    try:
        return fn(), None
    except BaseException as exc:  # handed to the awaiting caller, never swallowed
        return None, exc


def _deliver(waiters: list[_Waiter], outcomes: list[Outcome]) -> None:
    """Settle each waiter's future on its loop: one wake-up per loop, not one per job."""
    by_loop: dict[asyncio.AbstractEventLoop, list[tuple[asyncio.Future[Any], Outcome]]] = {}
    for (loop, future), outcome in zip(waiters, outcomes, strict=True):
        by_loop.setdefault(loop, []).append((future, outcome))
    for loop, settled in by_loop.items():
        # A closed loop (RuntimeError) means nobody is waiting for these results any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle_all, settled)


def _settle_all(settled: list[tuple[asyncio.Future[Any], Outcome]]) -> None:
    for future, (result, error) in settled:
        if future.cancelled():
            continue
        if error is not None:
            future.set_exception(error)
        else:
            future.set_result(result)
