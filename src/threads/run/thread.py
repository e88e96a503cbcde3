"""The thread handle: inspect and control a thread from any process, with only the store and
its id (no agent needed).

Reads (``timeline``, ``state``, ``usage``, ``cost``, ``pending_approvals``) reduce the log;
``replay`` re-renders every recorded model request and compares it with what was recorded.
Controls (``approve``, ``deny``, ``resolve_parked``, ``answer``, ``cancel``, ``compact``,
``change_settings``, ``change_mode``) append one event with the principal as actor, under the
lease for that one append. Authority is one rule
(``threads.run.authority``): the agent's approvers (when the handle knows the agent), else the
principal who started the thread; another tenant never; the handle's ``approvers`` only narrow.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, cast

from threads.errors import ConfigError, LogError, NotFoundError, ThreadsError
from threads.log.collector import collector_paused
from threads.log.fold import Call, Fold
from threads.log.fold.cache_breaks import CacheBreak
from threads.log.fold.questions import match_answer
from threads.log.fold.saved import RestoredFold
from threads.log.json_types import JsonObject
from threads.log.lines import Draft, Event
from threads.log.replay import Replayed
from threads.log.vocabulary import (
    ApprovalBinding,
    CancelRequestedData,
    CompactionRequestedData,
    InjectedData,
    ModeChangedData,
    ModelRef,
    ModelSettings,
    PermissionMode,
    PermissionRuleAddedData,
    draft,
)
from threads.principal import Principal
from threads.run.authority import refusal
from threads.run.config import AgentSpec
from threads.run.control import control_writer
from threads.run.drafts import resumed_data
from threads.run.fork import Restore, fork_at
from threads.run.holders import earlier_holder, gone_holders, iso
from threads.run.park_info import detail
from threads.run.permissions import check_rule, rule_matches
from threads.run.questions import answer_draft
from threads.run.replay import replay_branch
from threads.run.tree_cancel import (
    barrier_in_force,
    cancel_descendants,
    unreported_uncovered,
)
from threads.run.views import (
    Child,
    ForkPoint,
    ThreadCost,
    ThreadState,
    ThreadUsage,
    children_of,
    cost_of,
    fork_points_of,
    state_of,
    usage_of,
)
from threads.run.waiting import PendingApproval, asked_by, effect_parks, pending_approvals
from threads.sandbox.protocol import Sandbox
from threads.store.capabilities import controls_of
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Store
from threads.tools.tool import DEFAULT_SETTLE_MS

Resolution = Literal["assume_done", "assume_not_done"]


class ControlError(ThreadsError):
    """A control action was refused (``not_parked``, ``forbidden``, ``approval_mismatch``,
    ``approval_expired``, ``approval_duplicate``, ``branch_busy``, ...)."""


@dataclass(frozen=True, slots=True)
class ParkedEffect:
    """An effect whose outcome is unknown, waiting for a person (``resolve_parked``)."""

    effect_key: str
    call_id: str
    tool: str
    attempts: int
    detail: str  # what to know before resolving it (see ``threads.run.park_info``)
    input: JsonObject  # the call's arguments, as the model gave them


def folded_at_head(fold: Fold, branch: BranchInfo) -> bool:
    """Whether ``fold`` is a fold of ``branch`` that ends at its head: a chain ending at that
    hash holds exactly the events it was folded from, so the fold can stand for a new read."""
    header = fold.header_
    return header is not None and header.branch_id == branch.branch_id and (
        (fold.last_seq, fold.last_hash) == (branch.head_seq, branch.head_hash)
    )


class Thread:
    """A handle to one thread: read its log and act on it from any process, with only the
    store and the thread's id. Get one from a run's result (``result.thread``) or with
    ``open_thread(store, thread_id)``. Reads reduce the log; each control appends one event
    with the principal as its actor, after the authority check (``forbidden`` otherwise)."""

    def __init__(
        self,
        store: Store,
        thread_id: str,
        *,
        principal: Principal | None = None,
        approvers: Sequence[Principal] | None = None,
        agent: AgentSpec | None = None,
    ) -> None:
        self.store = store
        self.id = thread_id
        self.principal = principal
        self.approvers = tuple(approvers) if approvers is not None else None
        self.agent = agent
        self._folded: tuple[str, Fold] | None = None  # the branch state it was read in
        self._viewed: tuple[str, Fold] | None = None  # the same, opened from a snapshot

    def __repr__(self) -> str:
        return f"Thread({self.id!r})"

    async def _branch(self) -> BranchInfo:
        branch = await self.store.root_branch(self.id)
        if self.principal is not None and branch.tenant_id != self.principal.tenant:
            raise NotFoundError(f"no thread {self.id} for tenant {self.principal.tenant}")
        return branch

    async def fold(self) -> Fold:
        """The root branch folded. It is read (and its chain checked) again only once its head
        or state moved since this handle last read it: ``open_thread`` then ``state`` read and
        fold the log once."""
        branch = await self._branch()
        now = self.store.clock.now_ms()
        if self._folded is not None and self._folded[0] == branch.state:
            fold = self._folded[1]
            if folded_at_head(fold, branch):
                fold.now_ms = now  # which snapshots are still fork points is judged now
                return fold
        chain = await self.store.read_chain(branch.branch_id)
        fold = chain.fold(now)
        self._folded = (chain.branch.state, fold)
        return fold

    async def _view(self) -> Fold:
        """The root branch's state for the reads that need no events of it (state, usage,
        cost, fork points): a fold this handle holds at the head, else one opened from the
        branch's fold snapshot and the lines after it (``threads.store.fold_open``)."""
        branch = await self._branch()
        now = self.store.clock.now_ms()
        for kept in (self._folded, self._viewed):
            if kept is not None and kept[0] == branch.state and folded_at_head(kept[1], branch):
                kept[1].now_ms = now  # which snapshots are still fork points is judged now
                return kept[1]
        fold = await open_fold(self.store, branch.branch_id, now)
        if isinstance(fold, RestoredFold):
            self._viewed = (branch.state, fold)
        else:  # the whole log was folded: it serves every read
            self._folded = (branch.state, fold)
        return fold

    async def timeline(self) -> list[Event]:
        """The root branch's events, oldest first."""
        return list((await self.fold()).events)

    async def cache_breaks(self) -> list[CacheBreak]:
        """Which turn requests broke the provider's prompt cache, and the likely cause
        (``compacted``, ``context_edited``, ``settings_changed``, ``tools_changed``,
        ``ttl_expired`` or ``unknown``), oldest first. A thread that pins no context policy
        is judged by the default cache TTL (5 minutes)."""
        return [CacheBreak(**entry) for entry in (await self.fold()).cache.breaks]

    async def state(self) -> ThreadState:
        """The reduced state: status, turns, pending calls, effects, parks, fork points."""
        fold = await self._view()
        with collector_paused():  # a long transcript is thousands of new values at once
            return state_of(fold)

    async def branches(self) -> list[BranchInfo]:
        """The thread's branches: the root and every fork."""
        await self._branch()
        return await self.store.list_branches(self.id)

    async def fork_points(self) -> list[ForkPoint]:
        """Quiescent, unexpired snapshots: where ``fork`` may start a child branch."""
        return list(fork_points_of(await self._view()))

    async def fork(
        self,
        at_event_id: str,
        restore: Restore | Sandbox,
        *,
        new_branch_id: str | None = None,
        knowledge_policy: Literal["pinned", "current"] = "pinned",
    ) -> str:
        """Fork at a snapshot (see ``threads.run.fork``); returns the child branch's id."""
        return await fork_at(
            self.store,
            await self._branch(),
            at_event_id,
            restore,
            new_branch_id=new_branch_id,
            knowledge_policy=knowledge_policy,
        )

    async def children(self) -> tuple[Child, ...]:
        """The subagent threads this thread spawned, in spawn order, each with its status."""
        return children_of(await self._view())

    async def usage(self) -> ThreadUsage:
        """Tokens, model requests and turns, read back from the log."""
        return usage_of(await self._view())

    async def cost(self) -> ThreadCost | None:
        """Spend read back from the log; None when the thread has no currency (no model of
        its policy has a price). Raises ``ThreadsError("cost_overflow")`` past 2^53-1."""
        return cost_of(await self._view())

    async def replay(self) -> Replayed:
        """Re-render every recorded model request from the log and compare it byte for byte
        with what was recorded (``request_ref``, ``declared_prefix``), without calling a model.
        ``Replayed.mismatch`` is the first request that differs (``request_hash_mismatch``,
        ``prefix_changed``) or an artifact rendering needs (``artifact_missing``, ...)."""
        return await replay_branch(self.store, (await self._branch()).branch_id)

    async def export(
        self, path: str | os.PathLike[str] | None = None, *, bundle: bool = False
    ) -> bytes:
        """The root branch's export (JSONL + head line); ``bundle=True`` makes it a bundle
        carrying every artifact the branch references. Written to ``path`` when given."""
        # Imported here: export pulls in the JSON Schema validator, which no run needs.
        from threads.store.transfer import export_branch, export_bundle

        branch_id = (await self._branch()).branch_id
        data = await (export_bundle if bundle else export_branch)(self.store, branch_id)
        if path is not None:
            await asyncio.to_thread(Path(path).write_bytes, data)
        return data

    async def pending_approvals(self) -> list[PendingApproval]:
        """The calls waiting for an approver, with what a decision needs to know."""
        return pending_approvals(await self.fold())

    async def parked_effects(self) -> list[ParkedEffect]:
        """The effects parked for a person, each with what is known about it."""
        fold = await self.fold()
        now = self.store.clock.now_ms()
        tool_named = self.agent.tool_named if self.agent is not None else _no_tool
        gone = await gone_holders(self.store, (await self._branch()).branch_id)
        return [
            ParkedEffect(f.effect_key, f.call_id, f.tool, f.attempts, detail(f, now), f.input)
            for f in effect_parks(fold, tool_named, gone)
        ]

    # ---- controls -----------------------------------------------------------------------

    def _authorize(self, fold: Fold, principal: Principal, branch: BranchInfo) -> None:
        """Every control's check, before it appends anything (``forbidden``)."""
        why = refusal(
            fold,
            principal,
            tenant=branch.tenant_id,
            agent_approvers=self.agent.approvers if self.agent is not None else None,
            narrowed_to=self.approvers,
        )
        if why is not None:
            raise ControlError("forbidden", f"{why}; nothing was recorded")

    async def resolve_parked(
        self,
        effect_key: str,
        decision: Resolution,
        principal: Principal,
    ) -> None:
        """Settle a parked effect: ``assume_done`` (it happened: continue without sending it) or
        ``assume_not_done`` (it did not: the next run re-sends it with the same key, and the log
        records that a person accepted the risk of a duplicate). Run the thread again after."""
        if decision not in ("assume_done", "assume_not_done"):
            raise ControlError("invalid_argument", "decision is 'assume_done' or 'assume_not_done'")
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            self._authorize(fold, principal, branch)
            address = fold.parks.get(("effect", effect_key))
            call = next((c for c in fold.calls.values() if c.effect_key == effect_key), None)
            if address is None or call is None:
                raise ControlError("not_parked", f"no effect {effect_key} is parked on this thread")
            if decision == "assume_not_done":
                self._refuse_while_an_earlier_holder_may_send(fold, call, writer.gone_epochs())
            actor = principal.actor("approver")
            await writer.append(
                [
                    draft(
                        "effect_resolved",
                        {"by": "human", "call_id": call.call_id, "outcome": decision},
                        actor,
                    ),
                    draft("resumed", resumed_data(fold, address), actor),
                ]
            )

    def _refuse_while_an_earlier_holder_may_send(
        self, fold: Fold, call: Call, gone: frozenset[int]
    ) -> None:
        """``assume_not_done`` re-sends: refused (``holder_may_be_running``) while a holder that
        lost the thread may still deliver the send it had in flight (``threads.run.holders``);
        a holder proven dead (its epoch in ``gone``) sends nothing."""
        tool = self.agent.tool_named(call.name) if self.agent is not None else None
        settle_ms = tool.settle_ms if tool is not None else DEFAULT_SETTLE_MS
        holder = earlier_holder(fold, call, settle_ms, gone=gone)
        if holder is None or not holder.may_send(self.store.clock.now_ms()):
            return
        raise ControlError(
            "holder_may_be_running",
            f"{holder.describe()} until {iso(holder.until)}: a request it already sent may still"
            " reach the provider, so assume_not_done could apply the effect twice. Check the"
            f" provider again after {iso(holder.until)} and resolve then (assume_done is"
            " allowed now); nothing was recorded",
        )

    async def approve(
        self,
        challenge_id: str,
        principal: Principal,
        remember_rule: str | None = None,
        *,
        args_hash: str | None = None,
    ) -> None:
        """Grant one pending call. ``args_hash``: the hash the approver was shown; a grant for
        other arguments is refused (``approval_mismatch``). ``remember_rule`` (e.g.
        ``"write_file(path:src/*)"``, covering this call) also allows later matching calls on
        this thread (``permission_rule_added``); deny rules and a run's ceiling still win."""
        if remember_rule is not None:
            _check_remember_rule(remember_rule)
        await self._decide(
            challenge_id,
            principal,
            granted=True,
            reason=None,
            args_hash=args_hash,
            remember_rule=remember_rule,
        )

    async def deny(
        self, challenge_id: str, principal: Principal, reason: str | None = None
    ) -> None:
        """Deny one pending call; the model is shown ``reason``. Run the thread again after."""
        await self._decide(challenge_id, principal, granted=False, reason=reason)

    async def _decide(
        self,
        challenge_id: str,
        principal: Principal,
        *,
        granted: bool,
        reason: str | None,
        args_hash: str | None = None,
        remember_rule: str | None = None,
    ) -> None:
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            self._authorize(fold, principal, branch)
            call = fold.approvals.get(challenge_id)
            if call is None or call.approval is None:
                raise ControlError("not_pending", f"no approval {challenge_id} on this thread")
            if call.approval.challenge_id != challenge_id:
                raise ControlError(
                    "approval_duplicate",
                    "this challenge was replaced by a new one; decide the one pending now",
                )
            _check_open(call, args_hash, self.store.clock.now_ms())
            approval = call.approval
            data: ApprovalBinding = {
                "args_hash": approval.args_hash,
                "call_id": call.call_id,
                "challenge_id": challenge_id,
            }
            if reason is not None:
                data["reason"] = reason
            actor = principal.actor("approver")
            decided = (draft("approval_granted", data, actor) if granted
                       else draft("approval_denied", data, actor))
            items = [decided]
            if remember_rule is not None:
                _check_rule_covers(remember_rule, call)
                rule: PermissionRuleAddedData = {
                    "challenge_id": challenge_id, "decision": "allow", "rule": remember_rule,
                }
                items.append(draft("permission_rule_added", rule, actor))
            address = fold.parks.get(("approval", challenge_id))
            if address is not None:
                items.append(draft("resumed", resumed_data(fold, address), actor))
            await writer.append(items)

    async def answer(
        self, call_id: str, answer: str | list[str], principal: Principal
    ) -> None:
        """Answer the question an ``ask_user`` call parked the thread on: one append, the
        call's ``tool_result{origin: answered}``. Only the principal whose input opened the turn
        may answer (``forbidden``); no open question is ``not_parked``; an answer the question
        does not take (not one of its options, several without ``multi_select``) is
        ``invalid_answer``. Run the thread again to continue."""
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            call = fold.calls.get(call_id)
            if ("input", call_id) not in fold.parks or call is None:
                raise ControlError("not_parked", f"no question {call_id} is waiting for an answer")
            asker = asked_by(fold, call.seq)
            if branch.tenant_id != principal.tenant or asker != principal:
                raise ControlError(
                    "forbidden", "only the principal who opened this turn may answer its"
                    " question; nothing was recorded",
                )
            try:
                text = match_answer(call.input, answer)
            except ValueError as exc:
                raise ControlError("invalid_answer", f"{exc}; nothing was recorded") from None
            actor = principal.actor()
            await writer.append([answer_draft(call_id, text, actor)])

    async def cancel(self, principal: Principal, reason: str | None = None) -> Event:
        """Record a durable cancel barrier; the next run of the thread carries it out. Every
        unfinished subagent thread below it is barred too (``threads.run.tree_cancel``).
        Returns the barrier in force: the ``cancel_requested`` appended now, or the one a
        cancel recorded before (then nothing new is appended: a second cancel is answered
        as the first was).

        With a turn open the barrier is the turn's (``scope: turn``). With none, a thread
        whose subagents have not all reported (a background child still running, or parked)
        gets ``scope: thread``: no ``woken`` follows for them, and the next run records each
        one's (cancelled) end. With neither, and no cancel as the thread's latest word, there
        is nothing to cancel (``not_pending``)."""
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            self._authorize(fold, principal, branch)
            scope = cancel_scope(fold)
            if isinstance(scope, Event):
                barrier = scope
            else:
                data: CancelRequestedData = {"scope": scope}
                if reason:
                    data["reason"] = reason
                [barrier] = await writer.append(
                    [draft("cancel_requested", data, principal.actor())]
                )
                fold = writer.fold
        await cancel_descendants(self.store, fold, principal.to_wire())
        return barrier

    async def change_settings(
        self,
        principal: Principal,
        *,
        provider: str,
        model: str,
        model_params: JsonObject | None = None,
        reasoning_carryover: Literal["keep", "omit_prior"] = "keep",
        branch_id: str | None = None,
    ) -> Event:
        """Move the thread's next model requests to another model the pinned policy lists, or
        to other ``model_params`` (None keeps those in force): one ``settings_changed``. A model
        the policy does not list, or a change while a model request awaits its answer, is
        ``invalid_transition``; a value the log can't hold is ``invalid_argument``. It holds
        from the next run on (nothing is resumed). ``branch_id``: a fork of this thread
        instead of its root. Returns the appended event."""
        wanted: ModelRef = {"name": model, "provider": provider}

        def change(fold: Fold) -> Draft:
            listed = fold.policy.get("models")
            names = [{"provider": m["provider"], "name": m["name"]} for m in listed or []]
            if listed is not None and wanted not in names:
                raise ControlError(
                    "invalid_transition",
                    f"this thread's policy lists the models {names}; a settings change names"
                    " one of them (start a new thread for another model); nothing was recorded",
                )
            current = fold.settings
            settings: ModelSettings = {
                "adapter": current["adapter"],
                "model": wanted,
                "model_params": current["model_params"] if model_params is None else model_params,
                "reasoning_carryover": reasoning_carryover,
            }
            return draft("settings_changed", {"reason": "user", "settings": settings},
                         principal.actor())

        return await self._change(principal, branch_id, change)

    async def change_mode(
        self, principal: Principal, mode: PermissionMode, *, branch_id: str | None = None
    ) -> Event:
        """Move the thread's permission mode (``default``, ``accept_edits``, ``plan``,
        ``dont_ask``, ``bypass``): one ``mode_changed``; later calls are decided under it.
        ``bypass`` needs the agent's ``allow_bypass`` (else ``invalid_transition``). Returns
        the appended event."""

        def change(fold: Fold) -> Draft:
            data: ModeChangedData = {"from": cast(PermissionMode, fold.mode), "to": mode}
            return draft("mode_changed", data, principal.actor())

        return await self._change(principal, branch_id, change)

    async def _change(
        self, principal: Principal, branch_id: str | None, change: Callable[[Fold], Draft]
    ) -> Event:
        """A settings or mode change: authorized as a decision is (a mode change can skip
        every approval), built from the fold read under the lease, refused as the log's rules
        refuse it."""
        root = await self._branch()
        branch = root if branch_id is None else await self.store.get_branch(branch_id)
        if branch.thread_id != root.thread_id:
            raise NotFoundError(f"no branch {branch_id} in thread {self.id}")
        async with control_writer(self.store, branch.branch_id) as writer:
            self._authorize(writer.fold, principal, root)
            try:
                [event] = await writer.append([change(writer.fold)])
            except LogError as error:
                if error.code == "invalid_transition":
                    raise ControlError("invalid_transition", error.message) from None
                raise _unwritable(error.code) from None
            except ValueError:  # no JSON form at all (NaN, Infinity)
                raise _unwritable("not JSON") from None
            return event

    async def compact(self, principal: Principal, *, instructions: str | None = None) -> str:
        """Ask for a compaction of the conversation so far: one append,
        ``compaction_requested``; the next run of the thread summarizes before anything else
        (``instructions`` join the summarizer's ask). The thread must be idle and have had
        input: else ``invalid_transition``, as when one is requested already; empty
        ``instructions`` are ``invalid_request``. Returns the request's event id."""
        if instructions is not None and not instructions.strip():
            raise ControlError("invalid_request", "instructions, when given, must not be empty")
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            self._authorize(fold, principal, branch)
            why = compaction_refusal(fold)
            if why is not None:
                raise ControlError("invalid_transition", f"{why}; nothing was recorded")
            data: CompactionRequestedData = (
                {"instructions": instructions} if instructions is not None else {}
            )
            actor = principal.actor()
            [event] = await writer.append([draft("compaction_requested", data, actor)])
            return event.event_id

    async def set_output_style(self, name: str, principal: Principal) -> str:
        """Switch the thread to the agent's output style ``name`` (``agent(output_styles=...)``):
        one append, ``injected{source: output_style}``, that later requests show as a trusted
        context line; it stays in force through compactions. The thread must be idle
        (``invalid_transition``); an unknown name is ``not_found``. Returns the event id."""
        branch = await self._branch()
        async with control_writer(self.store, branch.branch_id) as writer:
            fold = writer.fold
            self._authorize(fold, principal, branch)
            styles = fold.policy.get("output_styles") or {}
            text = styles.get(name)
            if text is None:
                known = ", ".join(sorted(styles)) or "none"
                raise ControlError("not_found", f"no output style {name!r}; the agent defines:"
                                   f" {known}")
            if fold.turn is not None:
                raise ControlError("invalid_transition", "a turn is open (running, or parked on"
                                   " an approval, question or effect); set the style once it"
                                   " ends; nothing was recorded")
            data: InjectedData = {"origin": {"id": name}, "source": "output_style",
                                  "text": text, "trust": "trusted_instruction"}
            [event] = await writer.append([draft("injected", data, principal.actor())])
            return event.event_id

    async def queue_cancel(self, principal: Principal) -> str:
        """For a thread another process is running (``cancel`` was ``branch_busy``): check the
        authority as ``cancel`` does, then queue the cancel for that process as a control item
        (``threads.store.control_items``); it records ``cancel_requested`` at its next step,
        or while it waits for subagents that have not reported: with no turn open as
        ``cancel`` on an idle thread (``scope: thread``, every unfinished child barred), with
        its turn parked as the turn's barrier, which it then carries out at once (the parks
        end, the turn ends cancelled). ``not_pending`` as for ``cancel``; a cancel already in
        force is queued all the same (it records nothing). Returns the item key (the waiting
        item's, when one is queued already)."""
        branch = await self._branch()
        fold = await self.fold()
        self._authorize(fold, principal, branch)
        cancel_scope(fold)  # ``not_pending``: no turn open and every child reported
        controls = controls_of(self.store)
        if controls is None:
            raise ControlError(
                "capability_missing", "this store keeps no control items; cancel once the run"
                " holding the thread has stopped",
            )
        return await controls.queue_control(
            tenant_id=branch.tenant_id, thread_id=self.id, principal=principal.to_wire(),
            command="cancel",
        )


def cancel_scope(fold: Fold) -> Literal["turn", "thread"] | Event:
    """The scope of the barrier a cancel records now (``turn`` on an open turn; ``thread``
    when no turn is open but a child has not reported since the last thread cancel), or the
    barrier in force that a cancel would only repeat (``barrier_in_force``).
    ``not_pending`` when nothing is open, no child is unreported and no cancel is in force."""
    in_force = barrier_in_force(fold)
    if in_force is not None:
        return in_force
    if fold.turn is not None:
        return "turn"
    if unreported_uncovered(fold):
        return "thread"
    raise ControlError(
        "not_pending", "no turn is open, no subagent of this thread is unreported and no"
        " cancel is in force; nothing to cancel"
    )


def compaction_refusal(fold: Fold) -> str | None:
    """Why a compaction may not be requested now (rule 30), or None."""
    if fold.compaction.requested is not None:
        return "a compaction is requested already and not yet done"
    if fold.turn is not None:
        return "a turn is open (running, or parked on an approval, question or effect)"
    if fold.compaction.first_input_seq is None:
        return "the thread has had no input to compact"
    return None


def _unwritable(why: str) -> ControlError:
    """A change whose line the log can't hold, e.g. an integer past 2^53-1."""
    return ControlError(
        "invalid_argument",
        f"this change can't be recorded in the log ({why}): keep integers within ±(2^53-1)"
        " and use plain JSON values; nothing was recorded",
    )


def _no_tool(_name: str) -> None:
    return None


def _check_open(call: Call, args_hash: str | None, now_ms: int) -> None:
    """A challenge can be decided once, before it expires, for the arguments it was made for."""
    approval = call.approval
    assert approval is not None
    if approval.state != "open":
        raise ControlError("approval_duplicate", "this approval was already decided")
    if approval.expires_at <= now_ms:
        raise ControlError("approval_expired", "this approval request expired; it counts as denied")
    if call.result is not None:
        raise ControlError("approval_duplicate", "this call was already settled")
    if args_hash is not None and args_hash != approval.args_hash:
        raise ControlError(
            "approval_mismatch",
            f"the challenge is for arguments with hash {approval.args_hash}, not {args_hash}",
        )


def _check_remember_rule(rule: str) -> None:
    try:
        check_rule(rule)
    except ConfigError as exc:
        raise ControlError("permission_rule_invalid", exc.message) from exc


def _check_rule_covers(rule: str, call: Call) -> None:
    if not rule_matches(rule, call.name, call.input):
        raise ControlError(
            "invalid_argument",
            f"remember_rule {rule!r} does not cover the call being approved ({call.name});"
            " a remembered rule must match the call it answers",
        )


async def open_thread(
    store: Store,
    thread_id: str,
    *,
    principal: Principal | None = None,
    approvers: Sequence[Principal] | None = None,
    agent: AgentSpec | None = None,
) -> Thread:
    """A handle on ``thread_id``; raises ``NotFoundError`` (unknown, or another tenant's) or
    ``log_corrupt`` when its stored bytes no longer chain. A long thread is opened from its
    fold snapshot: only the lines after it are read and checked (``threads verify`` checks
    them all).

    ``agent``: the agent that runs this thread; its approvers then decide for it (without it,
    the principal who started the thread does). ``approvers`` narrows that set: only these
    principals, among those the rule allows, may decide through this handle."""
    thread = Thread(store, thread_id, principal=principal, approvers=approvers, agent=agent)
    await thread._view()
    return thread
