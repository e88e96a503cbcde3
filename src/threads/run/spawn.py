"""``spawn_agent``: the framework tool with which an agent starts one of its subagents, each in
a thread of its own, and the records that tie the child's thread to the parent's call.

An allowed ``spawn_agent`` call is never executed as a plain tool. When its turn comes (in call
order): a call that can't spawn (an agent not listed, an isolation not supported, an earlier
child of that name still running) is closed ``not_executed`` and nothing is spawned. Otherwise
``agent_spawned`` (the child's thread id, minted here) is made durable first, then the runner
creates the child's thread (``thread_started.parent`` naming that event, the prompt as its first
input) and runs it; its end is recorded in one append as ``agent_finished`` and the call's
``tool_result``. A child that parks parks the parent (``parked{kind: child}``), and a later run
of the parent runs the child again first. A background spawn records its placeholder result
with ``agent_spawned`` and runs the child beside the parent's run (``threads.run.background``
records its end). The agent's ``subagent_start`` hooks may deny a spawn and its
``subagent_stop`` hooks send a child that ended back to work (``threads.run.subagent_hooks``);
their decisions go in the appends above. A child whose ``isolation`` (or, for ``none``, the
same sandbox provider) makes it share its parent's sandbox gets the parent's ``RunSandbox``
lent to its run (``threads.sandbox.binding``).

Invariant: a call has at most one child. A crash anywhere is resumed by the re-dispatched call
(or, for a background child, by the parent's next run adopting it), which finds its
``agent_spawned`` and runs that child again, never a second one; a child another process holds
halts the parent (``branch_busy``) with nothing recorded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from threads.errors import NotFoundError, StoreError
from threads.log.canonical import canonical
from threads.log.event_types import Principal as WirePrincipal
from threads.log.fold import Fold
from threads.log.fold.features import CHILD_RUNNING
from threads.log.ids import uuid7
from threads.log.lines import Draft, Event
from threads.log.vocabulary import (
    AgentFinishedData,
    AgentFinishedDataStatus,
    AgentSpawnedData,
    ParkedData,
    ResumedData,
    ThreadStartedDataParent,
    Usage,
    data_of,
    draft,
)
from threads.run.budget_check import ancestors_below
from threads.run.child_run import ChildRun, shares_sandbox
from threads.run.config import AgentSpec
from threads.run.drafts import HOST, TOOL, tool_result_data
from threads.run.hooks import SubagentStartView
from threads.run.record import close, result_draft
from threads.run.results import (
    BudgetExhausted,
    Cancelled,
    Completed,
    Failed,
    Parked,
    Pending,
    RunResult,
)
from threads.run.runtime import Runtime
from threads.run.subagent_hooks import continuations, start_decisions, stop_decisions
from threads.sandbox.binding import RunSandbox
from threads.sandbox.protocol import Sandbox
from threads.store.protocol import PendingArtifact
from threads.store.rows import artifact_ref
from threads.tools.tool import RunContext, Tool, tool

SPAWN_AGENT = "spawn_agent"
STARTED = "started in background"  # a background spawn's placeholder result
# A child run that ends this way recorded nothing the parent could report: the parent halts
# too, and a later run tries again.
HALTING = ("branch_busy", "stale_epoch", "seq_conflict", "artifact_missing", "artifact_corrupt")
SUPPORTED_ISOLATION = ("none", "shared_sandbox")

Isolation = Literal["none", "shared_sandbox", "worktree", "forked_sandbox"]


class SpawnAgent(BaseModel):
    model_config = ConfigDict(extra="forbid")

    agent: str = Field(min_length=1, description="The subagent to start: one of the names the"
                       " instructions list.")
    prompt: str = Field(min_length=1, description="Its task. The subagent sees only this, not"
                        " this conversation: say everything it needs.")
    background: bool = Field(default=False, description="Return at once; the result arrives"
                             " later.")
    isolation: Isolation = "none"


async def _runs_as_a_thread(args: SpawnAgent, ctx: RunContext) -> str:
    raise RuntimeError("spawn_agent starts a child thread (threads.run.spawn), never executed")


spawn_agent: Tool = tool(
    name=SPAWN_AGENT,
    description="Start a subagent on a task in its own conversation and get its final answer"
    " back as this call's result.",
    input=SpawnAgent,
    execute=_runs_as_a_thread,
    effect="read_only",
)


def subagents_line(names: Sequence[str]) -> str:
    """The line the parent's instructions carry (pinned with them)."""
    return f"Subagents you can start with spawn_agent: {', '.join(names)}."


def spawned_by(fold: Fold, call_id: str) -> Event | None:
    """The ``agent_spawned`` a call recorded, if it got that far."""
    child = next((c for c in fold.features.children.values() if c.call_id == call_id), None)
    if child is None:
        return None
    return spawned_event(fold, child.child_thread_id)


def spawned_event(fold: Fold, child_thread_id: str) -> Event:
    """The ``agent_spawned`` that created the child."""
    return next(
        e for e in reversed(fold.events)
        if e.type == "agent_spawned"
        and data_of(e, "agent_spawned")["child_thread_id"] == child_thread_id
    )


def spawn_refusal(rt: Runtime, args: SpawnAgent) -> str | None:
    """Why the call spawns nothing, in the words the model is shown (None: it may spawn)."""
    names = [spec.name for spec in rt.spec.subagents]
    if args.agent not in names:
        return f"unknown agent {args.agent}: not one of this agent's subagents"
    if args.isolation not in SUPPORTED_ISOLATION:
        return f"isolation {args.isolation} is not supported yet"
    if args.isolation == "shared_sandbox":
        spec = rt.spec.subagent_named(args.agent)
        assert spec is not None
        if rt.sandbox is None:
            return "isolation shared_sandbox needs a sandbox: this agent has none to share"
        if not isinstance(spec.sandbox, Sandbox):
            return f"isolation shared_sandbox needs a sandbox: {args.agent} has none"
    for child in rt.fold.features.children.values():
        if child.agent_name == args.agent and child.status == CHILD_RUNNING:
            return f"member_active: {args.agent} is still running"
    return None


async def run_spawn(rt: Runtime, call_id: str, input: SpawnAgent) -> Pending | None:
    """The call's child, recorded first when the call has none yet, run to its end (or to a
    park, which parks the parent too)."""
    spawned = spawned_by(rt.fold, call_id)
    if spawned is None:
        refusal = spawn_refusal(rt, input)
        if refusal is not None:
            call = rt.fold.calls[call_id]
            await close(rt, call, f"not executed: {refusal}", origin="not_executed", actor=HOST)
            return None
        view = SubagentStartView(
            call_id, input.agent, input.prompt, input.background, input.isolation
        )
        decisions, denial = await start_decisions(rt, call_id, view)
        if denial is not None:  # nothing spawned: the decisions and the result, one append
            shown, artifacts = result_draft(call_id, denial, origin="denied", actor=HOST)
            await rt.writer.append([*decisions, shown], artifacts=artifacts)
            return None
        spawned = await _record_spawn(rt, call_id, input, decisions)
        if input.background:  # its end is recorded later (``threads.run.background``)
            start_background(rt, spawned, input.prompt)
            return None
    barrier = _barrier(rt)
    if barrier is not None and not await _created(rt, spawned):
        await _record_never_started(rt, call_id, spawned)
        return None
    while True:  # until no subagent_stop hook sends the child back
        result = await _run_child(rt, spawned, input.prompt)
        if isinstance(result, Parked):
            return await park_on_child(rt, spawned, result)
        end = await child_end(result)
        reopened = _unparked(rt, spawned)
        decisions, reason = await stop_decisions(rt, spawned, end.status, end.output)
        if reason is None:
            break
        await rt.writer.append([*reopened, *decisions])
    shown_end, artifacts = end_drafts(call_id, spawned, end, late=False)
    await rt.writer.append([*reopened, *decisions, *shown_end], artifacts=artifacts)
    return None


def _unparked(rt: Runtime, spawned: Event) -> list[Draft]:
    """The ``resumed`` that ends the parent's park on a child that no longer parks, when the
    parent is parked on it (a run's recovery re-dispatches the call before anything else):
    recorded in the same append as what follows the child's run, so no crash leaves the parent
    parked on a child whose end it recorded."""
    child_id = data_of(spawned, "agent_spawned")["child_thread_id"]
    if ("child", child_id) not in rt.fold.parks:
        return []
    data: ResumedData = {"address": {"id": child_id, "kind": "child"},
                         "cause_event_id": spawned.event_id}
    return [draft("resumed", data, rt.actor())]


async def resume_parked_children(rt: Runtime) -> None:
    """Before anything else, a parent parked on children runs each of them again; one that no
    longer parks ends the parent's park on it (``resumed``, caused by its ``agent_spawned``),
    and the call that spawned it, re-dispatched, then records its end."""
    for kind, child_id in list(rt.fold.parks):
        if kind != "child":
            continue
        spawned = spawned_event(rt.fold, child_id)
        call = rt.fold.calls[data_of(spawned, "agent_spawned")["call_id"]]
        result = await _run_child(rt, spawned, str(call.input["prompt"]))
        if isinstance(result, Parked):
            continue
        data: ResumedData = {"address": {"id": child_id, "kind": "child"},
                             "cause_event_id": spawned.event_id}
        await rt.writer.append([draft("resumed", data, rt.actor())])


def _barrier(rt: Runtime, spawned: Event | None = None) -> WirePrincipal | None:
    """The principal of the cancel barrier that stops a child (the run's when it names
    none): the open turn's; with no turn open, any cancel recorded after ``spawned``: a
    thread cancel (``Thread.cancel`` on a thread whose background children had not reported),
    or a turn's, whose turn then ended cancelled (a run ending ``cancelled`` stops every child
    still unreported, ``threads.run.background``; one a crash cut off before it did is stopped
    by the next run the same way). None when no barrier stops it."""
    fold = rt.fold
    turn = fold.turn
    cancel: Event | None = None
    if turn is not None:
        cancel = turn.cancel_event
    elif spawned is not None:
        cancel = next((e for e in reversed(fold.events) if e.seq > spawned.seq
                       and e.type == "cancel_requested"), None)
    if cancel is None:
        return None
    principal: WirePrincipal = cancel.actor.get("principal") or rt.principal.to_wire()
    return principal


async def _created(rt: Runtime, spawned: Event) -> bool:
    try:
        await rt.writer.store.root_branch(data_of(spawned, "agent_spawned")["child_thread_id"])
    except NotFoundError:
        return False
    return True


async def _record_never_started(rt: Runtime, call_id: str, spawned: Event) -> None:
    """A spawn the parent's cancel came before the child's thread: it is never created."""
    drafts, artifacts = never_started_drafts(call_id, spawned, late=False)
    await rt.writer.append(drafts, artifacts=artifacts)


def never_started_drafts(
    call_id: str, spawned: Event, *, late: bool
) -> tuple[list[Draft], list[PendingArtifact]]:
    """The end of a child whose thread was never created: cancelled, usage unknown."""
    finished: AgentFinishedData = {
        "child_thread_id": data_of(spawned, "agent_spawned")["child_thread_id"],
        "status": "cancelled",
        "usage": {"input_tokens": None, "output_tokens": None},
    }
    shown, artifacts = _shown(call_id, "cancelled: cancelled", is_error=True, late=late)
    return [draft("agent_finished", finished, HOST), shown], artifacts


def _shown(
    call_id: str, text: str, *, is_error: bool, late: bool
) -> tuple[Draft, list[PendingArtifact]]:
    """The call's result: a ``tool_result``, or after a deferred placeholder the same as a
    ``tool_result_late`` (no origin)."""
    shown, artifacts = result_draft(call_id, text, origin="executed", actor=TOOL,
                                    is_error=is_error)
    if late:
        data = {k: v for k, v in shown.data.items() if k != "origin"}
        shown = Draft("tool_result_late", data, HOST)
    return shown, artifacts


async def _record_spawn(
    rt: Runtime, call_id: str, input: SpawnAgent, decisions: list[Draft]
) -> Event:
    spec = rt.spec.subagent_named(input.agent)
    assert spec is not None  # spawn_refusal checked the name
    data: AgentSpawnedData = {
        "agent_name": spec.name,
        "call_id": call_id,
        "child_thread_id": uuid7(rt.now()),
        "isolation": input.isolation,
        "mode": "background" if input.background else "foreground",
    }
    if spec.budget is not None:
        data["budget"] = spec.budget.to_wire()
    drafts = [*decisions, draft("agent_spawned", data, HOST)]
    if input.background:
        placeholder = tool_result_data(call_id, STARTED, origin="deferred", is_error=False)
        drafts.append(draft("tool_result", placeholder, HOST))
    events = await rt.writer.append(drafts)
    return events[len(decisions)]


def start_background(rt: Runtime, spawned: Event, prompt: str) -> None:
    """Run a background child beside the parent's run; its end is recorded at a later step
    boundary (``threads.run.background``)."""
    child_id = data_of(spawned, "agent_spawned")["child_thread_id"]
    rt.background.start(child_id, _run_child(rt, spawned, prompt))


async def adopt_background(rt: Runtime) -> None:
    """A run of the parent takes over every background child that has not ended (spawned by
    an earlier run that crashed or stopped, or by this one) and does not park it. A child a
    thread cancel came after whose thread was never created is recorded cancelled (no
    ``woken``) and never started."""
    fold = rt.fold
    never: list[Draft] = []
    stored: list[PendingArtifact] = []
    for child in fold.features.children.values():
        if child.mode != "background" or child.status != CHILD_RUNNING:
            continue
        if ("child", child.child_thread_id) in fold.parks:
            continue
        spawned = spawned_event(fold, child.child_thread_id)
        if _barrier(rt, spawned) is not None and not await _created(rt, spawned):
            drafts, artifacts = never_started_drafts(child.call_id, spawned, late=True)
            never += drafts
            stored += artifacts
            continue
        start_background(rt, spawned, str(fold.calls[child.call_id].input["prompt"]))
    if never:
        await rt.writer.append(never, artifacts=stored)


async def _run_child(rt: Runtime, spawned: Event, prompt: str) -> RunResult:
    spawn = data_of(spawned, "agent_spawned")
    spec = rt.spec.subagent_named(spawn["agent_name"])
    assert spec is not None  # the pinned config lists it (a run with another is refused)
    parent: ThreadStartedDataParent = {
        "branch_id": rt.writer.branch_id,
        "event_id": spawned.event_id,
        "relation": "subagent",
        "thread_id": rt.writer.thread_id,
    }
    cancelled_by = _barrier(rt, spawned)
    child = ChildRun(
        spec=spec.under_parent(rt.spec),
        thread_id=spawn["child_thread_id"],
        parent=parent,
        prompt=prompt,
        principal=rt.principal,
        deps=rt.deps,
        ceiling=rt.permissions,
        cancelled_by=cancelled_by,
        ancestors=await ancestors_below(rt, spawn["child_thread_id"]),
        sandbox=_shared(rt, spec, spawn["isolation"]),
        # a cancelled parent gives its child no new input (a reason not yet given is dropped)
        continuations=() if cancelled_by else continuations(rt.fold, spawn["call_id"]),
    )
    result = await rt.start_child(child)
    if isinstance(result, Failed) and result.error.code in HALTING:
        raise StoreError(
            result.error.code,
            f"subagent thread {child.thread_id} could not run ({result.error.message});"
            " run this thread again once it can",
        )
    return result


def _shared(rt: Runtime, spec: AgentSpec, isolation: str) -> RunSandbox | None:
    """The parent's sandbox when the child works in it: asked for (``shared_sandbox``), or by
    default (``none``) when both agents have a sandbox of the same provider. Otherwise None:
    the child has its agent's own sandbox, if any. Decided from the pinned agents alone, so a
    rerun after a crash decides the same."""
    if rt.sandbox is None or not isinstance(spec.sandbox, Sandbox):
        return None
    shared = shares_sandbox(
        isolation, rt.sandbox.provider.info.provider, spec.sandbox.info.provider
    )
    return rt.sandbox if shared else None


async def park_on_child(rt: Runtime, spawned: Event, result: Parked) -> Pending:
    child_id = data_of(spawned, "agent_spawned")["child_thread_id"]
    if ("child", child_id) not in rt.fold.parks:
        data: ParkedData = {"address": {"id": child_id, "kind": "child"}, "reason": result.reason}
        await rt.writer.append([draft("parked", data, rt.actor())])
    name = data_of(spawned, "agent_spawned")["agent_name"]
    return Pending("child", child_id, f"subagent {name}: {result.reason}")


@dataclass(frozen=True, slots=True)
class ChildEnd:
    """How a child ended, as its parent records it: ``agent_finished``'s status and usage, and
    the output the parent is told (canonical JSON when ``structured``)."""

    status: AgentFinishedDataStatus
    output: str
    structured: bool
    usage: Usage


async def child_end(result: RunResult) -> ChildEnd:
    fold = await result.thread.fold()
    status, output = _outcome(result, fold)
    return ChildEnd(status, output, status == "completed" and _structured(fold), tree_usage(fold))


def end_drafts(
    call_id: str, spawned: Event, end: ChildEnd, *, late: bool
) -> tuple[list[Draft], list[PendingArtifact]]:
    """How a child ended, for its parent's log: ``agent_finished`` and the call's result (a
    ``tool_result``, or for a background child a ``tool_result_late``)."""
    media_type = "application/json" if end.structured else "text/plain"
    blob = end.output.encode("utf-8")
    finished: AgentFinishedData = {
        "child_thread_id": data_of(spawned, "agent_spawned")["child_thread_id"],
        "output_ref": artifact_ref(blob, media_type),
        "status": end.status,
        "usage": end.usage,
    }
    text = end.output if end.status == "completed" else f"{end.status}: {end.output}"
    shown, artifacts = _shown(call_id, text, is_error=end.status != "completed", late=late)
    return [draft("agent_finished", finished, HOST), shown], [
        PendingArtifact(blob, media_type), *artifacts
    ]


def _structured(fold: Fold) -> bool:
    return "output" in fold.policy


def _outcome(result: RunResult, fold: Fold) -> tuple[AgentFinishedDataStatus, str]:
    """(agent_finished status, the child's output as the parent is told it). A run of a child
    that had already ended (a crash came before the parent recorded it) returns ``Completed``
    whatever the end was, so then the child's last ``turn_completed`` says how it ended."""
    if isinstance(result, Completed):
        ended = _last_end(fold)
        if ended is not None and data_of(ended, "turn_completed")["reason"] != "end_turn":
            return _ended_as(fold, ended)
        if _structured(fold):  # the accepted value, as canonical JSON
            return "completed", canonical(fold.features.accepted_output).decode("utf-8")
        return "completed", str(result.output)
    if isinstance(result, BudgetExhausted):
        return "budget_exhausted", f"budget exhausted: {result.budget.limit}"
    if isinstance(result, Cancelled):
        return "cancelled", "cancelled"
    assert isinstance(result, Failed)  # a park is never an end
    return "failed", result.error.message


def _last_end(fold: Fold) -> Event | None:
    return next((e for e in reversed(fold.events) if e.type == "turn_completed"), None)


def _ended_as(fold: Fold, ended: Event) -> tuple[AgentFinishedDataStatus, str]:
    data = data_of(ended, "turn_completed")
    reason = data["reason"]
    if reason == "cancelled":
        return "cancelled", "cancelled"
    if reason == "budget_exhausted":
        exceeded = next(e for e in reversed(fold.events) if e.type == "budget_exceeded")
        limit = data_of(exceeded, "budget_exceeded")["limit"]
        return "budget_exhausted", f"budget exhausted: {limit}"
    code = data.get("code")
    return "failed", f"the turn ended {reason}" + (f" ({code})" if code else "")


def tree_usage(fold: Fold) -> Usage:
    """A child's tokens: its own and its children's, or both null when any is unknown."""
    unknown: Usage = {"input_tokens": None, "output_tokens": None}
    if fold.unknown_responses or fold.open_attempt is not None:
        return unknown
    usage: Usage = {"input_tokens": fold.input_tokens, "output_tokens": fold.output_tokens}
    for child in fold.features.children.values():
        theirs = child.usage
        if theirs is None:
            return unknown
        inp, out = theirs.get("input_tokens"), theirs.get("output_tokens")
        if inp is None or out is None:
            return unknown
        usage["input_tokens"] = (usage["input_tokens"] or 0) + inp
        usage["output_tokens"] = (usage["output_tokens"] or 0) + out
    return usage
