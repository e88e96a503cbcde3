"""The host's runs: each executes in this process, under the thread's lease, as an
``Agent.stream`` whose committed events wake the stream readers (``Hub``).

On start it resumes what it may owe: runs its receipts name whose branch did not end its turn,
and free threads of its agents whose turn has work again (parks settled while it was down).

Invariants: at most one run of this host drives a branch at a time; once ``stop`` began, no
run launches; a run still going after the grace period is cancelled, which releases its lease
as it unwinds. A branch another holder had (``branch_busy``) is tried again every
``REOPEN_S``, so work a crashed host left is picked up once its lease lapses.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping

from threads.errors import NotFoundError, ThreadsError
from threads.host.hub import Hub
from threads.log.fold import Fold
from threads.log.lines import Event
from threads.principal import Principal
from threads.run import (
    Agent,
    CancelSignal,
    ErrorInfo,
    Failed,
    Permissions,
    RunOptions,
    RunStream,
    has_work,
    read_listing,
    start_run,
    tree_root,
    tree_work,
    turn_principal,
)
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Store

REOPEN_S = 1.0


class Runs:
    def __init__(
        self,
        store: Store,
        agents: Mapping[str, Agent],
        hub: Hub,
        *,
        ceiling: Permissions | None,
        log: Callable[[str], None],
    ) -> None:
        self.store = store
        self.agents = agents
        self.hub = hub
        self.ceiling = ceiling
        self.log = log
        self.stopping = False
        self.running: dict[str, asyncio.Task[None]] = {}  # branch_id -> its run
        self._cancels: dict[str, CancelSignal] = {}  # branch_id -> its run's in-process cancel
        self.refused: dict[str, ErrorInfo] = {}  # branch_id -> a run refused before appending
        self._retry: set[tuple[str, str]] = set()  # (thread_id, branch_id) lost to a lease
        self._reopener: asyncio.Task[None] | None = None

    def holds(self, branch_id: str) -> bool:
        return branch_id in self.running

    def agent_for(self, fold: Fold) -> Agent | None:
        name = None if fold.thread_started is None else fold.thread_started.get("agent_name")
        return self.agents.get(str(name))

    # ---- launching -----------------------------------------------------------------------

    async def resume(
        self, thread_id: str, branch_id: str | None = None, *, tree: bool = False
    ) -> None:
        """Continue the branch if it has work left and no run of ours drives it already.
        A subagent's thread is never run on its own: when it has work (a decision or cancel
        recorded on it) its tree's root is continued instead, whose run reruns it (digest
        §6.2). ``tree``: a control was just recorded on this thread or below, so its
        subagents are work too (``tree_work``)."""
        if self.stopping:
            return
        try:
            branch = await (
                self.store.get_branch(branch_id) if branch_id
                else self.store.root_branch(thread_id)
            )
            if branch.branch_id in self.running:
                return
            listing = await read_listing(self.store, branch.branch_id)
            if listing is not None and listing.status == "idle" and not tree:
                return  # no turn is open: nothing to resume, and no log to fold for it
            # status, the open turn and its cancel: a snapshot and the lines after it tell
            fold = await open_fold(self.store, branch.branch_id, self.store.clock.now_ms())
            root = await tree_root(self.store, fold)
        except ThreadsError as error:
            self.log(f"resume {thread_id}: {error.code}: {error.message}")
            return
        # A cancel barrier on a parked turn is work too: the run releases what it can.
        cancelling = fold.turn is not None and fold.turn.cancel_event is not None
        work = has_work(fold) or cancelling
        if root is not None:
            if work:
                await self.resume(root[0].thread_id, tree=True)
            return
        agent = self.agent_for(fold)
        if agent is None or not (work or (tree and tree_work(fold))):
            return
        self.launch(agent, branch, fold)

    def launch(self, agent: Agent, branch: BranchInfo, fold: Fold) -> None:
        """Run the branch's open turn on behalf of whoever opened it."""
        if self.stopping or branch.branch_id in self.running:
            return
        self.refused.pop(branch.branch_id, None)
        principal = turn_principal(fold, branch.tenant_id)
        self.running[branch.branch_id] = asyncio.create_task(
            self._drive(agent, branch, principal, fold)
        )

    async def _drive(
        self, agent: Agent, branch: BranchInfo, principal: Principal, fold: Fold
    ) -> None:
        thread_id, branch_id = branch.thread_id, branch.branch_id
        # ``Agent.run`` takes a thread id for a root branch, the branch id for a fork.
        target = thread_id if branch.parent_branch_id is None else branch_id
        cancel = CancelSignal()
        stream = RunStream()
        handed_back = False
        # The fold the host just made is the run's while no one appended since (no re-read).
        options = RunOptions(
            target, self.store, principal=principal, ceiling=self.ceiling, fold=fold
        )
        task = asyncio.create_task(start_run(agent, None, options, sink=stream, cancel=cancel))
        stream.attach(task)
        self._cancels[branch_id] = cancel
        try:
            async for item in stream:
                # a handoff target's first turn runs inside this run: its events are its own
                # branch's, which readers of that branch read from the store
                if isinstance(item, Event) and item.branch_id == branch_id:
                    self.hub.notify(branch_id, [item])
            result = await task
            if isinstance(result, Failed):
                self._failed(thread_id, branch_id, result.error)
            else:
                self.refused.pop(branch_id, None)
            self.log(f"{thread_id} {result.status}")
        except ThreadsError as error:  # a config change or a refusal the run raised
            self._failed(thread_id, branch_id, ErrorInfo(error.code, error.message))
        except asyncio.CancelledError:
            handed_back = True
            raise
        except Exception as error:  # one thread's bug must not take the host down
            self._failed(thread_id, branch_id, ErrorInfo("crashed", f"{type(error).__name__}"))
        finally:
            if not task.done():
                task.cancel()  # the host is stopping: the run releases its lease as it unwinds
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            if handed_back:
                self.log(
                    f"{thread_id} handed back: cancelled by the host stopping, its lease"
                    " released; its turn stays open and the next start continues it"
                )
            self.running.pop(branch_id, None)
            self._cancels.pop(branch_id, None)
            self.hub.forget(branch_id)
            self.hub.notify(branch_id)

    def _failed(self, thread_id: str, branch_id: str, error: ErrorInfo) -> None:
        self.log(f"{thread_id} failed: {error.code}: {error.message}")
        if error.code == "branch_busy":
            self._retry.add((thread_id, branch_id))  # never stored as the run's answer
        else:
            self.refused[branch_id] = error

    # ---- cancel a run of ours --------------------------------------------------------------

    def cancel_in_process(self, branch_id: str) -> bool:
        """Ask this host's run of ``branch_id`` to record the durable cancel barrier at its
        next step boundary (tools running now see ``ctx.cancelled``); False when no run of ours
        drives it."""
        cancel = self._cancels.get(branch_id)
        if cancel is None:
            return False
        cancel.request()
        return True

    # ---- start and stop --------------------------------------------------------------------

    async def recover(self) -> None:
        """On start: resume every run a receipt says may be unfinished, and every free thread
        of an agent this host serves whose turn has work again (its parks were settled while
        the host was down, by the CLI or another process); then keep trying the ones another
        holder had."""
        seen: set[str] = set()
        for thread_id, branch_id in await self._owed():
            if branch_id not in seen:
                seen.add(branch_id)
                await self.resume(thread_id, branch_id)
        self._reopener = asyncio.create_task(self._reopen_forever())

    async def _owed(self) -> list[tuple[str, str]]:
        """(thread, branch) pairs that may have work: receipts first, then free threads."""
        owed: list[tuple[str, str]] = []
        try:
            owed += [(r.thread_id, r.branch_id) for r in await self.store.unfinished_receipts()]
        except ThreadsError as error:
            self.log(f"recovery could not list runs: {error.code}: {error.message}")
        try:
            owed += [(b.thread_id, b.branch_id) for b in await self.store.list_free_threads()]
        except ThreadsError as error:
            self.log(f"recovery could not list threads: {error.code}: {error.message}")
        return owed

    async def _reopen_forever(self) -> None:
        while not self.stopping:
            await asyncio.sleep(REOPEN_S)
            retry, self._retry = self._retry, set()
            for thread_id, branch_id in retry:
                with contextlib.suppress(NotFoundError):
                    await self.resume(thread_id, branch_id)

    async def stop(self, grace_s: float) -> None:
        """Take no more runs; let running ones finish for ``grace_s``, then cancel the rest
        (handed back: each releases its lease, and its turn stays open for the next start).
        Says what it does: stopping, each run handed back, and what came of them all."""
        self.stopping = True
        if self._reopener is not None:
            self._reopener.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reopener
        tasks = list(self.running.values())
        self.log(
            f"stopping: taking no new runs; {len(tasks)} run(s) running may finish within"
            f" {grace_s:g} s, then are handed back"
        )
        pending: set[asyncio.Task[None]] = set()
        if tasks:
            _, pending = await asyncio.wait(tasks, timeout=grace_s)
            for task in pending:
                task.cancel()
            await asyncio.gather(*pending, return_exceptions=True)
        self.log(
            f"stopped: {len(tasks) - len(pending)} run(s) finished in time,"
            f" {len(pending)} handed back"
        )
