"""Starting a run: open or create the thread, take its lease, load and check the log, then hand
over to the turn loop. Whatever happens, the lease is released when the run ends.

Refusals happen here, before anything is appended: ``branch_busy`` (another process holds the
thread), ``log_corrupt``, and what ``threads.run.turn_open`` checks before any turn is opened:
``writer_mismatch`` (the other implementation writes this branch), ``branch_not_runnable``
(inspection-only repair fork) and a config change (``ConfigError``); and a subagent's thread
that works in its parent's sandbox, run on its own (``subagent_shares_sandbox``). A new thread
is created with its first input by ``turn_open.create_thread``; a later input is opened by the
loop.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from threads import telemetry
from threads.errors import ConfigError, NotFoundError, StoreError, ThreadsError
from threads.log.fold import Fold
from threads.log.ids import uuid7
from threads.log.lines import Event, first_event, make_header, next_event
from threads.log.vocabulary import UserInputDataSource, data_of, draft
from threads.memory.protocol import MemoryHandle, MemoryScope
from threads.principal import LOCAL_OPERATOR, Principal
from threads.run.budget import AncestorBudget, Budget, SpendMemo
from threads.run.budget_check import handoff_ancestors
from threads.run.child_run import ChildRun, shares_sandbox
from threads.run.config import AgentSpec
from threads.run.drafts import HOST, user_input
from threads.run.loop import drive
from threads.run.permissions import Permissions
from threads.run.results import ErrorInfo, Failed, HandedOff, RunResult, describe
from threads.run.run_open import open_run, seed_call_ids, window_serves
from threads.run.runtime import CancelSignal, RenderMemo, Runtime
from threads.run.sources import RunSources
from threads.run.streaming import RunStream
from threads.run.subagent_hooks import undelivered
from threads.run.thread import Thread
from threads.run.tree_cancel import bar
from threads.run.turn_open import TurnRequest, check_pinned, create_thread, refusal
from threads.run.writer import DEFAULT_LEASE_TTL_MS, BranchWriter, fence_time
from threads.sandbox.binding import RunSandbox
from threads.sandbox.protocol import Sandbox
from threads.store.capabilities import resources_of
from threads.store.fold_open import open_checkpoint
from threads.store.lease_release import release
from threads.store.lease_wait import acquire_waiting, check_wait
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.tools.http import ToolHttp


def default_store() -> Store:
    return sqlite(".threads")


@dataclass(frozen=True, slots=True)
class RunOptions:
    """What ``Agent.run``, ``run_sync`` and ``stream`` take besides the input (see there)."""

    thread: str | None = None
    store: Store | None = None
    deps: Any = None
    budget: Budget | None = None
    principal: Principal | None = None
    lease_ttl_ms: int | None = None
    ceiling: Permissions | None = None
    wait: bool | float = False
    # A fold of the branch its caller made moments before (the host's, once it wrote the turn's
    # input): the run takes it instead of reading the branch again while, under the run's
    # lease, the branch's head is still the one the fold ended at (``run_open.open_run``), and
    # it holds every event (not one opened from a snapshot).
    fold: Fold | None = None
    # A subagent's run: the budgets of the threads above it (``threads.run.spawn``).
    ancestors: tuple[AncestorBudget, ...] = ()
    # A subagent's run that shares its parent's sandbox: the parent's (lent to this run).
    sandbox: RunSandbox | None = None
    # A subagent's run: the reasons its parent sent it back with; the first it was not given
    # yet (counted from its log, under its lease) is its input (``source: parent_agent``).
    continuations: tuple[str, ...] = ()


async def start_run(
    agent: AgentSpec,
    input: str | None,
    options: RunOptions,
    *,
    sink: RunStream | None = None,
    cancel: CancelSignal | None = None,
) -> RunResult:
    """Take the thread's lease, refuse what must be refused, build the ``Runtime`` and drive
    it. ``cancel``: how ``run_sync`` passes a Ctrl-C in. The run is one span and its start and
    outcome are logged (``threads.telemetry``)."""
    with telemetry.run_span(agent.name) as span:
        result = await _start_run(agent, input, options, span, sink=sink, cancel=cancel)
        telemetry.run_ended(span, result.thread.id, result.status, describe(result))
    if isinstance(result, HandedOff) and result.target is None:
        result = await _run_target(result, options, sink=sink, cancel=cancel)
    return result


async def _run_target(
    result: HandedOff, options: RunOptions, *, sink: RunStream | None,
    cancel: CancelSignal | None,
) -> HandedOff:
    """The handoff target's first turn, inside the run that handed off (once the source's
    lease is released): on behalf of whoever the target's input came from, under the same
    ceiling, deps and lease settings. Once that turn ended, running it again appends nothing."""
    target = result.to_thread
    assert target.agent is not None  # ``ensure_target`` hands the target's agent over
    ran = await start_run(  # under the source's budgets: every run of a target reads them
        target.agent, None,
        RunOptions(
            thread=target.id, store=target.store, deps=options.deps,
            principal=target.principal, lease_ttl_ms=options.lease_ttl_ms,
            ceiling=options.ceiling, wait=options.wait,
        ),
        sink=sink, cancel=cancel,
    )
    return dataclasses.replace(result, target=ran)


async def _start_run(
    agent: AgentSpec,
    input: str | None,
    options: RunOptions,
    span: telemetry.Span,
    *,
    sink: RunStream | None,
    cancel: CancelSignal | None,
) -> RunResult:
    store = options.store if options.store is not None else default_store()
    if options.budget is not None:
        options.budget.check_enforceable(agent.model)
    _check_store_serves(agent, store)
    check_wait(options.wait)
    # The run's connections to its tool sources (MCP servers): closed however the run ends,
    # before its lease is released, so whatever closing sends still passes the fence.
    sources = RunSources()
    try:
        return await _run_connected(
            agent, input, options, store=store, span=span, sources=sources, sink=sink,
            cancel=cancel,
        )
    finally:
        await sources.aclose()


async def _run_connected(
    agent: AgentSpec,
    input: str | None,
    options: RunOptions,
    *,
    store: Store,
    span: telemetry.Span,
    sources: RunSources,
    sink: RunStream | None,
    cancel: CancelSignal | None,
) -> RunResult:
    principal = options.principal or LOCAL_OPERATOR
    budget, deps, ceiling = options.budget, options.deps, options.ceiling
    ttl_ms = options.lease_ttl_ms or DEFAULT_LEASE_TTL_MS
    thread_id = options.thread
    now = store.clock.now_ms()
    new = thread_id is None
    created: list[Event] = []  # events written with the new branch (streamed like appended ones)
    if thread_id is None:
        if input is None:
            raise ConfigError("invalid_config", "a new thread needs an input")
        # No thread exists yet, so there is no lease to lose: the sources' setup requests
        # (initialize, list) go out before one does, and nothing else until the run holds it.
        sources.fence.setup()
        agent = await sources.open(agent)
        sources.fence.refuse()
        # The branch, its thread_started and the first user_input are one transaction.
        made = await create_thread(store, agent, TurnRequest(input, principal, budget))
        created += made.events
        input = None  # written: the run goes on with the turn it opened
        thread_id = made.header.thread_id
        telemetry.committed(thread_id, created)
        branch_id = made.header.branch_id
    else:
        try:
            branch = await store.root_branch(thread_id)
        except NotFoundError:
            branch = await store.get_branch(thread_id)  # the branch id a fork returned
        thread_id = branch.thread_id
        if branch.tenant_id != principal.tenant:
            raise NotFoundError(f"no thread {thread_id} for tenant {principal.tenant}")
        branch_id = branch.branch_id
    handle = Thread(store, thread_id, principal=principal, agent=agent)
    telemetry.run_started(span, agent.name, thread_id, branch_id, new=new)
    try:
        # A lease row that was never released (released rows read expires_at 0) means this
        # acquire takes the thread over from a holder that died or lost it.
        previous = None if new else await store.read_lease(branch_id)
        lease_sent_at = fence_time(store)
        lease = await acquire_waiting(store, branch_id, uuid7(now), ttl_ms, wait=options.wait)
    except StoreError as exc:
        return Failed(handle, ErrorInfo(exc.code, exc.message))
    if previous is not None and previous.expires_at > 0 and options.wait is False:
        telemetry.lease_taken_over(thread_id, lease.epoch)
    writer: BranchWriter | None = None
    http: ToolHttp | None = None
    try:
        try:
            plain = (budget is None and not options.ancestors and options.sandbox is None
                     and not options.continuations)
            opened = await open_run(store, branch_id, options.fold,
                                    window=not new and window_serves(agent, plain=plain),
                                    has_input=input is not None)
            branch, fold = opened.branch, opened.fold
            refused = refusal(branch.state, fold)
        except ThreadsError as exc:
            return Failed(handle, ErrorInfo(exc.code, exc.message))
        if refused is None and options.sandbox is None and isinstance(agent.sandbox, Sandbox):
            refused = await _sandbox_elsewhere(store, agent.sandbox, fold)
        if refused is not None:
            return Failed(handle, refused)
        source: UserInputDataSource = "api"
        if options.continuations:
            input = undelivered(fold.events, options.continuations)
            source = "parent_agent"
        writer = BranchWriter(
            store,
            lease,
            fold,
            ttl_ms=ttl_ms,
            on_event=sink.event if sink else None,
            lease_sent_at=lease_sent_at,
        )
        writer.start_renewal()
        sources.fence.bind(writer)
        if not new:
            agent = await sources.open(agent)
            handle.agent = agent
            check_pinned(agent, fold)
        http = ToolHttp(writer)
        if sink is not None:
            for event in created:
                sink.event(event)
        if fold.thread_started is None:
            # A header-only branch (an older version crashed right after creating it): it was
            # never started, so this run starts it.
            await writer.append([draft("thread_started", agent.config(), HOST)])
        # A handoff target runs under its source's budgets in force, read from the logs at
        # each of its runs; a subagent's come from its parent's run.
        spend_memo = SpendMemo()
        ancestors = options.ancestors or await handoff_ancestors(
            store, thread_id, fold, spend_memo)
        # a continuing run renders its next request on from the last one a run recorded (the
        # request checkpoint in the fold row), not from every line, while that holds
        memo = RenderMemo()
        resumed = opened.resumed
        if resumed is None and not new:
            resumed = await open_checkpoint(store, branch_id, fold)
        if resumed is not None:
            memo.cache.resumed = resumed
            # the rows this run puts before its first request carry the checkpoint it opened
            # with (still a request of this chain; the next run checks it again)
            writer.keep_checkpoint(resumed.checkpoint)
        rt = Runtime(
            writer=writer,
            spec=agent,
            thread=handle,
            principal=principal,
            deps=deps,
            permissions=agent.permissions.narrowed(ceiling),
            ceiling=ceiling,
            run_budget=budget,
            sink=sink,
            dropped_ref=branch.dropped_ref,
            http=http,
            cancel=cancel or CancelSignal(),
            sandbox=(
                _run_sandbox(agent, store, principal, writer) if options.sandbox is None
                else options.sandbox.lent(writer.check)
            ),
            memory=_run_memory(agent, store, principal, writer),
            start_child=lambda child: run_child(store, child),
            ancestors=ancestors,
            spend_memo=spend_memo,
            memo=memo,
        )
        seed_call_ids(rt)
        return await drive(rt, input, recovering=not new, source=source)
    finally:
        try:
            await sources.aclose()  # while the lease is still held (and the fence passes)
            sources.fence.refuse()
            if http is not None:
                await http.aclose()
        finally:
            # Every way out hands the lease back (``release``: one it can't write, on a full
            # store, is taken back at once by this process's next run).
            if writer is not None:
                await writer.close()
            else:
                await release(store, lease)


async def run_child(store: Store, child: ChildRun) -> RunResult:
    """Run a subagent's thread on the parent's store: created first when it does not exist yet
    (one transaction: its header, ``thread_started`` naming the parent's ``agent_spawned``, and
    the prompt as its first input), then run with no new input, so a crash anywhere is resumed
    by running it again, never by starting a second child."""
    try:
        branch = await store.root_branch(child.thread_id)
        if child.cancelled_by is not None:
            await bar(store, branch.branch_id, child.cancelled_by)
    except NotFoundError:
        now = store.clock.now_ms()
        header = make_header(child.thread_id, uuid7(now), now)
        started = first_event(
            header, draft("thread_started", child.spec.config(parent=child.parent), HOST)
        )
        prompt = user_input(child.prompt, child.principal, None, source="parent_agent")
        events = [started, next_event(started, prompt, time=now)]
        await store.create_branch(header, tenant_id=child.principal.tenant, events=events)
        telemetry.committed(child.thread_id, events)
    options = RunOptions(
        child.thread_id, store, child.deps, principal=child.principal, ceiling=child.ceiling,
        ancestors=child.ancestors, sandbox=child.sandbox, continuations=child.continuations,
    )
    return await start_run(child.spec, None, options)


def _check_store_serves(agent: AgentSpec, store: Store) -> None:
    """A ``ConfigError`` before anything is written when the store can't keep the agent's
    sandbox ledger or memory."""
    if isinstance(agent.sandbox, Sandbox):
        resources_of(store)
    if agent.memory is not None:
        agent.memory.bind(store)


def _run_sandbox(
    agent: AgentSpec, store: Store, principal: Principal, writer: BranchWriter
) -> RunSandbox | None:
    if not isinstance(agent.sandbox, Sandbox):
        return None
    return RunSandbox(agent.sandbox, store, principal.tenant, lambda: writer.lease, writer.check)


async def _sandbox_elsewhere(store: Store, sandbox: Sandbox, fold: Fold) -> ErrorInfo | None:
    """A subagent's thread run on its own while it works in its parent's sandbox: only a run
    of the parent holds that sandbox (its ledger row, under its lease), so this run must not
    make one of its own (``subagent_shares_sandbox``)."""
    own = fold.thread_started
    parent = own.get("parent") if own is not None else None
    if parent is None or parent["relation"] != "subagent":
        return None
    chain = await store.read_chain(parent["branch_id"])
    events = [e for segment in chain.segments for e in segment.events]
    spawned = next((e for e in events if e.event_id == parent["event_id"]), None)
    started = next((e for e in events if e.type == "thread_started"), None)
    if spawned is None or started is None:
        return None
    isolation = data_of(spawned, "agent_spawned")["isolation"]
    provider = data_of(started, "thread_started").get("sandbox_provider")
    if not shares_sandbox(isolation, provider,
                          sandbox.info.provider):
        return None
    return ErrorInfo(
        "subagent_shares_sandbox",
        f"this subagent thread works in the sandbox of its parent thread {parent['thread_id']},"
        " which only a run of the parent holds: run the parent thread, which runs this one",
    )


def _run_memory(
    agent: AgentSpec, store: Store, principal: Principal, writer: BranchWriter
) -> MemoryHandle | None:
    if agent.memory is None:
        return None
    scope = MemoryScope.of(principal, agent.name)
    return MemoryHandle(agent.memory.bind(store), scope, writer.check)
