"""``Worker``: continues every thread of a store that has work left, a bounded number at a time.

Work left means an open turn that is not parked (status ``in_turn``): a run that crashed or was
stopped mid-turn, or a turn whose parks were all resolved by an operator; a background subagent
whose end its parent has not recorded (the parent's run resumes it; a subagent's own thread is
never continued on its own, only by its parent's run: a subagent's thread with work, such as a
decision recorded on it, has its tree's root continued, whose run reruns it); or a thread parked
only on zombie-window parks whose window is over (``threads.run.holders``): its run looks
again. Each such thread is continued with ``agent.run(None, thread=...)`` by the agent named
in its ``thread_started``. Several workers (processes, machines) may share one store: the
claim is the run's lease, so a ``branch_busy`` only means another worker got there first, and
the thread is skipped.

Invariants: a worker drives a thread with at most one run at a time, and at most
``concurrency`` runs at once; a thread is only re-read when its head moved since it was last
seen without work, its lease became free, or its zombie windows ended; once stopping, no run
starts, and runs still going after the grace period are cancelled, which releases their
leases (the run's ``finally``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from threads.errors import ConfigError, ThreadsError
from threads.log.fold import Fold
from threads.log.fold.features import CHILD_RUNNING
from threads.log.fold.saved import RestoredFold
from threads.log.vocabulary import ThreadStartedDataParent
from threads.principal import Principal
from threads.run.agent import Agent
from threads.run.holders import window_park_ends
from threads.run.results import Failed, RunResult
from threads.run.runner import RunOptions, start_run
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Store

# Outcomes after which the thread may be tried again at the same head (someone else's lease).
RETRY_CODES = frozenset({"branch_busy", "stale_epoch", "seq_conflict"})
WORKER_ISSUER = "worker"


@dataclass
class WorkerStats:
    """What a worker did: runs started and how each ended (by result status or error code)."""

    runs: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)

    def count(self, outcome: str) -> None:
        self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def line(self) -> str:
        ends = " ".join(f"{k}={v}" for k, v in sorted(self.outcomes.items()))
        return f"runs={self.runs} {ends}".strip()


def agents_by_name(agents: Iterable[Agent]) -> dict[str, Agent]:
    """Index agents by name; two agents with one name would make the match ambiguous."""
    named: dict[str, Agent] = {}
    for one in agents:
        if not isinstance(one, Agent):
            raise ConfigError("invalid_config", f"not an Agent: {one!r}")
        if one.name in named:
            raise ConfigError("duplicate_name", f"two agents are named {one.name!r}")
        named[one.name] = one
    if not named:
        raise ConfigError("invalid_config", "a worker needs at least one agent")
    return named


def has_work(fold: Fold) -> bool:
    """An open turn not parked, or a background subagent whose end is not recorded yet (its
    parent's run resumes it and records it: ``threads.run.background``)."""
    if fold.status == "in_turn":
        return True
    return fold.status == "idle" and any(
        child.mode == "background" and child.status == CHILD_RUNNING
        for child in fold.features.children.values()
    )


def subagent_parent(fold: Fold) -> ThreadStartedDataParent | None:
    """The parent of a subagent's thread (None for any other thread)."""
    parent = None if fold.thread_started is None else fold.thread_started.get("parent")
    return parent if parent is not None and parent["relation"] == "subagent" else None


def is_subagent(fold: Fold) -> bool:
    """A subagent's thread is continued by its parent's run, never on its own."""
    return subagent_parent(fold) is not None


MAX_TREE_DEPTH = 64  # subagent levels followed up to the root of a tree


async def tree_root(store: Store, fold: Fold) -> tuple[BranchInfo, Fold] | None:
    """The root of the subagent tree the thread of ``fold`` belongs to (its root branch and
    its fold, opened from a snapshot where one serves), following ``thread_started.parent``
    up while the relation is ``subagent``; None for a thread that is no subagent (its own
    root) and for a tree deeper than ``MAX_TREE_DEPTH``."""
    root: tuple[BranchInfo, Fold] | None = None
    for _ in range(MAX_TREE_DEPTH):
        parent = subagent_parent(fold)
        if parent is None:
            return root
        branch = await store.root_branch(str(parent["thread_id"]))
        fold = await open_fold(store, branch.branch_id, store.clock.now_ms())
        root = (branch, fold)
    return None


def tree_work(fold: Fold) -> bool:
    """A parent's subagents are work for its run: a park on a child (the run reruns it
    first), or a child that has not reported (it resumes and records it)."""
    return any(kind == "child" for kind, _ in fold.parks) or any(
        c.status == CHILD_RUNNING for c in fold.features.children.values()
    )


def parks_reopen_at(fold: Fold, chosen: Agent) -> int | None:
    """When a parked thread has work again without a person: the earliest end of the zombie
    windows its effect parks wait on, when every one of its parks is such a park."""
    ends: list[int] = []
    for kind, key in fold.parks:
        call = next((c for c in fold.calls.values() if c.effect_key == key), None)
        if kind != "effect" or call is None:
            return None
        end = window_park_ends(fold, call, chosen.tool_named(call.name))
        if end is None:
            return None
        ends.append(end)
    return min(ends) if ends else None


def turn_principal(fold: Fold, tenant: str) -> Principal:
    """Continue on behalf of whoever opened the turn (tools see it in ``ctx.principal``)."""
    if fold.turn is not None:
        actor = fold.turn.input_event.actor
        if isinstance(actor.get("principal"), dict):
            return Principal.from_wire(actor["principal"])
    return Principal(issuer=WORKER_ISSUER, tenant=tenant, subject=WORKER_ISSUER)


class Worker:
    """See the module docstring. ``serve(stop)`` polls until ``stop`` is set; ``run_once()``
    makes one pass and waits for the runs it started."""

    def __init__(
        self,
        store: Store,
        agents: Iterable[Agent],
        *,
        concurrency: int = 4,
        poll_ms: int = 1000,
        grace_ms: int = 10_000,
        lease_ttl_ms: int | None = None,
        log: Callable[[str], None] | None = None,
    ) -> None:
        if concurrency < 1:
            raise ConfigError("invalid_config", "concurrency must be at least 1")
        self.store = store
        self.agents: Mapping[str, Agent] = agents_by_name(agents)
        self.poll_s = poll_ms / 1000
        self.grace_s = grace_ms / 1000
        self.lease_ttl_ms = lease_ttl_ms
        self.stats = WorkerStats()
        self._log = log or (lambda _line: None)
        self._slots = asyncio.Semaphore(concurrency)
        self._running: dict[str, asyncio.Task[None]] = {}
        self._idle: dict[str, int] = {}  # branch -> head seq at which it had no work for us
        self._reopen: dict[str, int] = {}  # branch -> when its zombie-window parks end
        self._wake = asyncio.Event()

    # ---- the loop ------------------------------------------------------------------------

    async def serve(self, stop: asyncio.Event) -> WorkerStats:
        """Poll and run until ``stop`` is set, then shut down (grace period, then cancel)."""
        while not stop.is_set():
            try:
                await self.poll(stop)
            except Exception as error:  # the store is unreachable for now: poll again later
                self._log(f"poll failed: {type(error).__name__}: {error}")
            self._wake.clear()
            waiters = [asyncio.ensure_future(e.wait()) for e in (stop, self._wake)]
            await asyncio.wait(waiters, timeout=self.poll_s, return_when=asyncio.FIRST_COMPLETED)
            for waiter in waiters:
                waiter.cancel()
        await self.shutdown()
        return self.stats

    async def run_once(self) -> WorkerStats:
        """One pass over the store; returns once every run it started has ended."""
        await self.poll(asyncio.Event())
        while self._running:
            await asyncio.gather(*self._running.values(), return_exceptions=True)
        return self.stats

    async def shutdown(self) -> None:
        """Let running runs finish for the grace period, then cancel the rest."""
        if not self._running:
            return
        _, pending = await asyncio.wait(list(self._running.values()), timeout=self.grace_s)
        for task in pending:
            task.cancel()
        if pending:
            await asyncio.gather(*pending, return_exceptions=True)

    def cancel_running(self) -> None:
        """Cancel every running run now (each releases its lease as it unwinds)."""
        for task in self._running.values():
            task.cancel()

    async def poll(self, stop: asyncio.Event) -> None:
        """Start a run for each free thread with work left, while slots are free."""
        for branch in await self.store.list_free_threads():
            if stop.is_set() or self._slots.locked():
                return
            if branch.branch_id in self._running:
                continue
            if self._idle.get(branch.branch_id) == branch.head_seq and not self._reopened(branch):
                continue
            chosen = await self._agent_for(branch)
            if chosen is None:
                self._idle[branch.branch_id] = branch.head_seq
                continue
            target = chosen[0]  # a subagent's thread with work: its tree's root
            if target.branch_id in self._running:
                continue
            await self._slots.acquire()
            task = asyncio.create_task(self._drive(*chosen))
            self._running[target.branch_id] = task

    # ---- one thread ----------------------------------------------------------------------

    async def _agent_for(
        self, branch: BranchInfo
    ) -> tuple[BranchInfo, Agent, Principal, Fold] | None:
        """The branch to continue (this one; for a subagent's thread with work, its tree's
        root, whose run reruns it), the agent to continue it with, on whose behalf, and the
        fold that told (the run takes it while the head has not moved), or None (no work, or
        no agent of that name here: logged once per head)."""
        try:
            # status and the open turn: a snapshot and the lines after it tell
            fold = await open_fold(self.store, branch.branch_id, self.store.clock.now_ms())
            if isinstance(fold, RestoredFold) and not has_work(fold) and fold.parks:
                # when the parks reopen is read from their events: the whole log
                chain = await self.store.read_chain(branch.branch_id)
                fold = chain.fold(self.store.clock.now_ms())
        except ThreadsError as error:
            self._log(f"skip {branch.thread_id}: {error.code}: {error.message}")
            return None
        if fold.thread_started is None:
            return None  # a header-only branch has no turn: its first run with an agent starts it
        if is_subagent(fold):
            # its parent's run continues it (with the parent's limits): the tree's root runs
            cancelling = fold.turn is not None and fold.turn.cancel_event is not None
            if not (has_work(fold) or cancelling):
                return None
            root = await tree_root(self.store, fold)
            if root is None:
                return None
            top, top_fold = root
            top_started = top_fold.thread_started
            named = self.agents.get(str(top_started and top_started.get("agent_name")))
            if named is None:
                return None
            return top, named, turn_principal(top_fold, top.tenant_id), top_fold
        name = fold.thread_started.get("agent_name")
        chosen = self.agents.get(str(name))
        if not has_work(fold):
            reopen = parks_reopen_at(fold, chosen) if chosen is not None else None
            if reopen is None:
                return None
            if reopen > self.store.clock.now_ms():
                self._reopen[branch.branch_id] = reopen  # look again once the window is over
                return None
        self._reopen.pop(branch.branch_id, None)
        if chosen is None:
            self._log(f"skip {branch.thread_id}: no agent named {name!r} in this worker")
            return None
        return branch, chosen, turn_principal(fold, branch.tenant_id), fold

    def _reopened(self, branch: BranchInfo) -> bool:
        reopen = self._reopen.get(branch.branch_id)
        return reopen is not None and reopen <= self.store.clock.now_ms()

    async def _drive(
        self, branch: BranchInfo, chosen: Agent, principal: Principal, fold: Fold
    ) -> None:
        self.stats.runs += 1
        options = RunOptions(
            branch.thread_id, self.store, principal=principal, lease_ttl_ms=self.lease_ttl_ms,
            fold=fold,
        )
        try:
            result = await start_run(chosen, None, options)
            self._record(branch, result)
        except ThreadsError as error:  # a config change, a refusal the run raised
            self._gave_up(branch, error.code, error.message)
        except Exception as error:  # a bug in one thread's tools must not stop the worker
            self._gave_up(branch, "crashed", f"{type(error).__name__}: {error}")
        finally:
            self._running.pop(branch.branch_id, None)
            self._slots.release()
            self._wake.set()

    def _gave_up(self, branch: BranchInfo, outcome: str, message: str) -> None:
        self.stats.count(outcome)
        self._idle[branch.branch_id] = branch.head_seq
        self._log(f"{branch.thread_id} {outcome}: {message}")

    def _record(self, branch: BranchInfo, result: RunResult) -> None:
        outcome: str = result.status
        detail = ""
        if isinstance(result, Failed):
            outcome = result.error.code
            detail = f": {result.error.message}"
            if outcome not in RETRY_CODES:
                self._idle[branch.branch_id] = branch.head_seq
        self.stats.count(outcome)
        self._log(f"{branch.thread_id} {outcome}{detail}")
