"""``run_sync``: a run that blocks its caller, with Ctrl-C as a durable cancel.

The first Ctrl-C asks the run to cancel: ``cancel_requested`` is recorded at the next step
boundary, calls not yet started never run, and the run ends ``Cancelled``; stderr says so and
what the run still waits for. A second Ctrl-C stops the process at once (SIGINT's default
action, as if it were killed): whatever was in flight is settled by the next run of the thread,
as after any crash. Under a running event loop (Jupyter, an async application) ``run_sync``
can't block, and says to ``await bot.run(...)`` instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys

from threads.errors import ConfigError
from threads.run.config import AgentSpec
from threads.run.results import RunResult
from threads.run.runner import RunOptions, start_run
from threads.run.runtime import CancelSignal

CANCELLING = (
    "threads: cancelling the run; no new step starts. {waiting}. Press Ctrl-C again to stop at"
    " once (the next run of the thread settles whatever is then left in doubt)."
)
STOPPING = "threads: stopping at once; run the thread again to settle what was in flight."


def run_blocking(agent: AgentSpec, input: str | None, options: RunOptions) -> RunResult:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_run_with_interrupts(agent, input, options))
    raise ConfigError(
        "invalid_config",
        "run_sync blocks until the run ends, and this thread already runs an event loop"
        " (Jupyter, an async application): use `await bot.run(...)` there instead",
    )


async def _run_with_interrupts(
    agent: AgentSpec, input: str | None, options: RunOptions
) -> RunResult:
    cancel = CancelSignal()
    loop = asyncio.get_running_loop()
    interrupts = 0

    def on_sigint() -> None:
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            _say(CANCELLING.format(waiting=cancel.waiting_on()))
            cancel.request()
        else:
            _say(STOPPING)
            _stop_now()

    # Only the main thread can take signals; elsewhere Ctrl-C keeps Python's default.
    with contextlib.suppress(NotImplementedError, RuntimeError):
        loop.add_signal_handler(signal.SIGINT, on_sigint)
    try:
        return await start_run(agent, input, options, cancel=cancel)
    finally:
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.remove_signal_handler(signal.SIGINT)


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _stop_now() -> None:
    """End the process as an unhandled Ctrl-C would: nothing more is sent or written."""
    sys.stdout.flush()
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    os.kill(os.getpid(), signal.SIGINT)
