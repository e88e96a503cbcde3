"""The ``subagent_start`` and ``subagent_stop`` hooks around a child, and what their recorded
decisions mean for the spawn path (``threads.run.spawn``, ``threads.run.background``).

``subagent_start`` is asked, in the agent's extension order, when a ``spawn_agent`` call that
may spawn (none of the refusals applies) has no child yet. The first decision other than
``allow`` decides: a ``deny`` (or a hook that failed) is appended with the call's
``tool_result{is_error, origin: denied}`` (actor host) in one append and nothing is spawned;
otherwise the decisions are appended with ``agent_spawned``. Either way a recorded decision is
followed, in the same append, by what it decided, so a rerun never asks again.

``subagent_stop`` is asked when a call's child ended, before its end is recorded; the first
``continue`` decides. A ``continue`` sends the child back: its decisions are appended alone, and
the child's next run opens a turn with the reason as its input (``user_input{source:
parent_agent}``). Which reasons a child still has to be given is counted from the logs: the
parent's ``continue`` decisions for the call against the child's ``parent_agent`` inputs after
its prompt (``undelivered``), so a crash anywhere gives the child each reason exactly once.
The number of ``continue`` decisions per call is capped (``MAX_CONTINUATIONS``, counted from
the parent's log); past it, or when the child was cancelled or the parent's turn or thread is,
a ``continue`` is recorded as ``stop`` (reason ``continuation limit`` / ``cancelled``). Any
other round's decisions are appended with the child's ``agent_finished`` and the call's result.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.log.fold import Fold
from threads.log.lines import Draft, Event
from threads.log.vocabulary import data_of
from threads.run.hooks import (
    HookPoint,
    SubagentStartView,
    SubagentStopView,
    ask,
    decision_draft,
)
from threads.run.runtime import Runtime

STOP: HookPoint = "subagent_stop"
MAX_CONTINUATIONS = 3  # how often one call's child may be sent back
LIMIT = "continuation limit"
CANCELLED = "cancelled"


async def start_decisions(
    rt: Runtime, call_id: str, view: SubagentStartView
) -> tuple[list[Draft], str | None]:
    """The ``subagent_start`` decisions to append, and the denied result's text when one of
    them refused (None: the child may be spawned)."""
    drafts: list[Draft] = []
    for extension in rt.spec.extensions:
        if extension.subagent_start is None:
            continue
        outcome = await ask(extension, "subagent_start", extension.subagent_start, view,
                            call_id=call_id)
        drafts.append(outcome.draft)
        if outcome.verdict == "failed":
            return drafts, f"denied: hook_failed: {extension.name}: {outcome.reason}"
        if outcome.verdict == "deny":
            return drafts, f"denied: {outcome.reason}" if outcome.reason else "denied"
    return drafts, None


def continuations(fold: Fold, call_id: str) -> tuple[str, ...]:
    """The reasons the call's child was sent back with, in order (the parent's log)."""
    decisions = (data_of(e, "hook_decision") for e in fold.events if e.type == "hook_decision")
    return tuple(
        d.get("reason", "") for d in decisions
        if d["hook"] == STOP and d.get("call_id") == call_id and d["decision"] == "continue"
    )


def undelivered(child_events: Sequence[Event], reasons: Sequence[str]) -> str | None:
    """The reason the child has not been given yet: its ``parent_agent`` inputs after the
    prompt are the reasons it was given, in order."""
    given = sum(1 for e in child_events
                if e.type == "user_input"
                and data_of(e, "user_input").get("source") == "parent_agent") - 1
    return reasons[given] if 0 <= given < len(reasons) else None


async def stop_decisions(
    rt: Runtime, spawned: Event, status: str, output: str, *, may_continue: bool = True
) -> tuple[list[Draft], str | None]:
    """The ``subagent_stop`` decisions for a child that ended, and the reason to send it back
    with (None: its end is recorded with these decisions). ``may_continue=False``: the parent
    run is stopping its children, so a ``continue`` is recorded as ``stop`` (cancelled)."""
    hooks = [(e, e.subagent_stop) for e in rt.spec.extensions if e.subagent_stop is not None]
    if not hooks:
        return [], None
    spawn = data_of(spawned, "agent_spawned")
    call_id = spawn["call_id"]
    sent = len(continuations(rt.fold, call_id))
    view = SubagentStopView(call_id, spawn["agent_name"], spawn["child_thread_id"], status,
                            output, sent)
    drafts: list[Draft] = []
    for extension, hook in hooks:
        outcome = await ask(extension, STOP, hook, view, call_id=call_id)
        if outcome.verdict == "continue" and not (outcome.reason or "").strip():
            drafts.append(decision_draft(
                extension.name, STOP, "failed", call_id,
                "continue needs a reason: it is the child's next input",
            ))
            continue
        if outcome.verdict != "continue":
            drafts.append(outcome.draft)
            continue
        refused = _refused(rt, status, sent) if may_continue else CANCELLED
        if refused is not None:
            drafts.append(decision_draft(extension.name, STOP, "stop", call_id, refused))
            return drafts, None
        drafts.append(outcome.draft)
        return drafts, outcome.reason
    return drafts, None


def _refused(rt: Runtime, status: str, sent: int) -> str | None:
    """Why a ``continue`` is recorded as ``stop``; None when the child may go back to work."""
    turn = rt.fold.turn
    if status == "cancelled" or rt.fold.thread_cancelled or rt.cancel.wanted or (
        turn is not None and turn.cancel_event is not None
    ):
        return CANCELLED
    if sent >= MAX_CONTINUATIONS:
        return LIMIT
    return None
