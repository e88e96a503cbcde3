"""``Runtime``: the one value every step of a run is a function of.

It is frozen: a step reads the run's writer (and through it the folded log), its agent spec,
its handle, the principal, the injected clock, and returns what it decided as a value.
The few things in it that change while a run goes on are owned objects with one job each: the
writer (lease, fenced append), the ``CancelSignal`` (a Ctrl-C asked for a cancel), the
``RenderMemo`` (artifacts rendering reads, render cache) and the ``CallIdMemo`` (call ids
already used). Nothing in it points back at a loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Coroutine
from dataclasses import dataclass, field
from typing import Any

from threads.clock import sleep_on
from threads.log.event_types import Actor
from threads.log.fold import Call, Fold
from threads.log.lines import Event
from threads.log.render import RenderCache
from threads.log.vocabulary import ArtifactRef
from threads.memory.protocol import MemoryHandle
from threads.principal import Principal
from threads.run.budget import AncestorBudget, Budget, SpendMemo
from threads.run.child_run import StartChild
from threads.run.config import AgentSpec
from threads.run.drafts import HOST, RECOVERY
from threads.run.permissions import Permissions
from threads.run.results import RunResult
from threads.run.spend_tally import OwnSpend
from threads.run.streaming import RunStream
from threads.run.thread import Thread
from threads.run.writer import BranchWriter
from threads.sandbox.binding import RunSandbox
from threads.tools.http import ToolHttp
from threads.tools.tool import RunContext


class CancelSignal:
    """An in-process cancel (Ctrl-C on ``run_sync``): the run records ``cancel_requested`` at its
    next step boundary, and tools running now see ``ctx.cancelled`` set."""

    def __init__(self) -> None:
        self.wanted = False
        # the log's last seq when the run last looked for cancels other processes queued
        self.queued_checked_at: int | None = None
        self._in_flight: dict[asyncio.Event, str] = {}

    def request(self) -> None:
        self.wanted = True
        for event in self._in_flight:
            event.set()

    def tool_started(self, name: str) -> asyncio.Event:
        event = asyncio.Event()
        if self.wanted:
            event.set()
        self._in_flight[event] = name
        return event

    def tool_ended(self, event: asyncio.Event) -> None:
        self._in_flight.pop(event, None)

    def waiting_on(self) -> str:
        """What a cancel still waits for, in words for the person who asked for it."""
        tools = sorted(set(self._in_flight.values()))
        if tools:
            return f"Waiting for {', '.join(tools)} to finish (it sees ctx.cancelled set)"
        return "Waiting for the step in progress (a model reply, or a write to the log) to end"


class BackgroundRuns:
    """The background subagents this run is running: one task per child thread, in spawn
    order, until the run records how it ended (``threads.run.background``)."""

    def __init__(self) -> None:
        self.tasks: dict[str, asyncio.Task[RunResult]] = {}

    def start(self, child_thread_id: str, run: Coroutine[Any, Any, RunResult]) -> None:
        if child_thread_id not in self.tasks:
            self.tasks[child_thread_id] = asyncio.create_task(run)

    def ended(self) -> list[tuple[str, RunResult]]:
        """The children whose runs ended and are not reported yet, in spawn order (a run that
        raised raises here)."""
        return [(child, task.result()) for child, task in self.tasks.items() if task.done()]

    def running(self) -> bool:
        return any(not task.done() for task in self.tasks.values())

    def reported(self, child_thread_id: str) -> None:
        self.tasks.pop(child_thread_id, None)

    async def wait(self) -> None:
        """Until one more child's run ends (at once when one ended and is unreported)."""
        running = [task for task in self.tasks.values() if not task.done()]
        if running and len(running) == len(self.tasks):
            await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)

    async def stop(self, child_thread_id: str) -> None:
        """Cancel a child's run where it is (its lease is released as for any ended run) and
        forget it."""
        task = self.tasks.pop(child_thread_id, None)
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def abandon(self) -> None:
        """Stop every child still running, nothing recorded: the run itself is ending without
        an outcome (an error); the parent's next run takes them over."""
        for child_thread_id in list(self.tasks):
            await self.stop(child_thread_id)

    async def wait_all(self) -> None:
        if self.tasks:
            await asyncio.wait(self.tasks.values())


@dataclass(slots=True)
class Scanned:
    """How far a memo scanned the run's ``fold.events``: ``seen`` of the list ``of``. A fold
    read whole (``BranchWriter.read_whole``) is another list, scanned from its start."""

    of: list[Event] | None = None
    seen: int = 0

    def unscanned(self, events: list[Event]) -> list[Event]:
        """The events after the ``seen`` already scanned (all of another list)."""
        if events is not self.of:
            self.of, self.seen = events, 0
        return events[self.seen :]


@dataclass(slots=True)
class RenderMemo(Scanned):
    """What rendering remembers between requests of one run: the artifacts rendered parts
    read (and how many events were scanned for them), and the render cache."""

    artifacts: dict[str, bytes] = field(default_factory=dict)
    cache: RenderCache = field(default_factory=RenderCache)


@dataclass(slots=True)
class CallIdMemo(Scanned):
    """The call ids already on the thread (recorded calls and every reply's tool_use parts) and
    the provider's own id behind each minted one, kept up to date from the events appended
    since the last look (``seen`` of them were scanned): a new reply must not reuse an id, and
    an adapter sends the provider the ids it issued."""

    taken: set[str] = field(default_factory=set)
    provider: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Runtime:
    writer: BranchWriter
    spec: AgentSpec
    thread: Thread
    principal: Principal
    deps: Any
    permissions: Permissions  # the agent's, narrowed by the run's ceiling
    ceiling: Permissions | None
    run_budget: Budget | None
    sink: RunStream | None
    dropped_ref: ArtifactRef | None
    http: ToolHttp  # ctx.http, fenced by ``writer``
    start_child: StartChild  # runs a subagent's thread (``threads.run.spawn``)
    cancel: CancelSignal = field(default_factory=CancelSignal)
    memo: RenderMemo = field(default_factory=RenderMemo)
    call_ids: CallIdMemo = field(default_factory=CallIdMemo)
    background: BackgroundRuns = field(default_factory=BackgroundRuns)
    recovering: bool = False  # settling what a crash left: steps act as ``recovery``
    sandbox: RunSandbox | None = None  # the branch's sandbox, opened on first use
    memory: MemoryHandle | None = None  # the agent's memory, scoped to this run's user
    ancestors: tuple[AncestorBudget, ...] = ()  # budgets of the threads above (a subagent's)
    spend_memo: SpendMemo = field(default_factory=SpendMemo)  # subagents' spend, by log head
    own_spend: OwnSpend = field(default_factory=OwnSpend)  # the fold's, as running totals

    @property
    def fold(self) -> Fold:
        return self.writer.fold

    def now(self) -> int:
        return self.writer.store.clock.now_ms()

    async def wait_until(self, not_before: int) -> None:
        """Wait on the store's clock until ``not_before``, keeping the lease: in steps of a third
        of its TTL, renewed after each (a fake clock jumps; a real one renews anyway)."""
        while (remaining := not_before - self.now()) > 0:
            await sleep_on(self.writer.store.clock, min(remaining, max(self.writer.ttl_ms // 3, 1)))
            await self.writer.renew()

    def actor(self) -> Actor:
        return RECOVERY if self.recovering else HOST

    def tool_context(self, call: Call, attempt: int, cancelled: asyncio.Event) -> RunContext:
        return RunContext(
            deps=self.deps,
            thread_id=self.writer.thread_id,
            branch_id=self.writer.branch_id,
            principal=self.principal,
            call_id=call.call_id,
            effect_key=call.effect_key,
            attempt=attempt,
            cancelled=cancelled,
            epoch=self.writer.epoch,
            http_client=self.http.client,
            sandbox=None if self.sandbox is None else self.sandbox.handle(call.effect_key),
            memory=self.memory,
        )
