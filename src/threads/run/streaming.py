"""``RunStream``: the live view of a run for ``Agent.stream``.

Items are committed ``Event``s (in log order) and ``TextDelta``s as the model produces them.
Deltas are shown, never recorded; the recorded ``model_response`` event that follows replaces
them. ``await stream.result`` is the run's outcome.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING

from threads.log.lines import Event
from threads.models.protocol import TextDelta

if TYPE_CHECKING:
    from threads.run.results import RunResult

StreamItem = Event | TextDelta

_DONE = object()


class RunStream:
    def __init__(self) -> None:
        self._queue: asyncio.Queue[object] = asyncio.Queue()
        self._task: asyncio.Task[RunResult] | None = None

    def attach(self, task: asyncio.Task[RunResult]) -> None:
        self._task = task
        task.add_done_callback(lambda _t: self._queue.put_nowait(_DONE))

    def event(self, event: Event) -> None:
        self._queue.put_nowait(event)

    def delta(self, delta: TextDelta) -> None:
        self._queue.put_nowait(delta)

    @property
    def result(self) -> asyncio.Task[RunResult]:
        """Await it for the run's outcome."""
        assert self._task is not None
        return self._task

    def __aiter__(self) -> AsyncIterator[StreamItem]:
        return self._items()

    async def _items(self) -> AsyncIterator[StreamItem]:
        while True:
            item = await self._queue.get()
            if item is _DONE:
                return
            assert isinstance(item, Event | TextDelta)
            yield item
