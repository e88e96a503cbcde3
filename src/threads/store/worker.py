"""A dedicated thread that runs a store's blocking calls in submission order, off the event loop.

Why not ``run_in_executor``: a durable append is a few tens of µs of SQLite work plus an
fsync, and the executor's hand-off (work item, concurrent future, chained asyncio future) cost
about 45 µs per call in ``bench/append.py``; a ``SimpleQueue`` and one ``call_soon_threadsafe``
cost about 19 µs. Invariant: jobs run one at a time, in the order submitted, on one thread (so
one SQLite connection is only ever used by that thread); each caller gets its job's result or
exception.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class StoreThread:
    def __init__(self, name: str) -> None:
        self._jobs: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        # Daemon: a store the program never closed must not keep the interpreter alive; SQLite
        # transactions are atomic, so stopping mid-job loses nothing that was committed.
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)
        self._thread.start()

    def run(self, fn: Callable[[], T]) -> asyncio.Future[T]:
        """Queue ``fn``; await the returned future for its result."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._jobs.put((loop, future, fn))
        return future

    def stop(self) -> None:
        """Finish the queued jobs, then end the thread."""
        self._jobs.put(None)
        self._thread.join()

    def _serve(self) -> None:
        while (job := self._jobs.get()) is not None:
            loop, future, fn = job
            try:
                result, error = fn(), None
            except BaseException as exc:  # handed to the awaiting caller, never swallowed
                result, error = None, exc
            # A closed loop (RuntimeError) means nobody is waiting for this result any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(_settle, future, result, error)


def _settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
