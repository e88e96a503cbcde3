"""Background subagents' ends, recorded in the parent's log, and the run waiting for them.

A background child (``spawn_agent`` with ``background: true``) runs beside its parent's run
(``Runtime.background``). Its end is recorded at a step boundary of the parent: per child, in
spawn order, ``agent_finished`` and ``tool_result_late`` (the call's placeholder result stays),
all in one append. During an open turn that is ordinary input. With no turn open, the append
ends with ``woken{causes: those late results}`` (actor host, the principal of the run that
spawned them), which opens a turn for the parent to react (rules 32 and 45): only results of
children one run spawned are named together, and a run whose children may not wake the thread
(it was cancelled, a cancel followed their spawn, one of that run's turns ended other than
``end_turn``) gets their ends recorded without ``woken``. The parent's ``subagent_stop`` hooks
are asked about each end first (``threads.run.subagent_hooks``): their decisions lead the append,
and a child they send back runs again instead of being recorded.

``settle`` is what ``run()`` does once a turn is over: it waits (no time limit) for every child
it runs and for the parent's reaction; a run that ends ``failed``, ``budget_exhausted`` or
``cancelled`` stops its unreported children instead (``cancel_requested{scope: tree}``, then
each is run to its end and that end recorded, no ``woken``). While it waits with no turn open,
a cancel another process queued is applied as ``Thread.cancel`` on an idle thread is, and the
run then stops its children that way and returns ``Cancelled`` (``Parked`` while a child it
parked on is still to be recorded: the next run records that child's cancelled end). While it
waits with its turn parked, a cancel queued for that turn becomes the turn's barrier and is
carried out at once (``_carry_out``): the approvals and questions it waited on end, the turn
ends ``cancelled`` and the children are stopped as above.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from threads.errors import NotFoundError, StoreError
from threads.log.event_types import Actor
from threads.log.event_types import Principal as WirePrincipal
from threads.log.fold.wakes import RunRef
from threads.log.lines import Draft
from threads.log.vocabulary import data_of, draft
from threads.run.calls import release_approval_parks
from threads.run.queued_controls import (
    apply_waiting_cancel,
    wait_for_waiting_cancel,
    waiting_cancel_item,
)
from threads.run.results import Cancelled, Completed, Parked, RunResult
from threads.run.runtime import Runtime
from threads.run.spawn import (
    child_end,
    end_drafts,
    never_started_drafts,
    park_on_child,
    resume_parked_children,
    spawned_event,
    start_background,
)
from threads.run.subagent_hooks import stop_decisions
from threads.run.tree_cancel import TREE_REASON, bar
from threads.run.turn import parked_result
from threads.store.control_items import ControlItem
from threads.store.protocol import PendingArtifact

PARENT_ENDED = "parent run ended"

Turn = Callable[[Runtime], Awaitable[RunResult]]
Ended = list[tuple[str, RunResult | None]]  # (child, its run's result; None: never created)


async def record_ended(rt: Runtime) -> bool:
    """Record the ends of children whose runs ended (a child that parked parks its parent on
    it, as a foreground one does; one a ``subagent_stop`` hook sends back runs again). Returns
    whether a ``woken`` opened a turn."""
    ended: Ended = []
    for child_id, result in rt.background.ended():
        if isinstance(result, Parked):
            await park_on_child(rt, spawned_event(rt.fold, child_id), result)
            rt.background.reported(child_id)
        else:
            ended.append((child_id, result))
    ends = await _ends(rt, ended, may_continue=True)
    if not ends:
        return False
    if rt.fold.turn is not None:
        await _append(rt, ends, wake=None)
        return False
    by_run: dict[str, list[End]] = {}
    runs: dict[str, RunRef | None] = {}
    for end in ends:
        run = _spawning_run(rt, end.child_id)
        key = run.root if run is not None else ""
        by_run.setdefault(key, []).append(end)
        runs[key] = run
    key, group = next(iter(by_run.items()))  # one run's results per woken; the rest wait
    run = runs[key]
    wake = run.principal if run is not None and _may_wake(rt, run, group) else None
    await _append(rt, group, wake=wake)
    return rt.fold.turn is not None


async def settle(rt: Runtime, result: RunResult, run_turn: Turn) -> RunResult:
    """What ``run()`` returns once its turn is over: with background children still running,
    wait for each, record its end and let the parent react to it, until none is left; a run
    that did not complete (or parked) stops its unreported children instead, as does one
    parked under a cancel barrier (on what a cancel can't end: an effect in doubt)."""
    cancelled_idle = False
    while rt.background.tasks:
        turn = rt.fold.turn
        barred = turn is not None and turn.cancel_event is not None  # parked on what stays
        if barred or not isinstance(result, Completed | Parked):
            reason = TREE_REASON if barred or isinstance(result, Cancelled) else PARENT_ENDED
            await _stop_unreported(rt, reason)
            break
        cancel = await _child_ended_or_cancel(rt)
        if cancel is not None:
            parked = rt.fold.turn is not None
            await apply_waiting_cancel(rt, cancel)
            if parked:
                result = await _carry_out(rt, run_turn)
            else:
                result, cancelled_idle = Cancelled(rt.thread), True
            continue
        if await record_ended(rt) and isinstance(result, Completed):
            result = await run_turn(rt)
    if (isinstance(result, Completed) or cancelled_idle) and rt.fold.parks:
        return parked_result(rt)  # a background child parked: the parent waits on it
    return result


async def _carry_out(rt: Runtime, run_turn: Turn) -> RunResult:
    """The parked turn just got its barrier: do at once what the thread's next run would do
    first. The approvals and questions it waits on end (``resumed``, the call ``not executed:
    cancelled``), a child it waits on runs again under the barrier, and the turn ends
    ``cancelled``; or it stays parked on what a cancel can't end (a begun effect, a child
    still parked)."""
    await release_approval_parks(rt)
    await resume_parked_children(rt)
    if rt.fold.parks:
        return parked_result(rt)
    return await run_turn(rt)


async def _child_ended_or_cancel(rt: Runtime) -> ControlItem | None:
    """Wait until a child's run ends or another process queues a cancel for this thread
    (``threads.run.queued_controls``: with no turn open, or the turn parked); then the cancel
    to apply, if one waits (looked at once more when a child ended, so a cancel queued
    meanwhile is applied before that end is recorded and could wake the thread)."""
    ended = asyncio.ensure_future(rt.background.wait())
    watch = asyncio.ensure_future(wait_for_waiting_cancel(rt))
    try:
        await asyncio.wait((ended, watch), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (ended, watch):
            task.cancel()
        await asyncio.gather(ended, watch, return_exceptions=True)
    if watch.done() and not watch.cancelled():
        return watch.result()
    try:
        return await waiting_cancel_item(rt)
    except StoreError:
        return None  # an unreachable store: the next wait looks again


async def _stop_unreported(rt: Runtime, reason: str) -> None:
    """Stop each child still running, bar it (``cancel_requested{scope: tree}``), run it to its
    end and record that end without ``woken``; a child whose thread was never created is
    recorded cancelled and never started."""
    principal: WirePrincipal = rt.principal.to_wire()
    never: Ended = []
    for child_id, task in list(rt.background.tasks.items()):
        if task.done() and not task.cancelled():
            continue  # it ended on its own: recorded as it ended
        await rt.background.stop(child_id)
        try:
            branch = await rt.writer.store.root_branch(child_id)
        except NotFoundError:
            never.append((child_id, None))
            continue
        await bar(rt.writer.store, branch.branch_id, principal, reason=reason)
        spawned = spawned_event(rt.fold, child_id)
        call = rt.fold.calls[data_of(spawned, "agent_spawned")["call_id"]]
        start_background(rt, spawned, str(call.input["prompt"]))
    await rt.background.wait_all()
    ended: Ended = [*never, *((c, r) for c, r in rt.background.ended()
                             if not isinstance(r, Parked))]
    ends = await _ends(rt, ended, may_continue=False)
    if ends:
        await _append(rt, ends, wake=None)


@dataclass(frozen=True, slots=True)
class End:
    """A background child's end as its parent records it: the ``subagent_stop`` decisions,
    then ``agent_finished`` and the late result."""

    child_id: str
    decisions: list[Draft]
    drafts: list[Draft]
    artifacts: list[PendingArtifact]


async def _ends(rt: Runtime, ended: Ended, *, may_continue: bool) -> list[End]:
    """The ends to record. A child a ``subagent_stop`` hook sends back is not one: its
    decisions are appended and it runs again (``may_continue=False``: the parent is stopping
    its children, so a ``continue`` is recorded as ``stop``)."""
    ends: list[End] = []
    for child_id, result in ended:
        spawned = spawned_event(rt.fold, child_id)
        call_id = data_of(spawned, "agent_spawned")["call_id"]
        if result is None:
            drafts, artifacts = never_started_drafts(call_id, spawned, late=True)
            ends.append(End(child_id, [], drafts, artifacts))
            continue
        end = await child_end(result)
        decisions, reason = await stop_decisions(
            rt, spawned, end.status, end.output, may_continue=may_continue
        )
        if reason is not None:
            await rt.writer.append(decisions)
            rt.background.reported(child_id)
            start_background(rt, spawned, str(rt.fold.calls[call_id].input["prompt"]))
            continue
        drafts, artifacts = end_drafts(call_id, spawned, end, late=True)
        ends.append(End(child_id, decisions, drafts, artifacts))
    return ends


async def _append(rt: Runtime, ends: list[End], *, wake: WirePrincipal | None) -> None:
    """One append: every decision first, then each child's end in spawn order (rule 32: only
    ends lie between a ``woken``'s first cause and it), then maybe the ``woken``."""
    drafts = [d for end in ends for d in end.decisions] + [d for end in ends for d in end.drafts]
    artifacts = [a for end in ends for a in end.artifacts]
    events = rt.writer.prepare(drafts)
    if wake is not None:
        causes = [e.event_id for e in events if e.type == "tool_result_late"]
        actor: Actor = {"kind": "host", "principal": wake}
        events += rt.writer.prepare([draft("woken", {"causes": causes}, actor)], after=events)
    await rt.writer.append_prepared(events, artifacts=artifacts)
    for end in ends:
        rt.background.reported(end.child_id)


def _spawning_run(rt: Runtime, child_id: str) -> RunRef | None:
    spawned = spawned_event(rt.fold, child_id)
    spawn = rt.fold.wakes.spawns.get(data_of(spawned, "agent_spawned")["call_id"])
    return spawn.run if spawn is not None else None


def _may_wake(rt: Runtime, run: RunRef, group: list[End]) -> bool:
    """Rule 32's conditions for a ``woken`` naming these children's results."""
    fold = rt.fold
    if fold.thread_cancelled or fold.features.handoff is not None:
        return False
    if run.root in fold.wakes.ended_badly:
        return False
    return all(fold.wakes.cancel_seq < spawned_event(fold, e.child_id).seq for e in group)
