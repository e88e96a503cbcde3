"""What a continuing run folds before its first step: the branch's fold row, the lines from the
row's request checkpoint on and the tail after the row (``threads.store.fold_open.open_window``)
when nothing the run may do looks at an older line, else the whole chain, read, checked and
folded.

The run's readers of ``fold.events`` were audited for a fold whose ``events`` start at the
checkpoint's request (``RestoredFold.start``). A run is served from the row only when both sides
hold, and every condition below is one under which some reader would need an older line:

- the run (``window_serves``): it is no subagent's continuation (its reasons are counted over
  every input), it runs under no budget and no ancestor's (spend, ``thread_started``'s time),
  in no sandbox (recovery releases the snapshots the log does not record), and the agent has
  no context policy, handoffs, subagents or extensions (compaction's cut search and summary,
  the transcript a handoff forwards, spawns, the hooks' decisions over earlier inputs);
- the state restored (``quiet``): no parent (a subagent's thread runs under its parent's
  budgets, a handoff target under its source's, read with its fold), no turn open, or one
  whose input is the last line (the host writes a turn's input before its run), and one or
  the other as the run needs (a run with no input and no turn answers with the last turn's
  ending, which may be older); one segment (no fork), no dropped torn tail to record, not
  inspection-only or cancelled, no model request or call open, no park, no approval whose
  call has no result yet (one granted, denied or expired and closed is history: no reader on
  the run's path looks it up again without a park), no child, handoff, compaction asked or
  answered, no summarizer reply, no context policy pinned, and no minted call id (an adapter
  is sent the provider's id behind every one).

In such a run the readers scan the turn it opens (its input and after), which ``events`` holds.
The call ids already used start as every call the state holds (each ``tool_use`` part of a
reply is recorded with its ``tool_call``, in one append). Its next request is rendered on from
the checkpoint; when an event after it rewrites an earlier line (a ``settings_changed``, say)
the writer's ``read_whole`` makes the run's fold the whole chain's, read and checked, ending at
the same head, in place, before anything is rendered from every line (and so it does for an
event whose fold rule needs an older line, should one come: ``SnapshotShortError``). What
scans ``fold.events`` incrementally (``RenderMemo``, ``CallIdMemo``) remembers which list it
scanned and starts over on another.

What the row's open does not check that a full read does: the lines before the checkpoint's
request. A damaged old line is found by ``threads verify`` and export, not by every run.
"""

from __future__ import annotations

from dataclasses import dataclass

from threads.log.fold import Fold
from threads.log.fold.saved import RestoredFold
from threads.log.render_resume import Resumed
from threads.models.normalize import minted_sha256
from threads.run.config import AgentSpec
from threads.run.context_policy import pinned_context
from threads.run.runtime import Runtime
from threads.run.thread import folded_at_head
from threads.sandbox.protocol import Sandbox
from threads.store.fold_open import open_window
from threads.store.protocol import BranchInfo, Store


@dataclass(frozen=True, slots=True)
class Opened:
    """The branch as the run found it, its fold, and (opened from the row) the renderer of the
    next request going on from the row's checkpoint."""

    branch: BranchInfo
    fold: Fold
    resumed: Resumed | None = None


def window_serves(agent: AgentSpec, *, plain: bool) -> bool:
    """Whether a run of ``agent`` may be opened from the row (see the module docstring).
    ``plain``: the run has no budget, ancestors, lent sandbox or continuations."""
    return (
        plain and agent.budget is None and not isinstance(agent.sandbox, Sandbox)
        and agent.context is None and not agent.handoffs and not agent.subagents
        and not agent.extensions
    )


def _fresh(fold: RestoredFold) -> bool:
    """An open turn whose input is the chain's last line (the host's or a caller's, written
    before the run), under no run budget and not cancelled: the run starts it."""
    turn = fold.turn
    return turn is not None and turn.input_event.seq == fold.last_seq >= fold.start and (
        turn.budget is None and turn.cancel_event is None and turn.model_requests == 0
    )


def quiet(branch: BranchInfo, fold: RestoredFold, *, has_input: bool) -> bool:
    """Whether nothing in the restored state leads the run to a line before ``fold.start``:
    with an input, no turn open (or a fresh one); without, a fresh one to run (a run with
    neither answers with the last turn's ending, which may be older)."""
    features, compaction = fold.features, fold.compaction
    turn_ok = _fresh(fold) or (has_input and fold.turn is None)
    return (
        turn_ok and branch.dropped_ref is None and fold.thread_started is not None
        and pinned_context(fold.thread_started) is None
        and fold.thread_started.get("parent") is None
        and len(fold.segment_headers) == 1 and not fold.inspection_only
        and not fold.thread_cancelled and fold.open_attempt is None
        and fold.open_calls == 0 and not fold.parks
        and all(call.result is not None for call in fold.approvals.values())
        and not features.children and features.handoff is None
        and compaction.requested is None and compaction.pending_side is None
        and not fold.side_responses
        and not any(minted_sha256(call_id) is not None for call_id in fold.calls)
    )


async def open_run(
    store: Store, branch_id: str, known: Fold | None, *, window: bool, has_input: bool
) -> Opened:
    """The branch as it is now, and its fold: ``known`` when the branch's head is still the
    one it ended at (a chain ending at that hash holds exactly the events it was folded from);
    else, when ``window`` (``window_serves``), from the fold row when it holds and the state is
    ``quiet`` for a run with (``has_input``) or without an input; else a fresh read of the
    chain, its hash chain checked, folded. A fold a caller opened from a snapshot (a host's or
    a worker's ``RestoredFold``) is never taken as it is."""
    now = store.clock.now_ms()
    if known is not None and not isinstance(known, RestoredFold):
        branch = await store.get_branch(branch_id)
        if folded_at_head(known, branch):
            known.now_ms = now  # which snapshots are fork points is judged now
            return Opened(branch, known)
    if window:
        opened = await open_window(store, branch_id, now)
        if opened is not None and quiet(opened.branch, opened.fold, has_input=has_input):
            return Opened(opened.branch, opened.fold, opened.resumed)
    chain = await store.read_chain(branch_id)
    return Opened(chain.branch, chain.fold(now))


def seed_call_ids(rt: Runtime) -> None:
    """A run opened from the row: the call ids already used are every call the state holds
    (the lines before ``start`` are not scanned)."""
    if isinstance(rt.fold, RestoredFold) and rt.fold.partial:
        rt.call_ids.taken.update(rt.fold.calls)
