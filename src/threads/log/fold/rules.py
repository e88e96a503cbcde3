"""The fold's rules, one per core event type, and ``Fold``, which runs them: what each event
changes in the fold's state (``threads.log.fold.state``) and what it must not break (a rule broken
raises ``LogError`` at that event's seq). ``DISPATCH`` is what ``Fold.extend`` runs per type: the
core rule, then the reader rule of the features other writers record
(``threads.log.fold.features``), if any. Invariant: the fold is a pure function of the lines it
was given; nothing here does I/O.
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterable

from threads.errors import LogError
from threads.log.fold.cache_breaks import CAUSES as CACHE_CAUSES
from threads.log.fold.compaction import is_side
from threads.log.fold.cost import MAX_INT
from threads.log.fold.features import HANDLERS as FEATURE_HANDLERS
from threads.log.fold.features import Handler as FeatureHandler
from threads.log.fold.features import check_after_handoff, check_tools_hash
from threads.log.fold.questions import check_answer, check_question_park, check_rejection
from threads.log.fold.records import Approval, Call, ModelAttempt, ParkKind, Response, Turn
from threads.log.fold.state import FoldState
from threads.log.lines import Event, Header
from threads.log.render import denied_input
from threads.log.tool_ext import check_remote_result, check_tools_loaded
from threads.log.vocabulary import ParkAddress, ToolCallData, data_of


def _fail(event: Event, message: str, code: str = "invalid_transition") -> LogError:
    return LogError(code, message, seq=event.seq)


def _said(fold: Fold, role: str, event: Event) -> None:
    fold.transcript.append((role, event.event_id))
    fold.transcript_seqs.append(event.seq)


def _on_thread_started(fold: Fold, event: Event) -> None:
    if fold.thread_started is not None:
        raise _fail(event, "thread_started may appear only once on a chain")
    data = data_of(event, "thread_started")
    fold.thread_started = data
    fold.tools = list(data.get("tools", []))


def _on_tools_changed(fold: Fold, event: Event) -> None:
    check_tools_hash(event)
    fold.tools = list(data_of(event, "tools_changed")["tools"])
    names = {spec["name"] for spec in fold.tools}
    for call in fold.calls.values():
        if call.result is None and call.name not in names:
            call.removed = True


def _on_tools_loaded(fold: Fold, event: Event) -> None:
    fold._call(event, data_of(event, "tools_loaded")["call_id"])
    check_tools_loaded(event, fold.tool_spec, fold.loaded_tools)


def _on_user_input(fold: Fold, event: Event) -> None:
    check_after_handoff(fold.features, event)
    if fold.turn is not None:
        raise _fail(event, "user_input while a turn is open; input inside a turn must be a steer")
    fold.turn = Turn(event, data_of(event, "user_input").get("budget"))
    fold.compaction.on_user_input(event)
    fold.wakes.opened(event)
    _said(fold, "user", event)


def _on_steer(fold: Fold, event: Event) -> None:
    check_after_handoff(fold.features, event)
    if fold.turn is None:
        raise _fail(event, "steer outside an open turn")
    fold.turn.sent = False
    _said(fold, "user", event)


def _on_hook_decision(fold: Fold, event: Event) -> None:
    """An input a ``before_input`` hook denied is no part of the conversation: neither rendered
    nor in the transcript."""
    denied = denied_input(data_of(event, "hook_decision"))
    if denied is not None:
        kept = [i for i, item in enumerate(fold.transcript) if item != ("user", denied)]
        fold.transcript = [fold.transcript[i] for i in kept]
        fold.transcript_seqs = [fold.transcript_seqs[i] for i in kept]  # kept in step with it


def _on_injected(fold: Fold, event: Event) -> None:
    _said(fold, "context", event)


def _on_heartbeat(fold: Fold, event: Event) -> None:
    """A heartbeat lists calls still running: each has its deferred placeholder and no late
    result yet."""
    for call_id in data_of(event, "heartbeat")["running_call_ids"]:
        call = fold.calls.get(call_id)
        if call is None or not _deferred(call) or call.late_result is not None:
            raise _fail(event, f"heartbeat lists call {call_id!r}, which is not running")
    _said(fold, "context", event)


def _on_woken(fold: Fold, event: Event) -> None:
    """Opens a turn for background results that arrived while no turn was open."""
    if fold.turn is not None:
        raise _fail(event, "woken while a turn is open")
    barred = "cancelled" if fold.thread_cancelled else None
    if fold.features.handoff is not None:
        barred = "handed off"
    fold.wakes.check_woken(event, fold.events, fold.event_by_id, barred)
    fold.turn = Turn(input_event=event, budget=None)


def _on_agent_spawned(fold: Fold, event: Event) -> None:
    fold.wakes.spawned(event, fold.turn.input_event if fold.turn is not None else None)


def _on_compacted(fold: Fold, event: Event) -> None:
    """The summary stands in the transcript in place of the items of its range."""
    data = data_of(event, "compacted")
    fold.compaction.on_compacted(fold, event, data)
    start, end = data["from_seq"], data["to_seq"]
    seqs = fold.transcript_seqs
    at = bisect_left(seqs, start)
    stop = bisect_right(seqs, end)
    fold.transcript[at:stop] = [("summary", event.event_id)]
    seqs[at:stop] = [start]


def _on_compaction_requested(fold: Fold, event: Event) -> None:
    fold.compaction.on_requested(fold, event)


def _on_compaction_failed(fold: Fold, event: Event) -> None:
    fold.compaction.on_failed(fold, event)


def _on_model_request(fold: Fold, event: Event) -> None:
    check_after_handoff(fold.features, event)
    turn = fold.turn
    data = data_of(event, "model_request")
    side = is_side(data)
    if side:
        fold.compaction.on_side_request(fold, event, data)
    elif turn is None:
        raise _fail(event, "model_request outside a turn")
    if fold.thread_started is None:
        raise _fail(event, "model_request before thread_started")
    if turn is not None and turn.budget_exceeded:
        raise _fail(event, "model_request after budget_exceeded in the same run")
    if fold.open_attempt is not None:
        raise _fail(event, "model_request while another request is still open")
    number = data["attempt"]
    if number != 1:
        _check_attempt(fold, event, number)
    if data["declared_prefix"] != fold.expected_prefix():
        raise _fail(
            event, "declared_prefix is not line 0 of its settings epoch (C7: the prefix is "
            "byte-equal on every request of an epoch)", "prefix_changed",
        )
    attempt = ModelAttempt(event, number, fold.features.settings or fold.thread_started)
    fold.attempts[event.event_id] = attempt
    fold.open_attempt = attempt
    fold.last_attempt = attempt
    fold.model_requests += 1
    if turn is not None:
        turn.model_requests += 1
        # a summarizer's request leaves the turn's input unanswered
        turn.sent = turn.sent or not side


def _check_attempt(fold: Fold, event: Event, number: int) -> None:
    """Attempt ``number`` > 1 re-sends the turn's last request, which was abandoned as attempt
    ``number`` - 1."""
    last = fold.last_attempt
    if last is None or last.outcome in (None, "response") or last.attempt != number - 1:
        raise _fail(event, f"model_request attempt {number} does not follow an abandoned attempt"
                    f" {number - 1}")


def _close_attempt(fold: Fold, event: Event, request_event_id: str, outcome: str) -> ModelAttempt:
    attempt = fold.attempts.get(request_event_id)
    if attempt is None or attempt.outcome is not None:
        raise _fail(event, f"{event.type} names no open model_request")
    attempt.outcome = outcome
    if fold.open_attempt is attempt:
        fold.open_attempt = None
    return attempt


def _on_model_response(fold: Fold, event: Event) -> None:
    data = _response_data(event)
    usage = data["usage"]
    request_event_id = data["request_event_id"]
    attempt = _close_attempt(fold, event, request_event_id, "response")
    attempt.usage = usage
    fold.response_of[request_event_id] = event
    side = fold.compaction.is_side(request_event_id)
    (fold.side_responses if side else fold.responses).append(data)
    inp, out = usage["input_tokens"], usage["output_tokens"]
    if (
        inp is None
        or out is None
        or fold.input_tokens + inp > MAX_INT
        or fold.output_tokens + out > MAX_INT
    ):
        fold.unknown_responses += 1  # adds neither count: unknown is never summed as zero
    else:
        fold.input_tokens += inp
        fold.output_tokens += out
    if not side:  # a summarizer's reply is no assistant turn
        _said(fold, "assistant", event)
        # the request's time from its attempt, which a fold restored from a snapshot keeps
        # while the request's line itself may sit before the snapshot's cut
        fold.cache.on_response(
            usage, request_event_id, attempt.event.time, event.time, fold.thread_started
        )


def _on_model_attempt_abandoned(fold: Fold, event: Event) -> None:
    data = data_of(event, "model_attempt_abandoned")
    attempt = _close_attempt(fold, event, data["request_event_id"], data["provider_outcome"])
    attempt.billing = data.get("billing")


def _on_retry_scheduled(fold: Fold, event: Event) -> None:
    """The wait before resending a model request, or an effect (then ``request_event_id`` names
    the attempt's ``effect_begin``)."""
    data = data_of(event, "retry_scheduled")
    named = data["request_event_id"]
    attempt = fold.attempts.get(named)
    if attempt is not None:
        attempt.retry_not_before = data["not_before"]
        return
    call = next(
        (
            c
            for c in reversed([fold.calls[i] for i in fold.effect_order])
            if c.begin_event is not None and c.begin_event.event_id == named
        ),
        None,
    )
    if call is None:
        raise _fail(event, "retry_scheduled names no model_request or effect_begin")
    call.retry_not_before = data["not_before"]


def _on_tool_call(fold: Fold, event: Event) -> None:
    data = data_of(event, "tool_call")
    call_id = data["call_id"]
    if call_id in fold.calls:
        raise _fail(event, f"call_id {call_id!r} is already used on this chain")
    if fold.turn is None:
        raise _fail(event, "tool_call outside a turn")
    _check_call_part(fold, event, data)
    call = Call(
        call_id=call_id,
        name=data["name"],
        input=data["input"],
        request_event_id=data["request_event_id"],
        branch_id=event.branch_id,
        seq=event.seq,
        spec=fold.tool_spec(data["name"]),
        event_id=event.event_id,
    )
    fold.calls[call_id] = call
    fold.call_order.append(call_id)
    fold.open_calls += 1


def _check_call_part(fold: Fold, event: Event, data: ToolCallData) -> None:
    """A tool_call (``event``, of ``data``) names its model_request, and once that response is
    recorded it must hold a tool_use part with the same id, name and input (a streamed call may
    come first)."""
    if data["request_event_id"] not in fold.attempts:
        raise _fail(event, "tool_call names no model_request on this chain")
    if fold.compaction.is_side(data["request_event_id"]):
        raise _fail(event, "tool_call names a compaction request; a summarizer calls no tool")
    response = fold.response_of.get(data["request_event_id"])
    if response is None:
        return
    for part in _response_data(response)["content"]:
        if part["type"] == "tool_use" and part["call_id"] == data["call_id"]:
            if part["name"] != data["name"] or part["input"] != data["input"]:
                raise _fail(event, "tool_call differs from the tool_use part it records")
            return
    raise _fail(event, f"tool_call {data['call_id']!r} matches no tool_use part of its response")


def _response_data(response: Event) -> Response:
    """A ``model_response``'s data, or a recovered one's."""
    if response.type == "model_response":
        return data_of(response, "model_response")
    return data_of(response, "model_response_recovered")


def _on_permission_decision(fold: Fold, event: Event) -> None:
    data = data_of(event, "permission_decision")
    call = fold._call(event, data["call_id"])
    call.decision = data["decision"]
    call.decision_source = data["source"]
    call.decision_reason = data.get("reason")


def _on_approval_requested(fold: Fold, event: Event) -> None:
    data = data_of(event, "approval_requested")
    call = fold._call(event, data["call_id"])
    if call.decision != "ask":
        raise _fail(event, "approval_requested for a call whose decision is not ask")
    if data["args_hash"] != call.args_hash:
        raise _fail(
            event, "approval_requested args_hash does not match the call", "approval_mismatch"
        )
    call.approval = Approval(data["challenge_id"], data["args_hash"], data["expires_at"])
    fold.approvals[data["challenge_id"]] = call


def _on_approval_decided(fold: Fold, event: Event) -> None:
    data = (
        data_of(event, "approval_granted")
        if event.type == "approval_granted"
        else data_of(event, "approval_denied")
    )
    call = fold.approvals.get(data["challenge_id"])
    if (
        call is None
        or call.approval is None
        or call.call_id != data["call_id"]
        or call.approval.challenge_id != data["challenge_id"]  # superseded by a new challenge
    ):
        raise _fail(event, f"{event.type} names no open approval challenge")
    approval = call.approval
    if approval.state != "open":
        raise _fail(event, "approval was already decided", "approval_duplicate")
    if data["args_hash"] != approval.args_hash:
        raise _fail(event, "approval binds to other arguments than the call", "approval_mismatch")
    approval.state = "granted" if event.type == "approval_granted" else "denied"
    approval.decided_by = event.actor.get("principal")
    approval.reason = data.get("reason")


def _on_permission_rule_added(fold: Fold, event: Event) -> None:
    data = data_of(event, "permission_rule_added")
    if data["challenge_id"] not in fold.approvals:
        raise _fail(event, "permission_rule_added names no approval challenge on this chain")
    fold.thread_rules.append((data["rule"], data["decision"]))


def _on_effect_begin(fold: Fold, event: Event) -> None:
    data = data_of(event, "effect_begin")
    call = fold._call(event, data["call_id"])
    authorized = call.decision == "allow" or (
        call.approval is not None and call.approval.state == "granted"
    )
    if not authorized:
        raise _fail(event, "effect_begin for a call that was not allowed or approved")
    turn = fold.turn
    if turn is not None and turn.cancel_event is not None and call.effect is None:
        raise _fail(event, "effect_begin after the cancel barrier")
    if call.result is not None:
        raise _fail(event, "effect_begin for a call that already has its result")
    if call.effect is not None and call.resolution not in (
        "safe_to_retry",
        "not_sent",
        "assume_not_done",
    ):
        raise _fail(event, "effect_begin again without a resolution that allows another dispatch")
    if data["attempt"] != call.attempt + 1:
        raise _fail(event, f"effect_begin attempt must be {call.attempt + 1}")
    if call.approval is not None:
        call.approval.used = True
    call.attempt = data["attempt"]
    if call.first_begin_time is None:
        call.first_begin_time = event.time
    if call.effect is None:
        fold.effect_order.append(call.call_id)
    call.effect = "begun"
    call.resolution = None
    call.begin_event = event
    call.retry_not_before = None


def _on_effect_commit(fold: Fold, event: Event) -> None:
    data = data_of(event, "effect_commit")
    call = fold._call(event, data["call_id"])
    if call.effect not in ("begun", "unknown"):
        raise _fail(event, "effect_commit without an open effect_begin")
    call.effect = "committed"
    call.result_ref = data["result_ref"]


def _on_effect_unknown(fold: Fold, event: Event) -> None:
    data = data_of(event, "effect_unknown")
    call = fold._call(event, data["call_id"])
    if call.effect != "begun":
        raise _fail(event, "effect_unknown for an effect that is not begun")
    call.effect = "unknown"
    call.unknown_reason = data["reason"]


def _on_effect_resolved(fold: Fold, event: Event) -> None:
    data = data_of(event, "effect_resolved")
    call = fold._call(event, data["call_id"])
    # A resolution the run did not accept (its principal may not decide) leaves the effect
    # parked again: a person may then resolve it anew.
    reopened = call.effect == "resolved" and call.parked
    if call.effect not in ("begun", "unknown") and not reopened:
        raise _fail(event, "effect_resolved for an effect that is not in doubt")
    call.effect = "resolved"
    call.resolution = data["outcome"]
    result_ref = data.get("result_ref")
    if result_ref is not None:
        call.result_ref = result_ref


def _on_tool_result(fold: Fold, event: Event) -> None:
    data = data_of(event, "tool_result")
    call = fold._call(event, data["call_id"])
    if call.result is not None:
        raise _fail(event, f"call {call.call_id!r} already has a result")
    # an ask_user answer satisfies (and closes) the open question the call parked on
    answered = data["origin"] == "answered"
    if answered and fold.parks.pop(("input", call.call_id), None) is None:
        raise _fail(event, "an answer for a call with no open question (parked on input)")
    if answered:
        check_answer(event, call)
    check_remote_result(event, call.spec, call.effect is not None)
    call.result = data
    call.parked = False
    fold.open_calls -= 1
    _said(fold, "tool", event)


def _deferred(call: Call) -> bool:
    return call.result is not None and call.result["origin"] == "deferred"


def _on_tool_result_late(fold: Fold, event: Event) -> None:
    data = data_of(event, "tool_result_late")
    call = fold._call(event, data["call_id"])
    if not _deferred(call):
        raise _fail(event, "tool_result_late for a call whose result is not a deferred placeholder")
    if call.late_result is not None:
        raise _fail(event, f"call {call.call_id!r} already has its late result")
    call.late_result = data
    _said(fold, "tool", event)


def _on_snapshot(fold: Fold, event: Event) -> None:
    data = data_of(event, "snapshot")
    fold.snapshot_revisions[event.seq] = data.get("knowledge_revision")
    quiescent = fold.open_attempt is None and not fold.pending_calls()
    if quiescent:
        fold.snapshots.append((event.seq, event.event_id, data["expires_at"]))


def _on_fork(fold: Fold, event: Event) -> None:
    data = data_of(event, "fork")
    if data["reason"] == "repair":
        fold.inspection_only = True
    elif data["knowledge_policy"] == "pinned":
        # pinned: the child searches as of the fork snapshot's revision; current: the live one
        fold.knowledge_revision = fold.snapshot_revisions.get(event.seq - 1)
    else:
        fold.knowledge_revision = None


def _park_key(address: ParkAddress) -> tuple[ParkKind, str]:
    return (address["kind"], address["id"])


def _on_parked(fold: Fold, event: Event) -> None:
    address = data_of(event, "parked")["address"]
    if address["kind"] == "input":
        check_question_park(event, fold.calls.get(address["id"]))
    fold.parks[_park_key(address)] = address
    if address["kind"] == "effect":
        for call in fold.calls.values():
            if call.effect_key == address["id"]:
                call.parked = True


def _on_answer_rejected(fold: Fold, event: Event) -> None:
    """A reply that answers nothing: the question stays open (rule 49)."""
    data = data_of(event, "answer_rejected")
    check_rejection(event, ("input", data["call_id"]) in fold.parks,
                    fold.event_by_id(data["delivery_event_id"]))


def _on_resumed(fold: Fold, event: Event) -> None:
    address = data_of(event, "resumed")["address"]
    fold.parks.pop(_park_key(address), None)
    if address["kind"] == "effect":
        for call in fold.calls.values():
            if call.effect_key == address["id"]:
                call.parked = False


def _on_cancel_requested(fold: Fold, event: Event) -> None:
    fold.wakes.cancel_requested(event)
    if fold.turn is not None:
        fold.turn.cancel_event = event


def _on_cancelled(fold: Fold, event: Event) -> None:
    for call in fold.calls.values():
        if call.effect in ("begun", "unknown"):
            raise _fail(
                event, "cancelled while an effect is begun or unknown; it must park instead"
            )
    turn = fold.turn
    scope = None
    if turn is not None and turn.cancel_event is not None:
        scope = data_of(turn.cancel_event, "cancel_requested")["scope"]
    if scope in ("thread", "tree"):
        fold.thread_cancelled = True


def _on_turn_completed(fold: Fold, event: Event) -> None:
    if fold.turn is None:
        raise _fail(event, "turn_completed without an open turn")
    if fold.open_attempt is not None:
        raise _fail(event, "turn_completed while a model_request is open")
    fold.wakes.turn_ended(event, fold.turn.input_event)
    fold.turn = None
    fold.turns_completed += 1


def _on_budget_exceeded(fold: Fold, event: Event) -> None:
    if fold.turn is not None:
        fold.turn.budget_exceeded = True


_HANDLERS = {
    "thread_started": _on_thread_started,
    "tools_changed": _on_tools_changed,
    "tools_loaded": _on_tools_loaded,
    "user_input": _on_user_input,
    "steer": _on_steer,
    "injected": _on_injected,
    "hook_decision": _on_hook_decision,
    "heartbeat": _on_heartbeat,
    "woken": _on_woken,
    "agent_spawned": _on_agent_spawned,
    "tool_result_late": _on_tool_result_late,
    "compacted": _on_compacted,
    "compaction_requested": _on_compaction_requested,
    "compaction_failed": _on_compaction_failed,
    "model_request": _on_model_request,
    "model_response": _on_model_response,
    "model_response_recovered": _on_model_response,
    "model_attempt_abandoned": _on_model_attempt_abandoned,
    "retry_scheduled": _on_retry_scheduled,
    "tool_call": _on_tool_call,
    "permission_decision": _on_permission_decision,
    "approval_requested": _on_approval_requested,
    "approval_granted": _on_approval_decided,
    "approval_denied": _on_approval_decided,
    "permission_rule_added": _on_permission_rule_added,
    "effect_begin": _on_effect_begin,
    "effect_commit": _on_effect_commit,
    "effect_unknown": _on_effect_unknown,
    "effect_resolved": _on_effect_resolved,
    "tool_result": _on_tool_result,
    "snapshot": _on_snapshot,
    "fork": _on_fork,
    "parked": _on_parked,
    "resumed": _on_resumed,
    "answer_rejected": _on_answer_rejected,
    "cancel_requested": _on_cancel_requested,
    "cancelled": _on_cancelled,
    "turn_completed": _on_turn_completed,
    "budget_exceeded": _on_budget_exceeded,
}


_Rule = Callable[["Fold", Event], None]


def _and_feature(core: _Rule | None, feature: FeatureHandler) -> _Rule:
    def both(fold: Fold, event: Event) -> None:
        if core is not None:
            core(fold, event)
        feature(fold.features, fold, event)

    return both


def _and_cache_cause(core: _Rule | None) -> _Rule:
    def both(fold: Fold, event: Event) -> None:
        if core is not None:
            core(fold, event)
        fold.cache.on_cause(event.type)  # type: ignore[arg-type]  # one of CACHE_CAUSES

    return both


# What ``extend`` runs per type, looked up once per event: the rule above, then the feature rule
# of that type (``threads.log.fold.features``), if any, then (for what may break a provider's
# prompt cache) the ``cache_breaks`` projection's note of it.
_RULES: dict[str, _Rule] = {
    **_HANDLERS,
    **{
        type_: _and_feature(_HANDLERS.get(type_), feature)
        for type_, feature in FEATURE_HANDLERS.items()
    },
}
DISPATCH: dict[str, _Rule] = {
    **_RULES, **{type_: _and_cache_cause(_RULES.get(type_)) for type_ in CACHE_CAUSES},
}


class Fold(FoldState):
    """Incremental reducer: feed it a chain's headers and events in order."""

    def header(self, header: Header) -> None:
        if self.root_header is None:
            self.root_header = header
        self.header_ = header
        self.segment_headers.append(header)
        self.last_hash = header.hash

    def apply(self, event: Event) -> None:
        self.extend((event,))

    def extend(self, events: Iterable[Event]) -> None:
        """``apply`` each event in order: one loop for a whole read, with what it touches per
        event held in locals (a long branch makes this the fold's own cost)."""
        dispatch = DISPATCH.get
        append = self.events.append
        boundaries = self.features.boundaries
        for event in events:
            handler = dispatch(event.type)
            if handler is not None:
                handler(self, event)
            append(event)
            seq = event.seq
            if self.open_attempt is None and self.open_calls == 0:
                boundaries.add(seq)
            self.last_seq = seq
            self.last_hash = event.hash
            self.epoch = event.epoch


def reduce(header: Header, events: list[Event], *, now_ms: int | None = None) -> Fold:
    """Fold one root branch's events (use ``Fold`` directly for multi-segment chains)."""
    fold = Fold(now_ms=now_ms)
    fold.header(header)
    fold.extend(events)
    return fold
