"""``threads worker MODULE[:ATTR] --store DIR|URL [--concurrency N] [--poll-ms MS] [--once]``.

Loads the user's agents (``ATTR`` names an ``Agent``, a list of agents, or a callable returning
either; without ``ATTR``, every ``Agent`` at the module's top level) and hands them to
``threads.run.worker.Worker``, which continues every thread of the store with work left.
Invariant: SIGTERM or SIGINT stops picking up work; running runs get ``--grace-ms`` to finish,
then are cancelled, which releases their leases. A second signal cancels at once. The exit code
is 1 when a thread failed (a run ended ``Failed`` for another reason than a lease taken by
someone else, or raised), else 0: completed, parked, cancelled and out-of-budget runs are
outcomes, not failures.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Callable, Iterator
from typing import Any

from threads.cli.support import add_store_option, opened_store, usage_error
from threads.errors import ConfigError
from threads.run.agent import Agent
from threads.run.worker import RETRY_CODES, Worker

# Result statuses that are outcomes, and refusals that only mean another process got there first.
OK_OUTCOMES = frozenset({"completed", "parked", "cancelled", "budget_exhausted"}) | RETRY_CODES


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "worker",
        help="continue every thread with work left",
        description="Continue every thread of a store that has an open turn or a settled park,"
        " claiming each through its lease (several workers may share one store).",
    )
    parser.add_argument("target", metavar="MODULE[:ATTR]", help="where your agents are")
    add_store_option(parser)
    parser.add_argument("--concurrency", type=int, default=4, help="runs at once (default 4)")
    parser.add_argument("--poll-ms", type=int, default=1000, help="poll interval (default 1000)")
    parser.add_argument(
        "--grace-ms", type=int, default=10_000,
        help="on SIGTERM/SIGINT, how long running runs may finish before they are cancelled"
        " (default 10000)",
    )
    parser.add_argument("--once", action="store_true", help="one pass, then exit")
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    if args.concurrency < 1 or args.poll_ms < 1 or args.grace_ms < 0:
        return usage_error(args.parser, "--concurrency/--poll-ms must be >= 1, --grace-ms >= 0")
    agents = load_agents(args.target)
    async with opened_store(args.store) as store:
        worker = Worker(
            store, agents, concurrency=args.concurrency, poll_ms=args.poll_ms,
            grace_ms=args.grace_ms, log=_say,
        )
        if args.once:
            stats = await worker.run_once()
        else:
            with _signals(worker) as stop:
                stats = await worker.serve(stop)
    _say(f"worker done: {stats.line()}")
    failed = failures(stats.outcomes)
    if failed:
        print(f"error: thread_failed: {failed} run(s) failed (see the lines above). The"
              " timeline of each failed thread (its id begins its line) says why.",
              file=sys.stderr)
        return 1
    return 0


def failures(outcomes: dict[str, int]) -> int:
    """Runs that ended in a failure of the thread itself (see the module docstring)."""
    return sum(n for outcome, n in outcomes.items() if outcome not in OK_OUTCOMES)


def _say(line: str) -> None:
    print(line, flush=True)


@contextlib.contextmanager
def _signals(worker: Worker) -> Iterator[asyncio.Event]:
    """First SIGTERM/SIGINT: stop; a second one: cancel running runs now."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if stop.is_set():
            worker.cancel_running()
        stop.set()

    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, on_signal)
    try:
        yield stop
    finally:
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(sig)


def load_agents(target: str) -> list[Agent]:
    """Import ``MODULE[:ATTR]`` (the working directory is importable) and collect its agents."""
    module_name, _, attr = target.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError("invalid_config", f"cannot import {module_name!r}: {exc}") from None
    if not attr:
        found = [v for v in vars(module).values() if isinstance(v, Agent)]
        return _agents(found, target)
    if not hasattr(module, attr):
        raise ConfigError("invalid_config", f"{module_name!r} has no attribute {attr!r}")
    return _agents(getattr(module, attr), target)


def _agents(value: Any, target: str) -> list[Agent]:
    if isinstance(value, Agent):
        return [value]
    if callable(value) and not isinstance(value, (list, tuple)):
        call: Callable[[], Any] = value
        return _agents(call(), target)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, Agent) for v in value):
        return list(value)
    raise ConfigError(
        "invalid_config",
        f"{target} gives no agents: name an Agent, a list of agents, or a function returning them",
    )
