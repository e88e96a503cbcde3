"""In-process cancellation (Ctrl-C on ``run_sync``): the running loop is asked to record
``cancel_requested`` at its next step boundary; from then the durable barrier applies: calls not
yet started are not executed, an in-flight effect finishes or parks, the run ends ``Cancelled``."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from threads.run.loop import RunLoop

_running: dict[asyncio.Task[object], RunLoop] = {}


def register(loop: RunLoop) -> None:
    task = asyncio.current_task()
    if task is not None:
        _running[task] = loop


def unregister() -> None:
    task = asyncio.current_task()
    if task is not None:
        _running.pop(task, None)


async def request_cancel_from_inside(task: asyncio.Task[object]) -> None:
    loop = _running.get(task)
    if loop is not None:
        loop.cancel_wanted = True
        for event in loop.calls.in_flight:
            event.set()
