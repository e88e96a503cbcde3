"""The run compacts: before a turn request that would pass the pinned threshold, once after the
provider answers ``prompt_too_long``, and between turns for an operator's
``compaction_requested``.

A compaction picks a range (the oldest conversation, ending at a step boundary, leaving at least
``keep_tail_tokens`` verbatim), sends the summarizer a request that is durable first
(``model_request{purpose: compaction}``), records its reply, then either ``compacted`` with the
summary stored as a ``text/plain`` artifact and, in the same append, what the model must keep
of the dropped range (``threads.run.compaction_restore``), or ``compaction_failed`` (no range,
an empty reply, a failed request, an extension's ``before_compact`` hook denying it). A
summarizer that answers ``prompt_too_long`` gets one more attempt after every shown tool result
is cleared (``context_edited{compaction_fallback}``). A failure never ends the turn by itself:
the request goes on as it is, and the pre-dispatch guard ends the turn ``context_exhausted`` (after
``context_preflight_blocked{fail}``) only when the request can't fit the window and this step may
not compact again. After ``max_failures`` failures in a row the breaker stays open until a
compaction succeeds. Before either, the ladder's first rung clears tool results the model has
already seen (``threads.run.context_edits``) and decides again. Every decision is read from the
log, so a rerun after a crash decides the same way.
"""

from __future__ import annotations

import math
from typing import Literal

from threads.log.fold import Fold
from threads.log.fold.compaction import is_side_request, summary_text
from threads.log.hashing import sha256_hex
from threads.log.lines import Draft, Event
from threads.log.render import MEDIA_TYPE, Rendered, render_summary_request
from threads.log.render_context import summary_guides
from threads.log.vocabulary import (
    ArtifactRef,
    CompactedData,
    CompactionFailedData,
    ContextPreflightBlockedData,
    ModelRequestData,
    ModelResponseData,
    ModelResponseRecoveredData,
    data_of,
    draft,
)
from threads.models.protocol import ModelCallError, ModelRequest
from threads.run.compaction_restore import restore_drafts
from threads.run.context_edits import clear_draft, clear_reason, clearable
from threads.run.context_policy import ContextPolicy, context_window, pinned_context
from threads.run.drafts import HOST, MODEL
from threads.run.hooks import CompactedView, CompactView, ask, recorded
from threads.run.model_call import abandoned_data, call_model, record_response, render_artifacts
from threads.run.results import ErrorInfo, Failed, RunResult
from threads.run.runtime import Runtime
from threads.run.settings_epoch import current_model
from threads.run.turn import fail_turn
from threads.store.protocol import PendingArtifact

Trigger = Literal["threshold", "reactive", "manual"]
FailReason = Literal["hook_denied", "model_error", "prompt_too_long", "empty_summary",
                     "still_over_threshold"]
SUMMARY_MEDIA = "text/plain"
_OUTCOMES = ("compacted", "compaction_failed", "context_preflight_blocked")
_RENDERED = frozenset({
    "user_input", "steer", "injected", "heartbeat", "model_response", "model_response_recovered",
    "tool_result", "tool_result_late", "tools_changed", "compacted",
})


def window(rt: Runtime, policy: ContextPolicy) -> int:
    """The tokens a request may hold: the model in force's window less the reserve."""
    settings = rt.fold.features.settings or rt.fold.thread_started
    model = None if settings is None else settings["model"]
    return context_window(rt.fold.thread_started, model) - policy.reserve_tokens


def estimate(fold: Fold, request_bytes: int) -> int:
    """The next request's input tokens, estimated (never counted): the newest turn reply of the
    settings epoch with a known input side, plus a quarter token per byte the request grew
    since that reply's request; with none, a quarter token per byte."""
    epoch = fold.features.settings_event
    since = epoch.seq if epoch is not None else 0
    for event in reversed(fold.events):
        if event.seq <= since:
            break
        if event.type == "model_response":
            response: ModelResponseData | ModelResponseRecoveredData = data_of(
                event, "model_response"
            )
        elif event.type == "model_response_recovered":
            response = data_of(event, "model_response_recovered")
        else:
            continue
        request = fold.event_by_id(response["request_event_id"])
        usage = response["usage"]
        if request is None or is_side_request(request) or usage.get("input_tokens") is None:
            continue
        known = ((usage.get("input_tokens") or 0) + (usage.get("cache_read_tokens") or 0)
                 + (usage.get("cache_write_tokens") or 0))
        grown = max(0, request_bytes - data_of(request, "model_request")["request_ref"]["bytes"])
        return int(known + math.ceil(grown / 4))
    return math.ceil(request_bytes / 4)


def _step(fold: Fold) -> list[Event]:
    """The events after the turn's latest request that was not a summarizer's."""
    turn = fold.turn
    start = turn.input_event.seq if turn is not None else 0
    step: list[Event] = []
    for event in reversed(fold.events):
        if event.seq <= start or (event.type == "model_request" and not is_side_request(event)):
            break
        step.append(event)
    return step


def _blocked(fold: Fold, policy: ContextPolicy) -> bool:
    """This step compacted, failed or was blocked already, or the breaker is open."""
    if any(e.type in _OUTCOMES for e in _step(fold)):
        return True
    return fold.compaction.failures >= policy.max_failures


async def before_request(rt: Runtime, rendered: Rendered) -> RunResult | bool:
    """The context ladder before a turn request (threshold compaction, then the guard): True
    when something was recorded and the loop should decide again, False to send ``rendered``,
    or the outcome when the turn ended ``context_exhausted``."""
    policy = pinned_context(rt.fold.thread_started)
    if policy is None:
        return False
    fold = rt.fold
    limit = window(rt, policy)
    tokens = estimate(fold, rendered.body.size)
    barred = fold.turn is not None and fold.turn.cancel_event is not None  # nothing is cleared
    reason = None if barred else clear_reason(rt, policy, tokens, limit)
    calls = clearable(fold, policy) if reason is not None else []
    if reason is not None and calls:
        await rt.writer.append([clear_draft(calls, reason)])
        return True
    if tokens >= policy.threshold(limit) and not _blocked(fold, policy):
        await summarize(rt, policy, "threshold")
        return ended_by_hook(rt) or True
    if tokens < limit or barred:
        return False
    blocked = _blocked(fold, policy)
    data: ContextPreflightBlockedData = {
        "action": "fail" if blocked else "compact", "estimated_tokens": tokens,
        "window_tokens": limit,
    }
    await rt.writer.append([draft("context_preflight_blocked", data, HOST)])
    if blocked:
        return await fail_turn(
            rt, "context_exhausted", f"the next request needs about {tokens} tokens, more than"
            f" the {limit} the model's window leaves, and this step may not compact again",
            "context_exhausted",
        )
    await summarize(rt, policy, "reactive")
    return ended_by_hook(rt) or True


async def after_prompt_too_long(rt: Runtime) -> Failed | bool:
    """Once per step, a provider's ``prompt_too_long`` is answered by a reactive compaction
    (True: the turn goes on); else (no policy, already compacted in this step, breaker open,
    or the compaction failed) the turn ends as before (False), or an ``after_compact`` hook's
    failure ended it (that outcome)."""
    policy = pinned_context(rt.fold.thread_started)
    if policy is None or _blocked(rt.fold, policy):
        return False
    compacted = await summarize(rt, policy, "reactive")
    return ended_by_hook(rt) or compacted


async def serve_request(rt: Runtime) -> None:
    """Answer the operator's unanswered ``compaction_requested`` (between turns): its range is
    the first input through the event before the request."""
    fold = rt.fold
    cause = fold.compaction.requested
    first = fold.compaction.first_input_seq
    assert cause is not None
    assert first is not None
    policy = pinned_context(fold.thread_started) or ContextPolicy()
    await _summarize_range(rt, policy, "manual", (first, cause.seq - 1), cause)


async def settle_answered(rt: Runtime) -> None:
    """A summarizer's reply recorded before a crash, with no outcome after it: the outcome
    now, from that reply (its request is never sent again), over the range it was asked
    for."""
    fold = rt.fold
    side = fold.compaction.pending_side
    if side is None or fold.response_to(side.event_id) is None:
        return
    cause = fold.event_by_id(data_of(side, "model_request").get("cause_event_id") or "")
    policy = pinned_context(fold.thread_started) or ContextPolicy()
    span: tuple[int, int] | None
    trigger: Trigger
    if cause is not None and fold.compaction.first_input_seq is not None:
        span, trigger = (fold.compaction.first_input_seq, cause.seq - 1), "manual"
    else:
        span, trigger = pick_range(fold, policy, before=side.seq), _trigger_of(fold, side)
    if span is None:
        await _failed(rt, "still_over_threshold", cause, side)
        return
    await record_summary(rt, policy, side, span, trigger=trigger, cause=cause)


def _trigger_of(fold: Fold, side: Event) -> Trigger:
    """Why a side request was sent, read back: reactive after a guard's block or a
    ``prompt_too_long`` in its step, else threshold."""
    for event in reversed(fold.events[: side.seq - fold.events[0].seq]):
        if event.type == "model_request" and not is_side_request(event):
            break
        if event.type == "context_preflight_blocked" or (
            event.type == "model_attempt_abandoned"
            and (abandoned := data_of(event, "model_attempt_abandoned"))["reason"]
            == "prompt_too_long"
            and not fold.compaction.is_side(abandoned["request_event_id"])
        ):
            return "reactive"
    return "threshold"


async def summarize(rt: Runtime, policy: ContextPolicy, trigger: Trigger) -> bool:
    return await _summarize_range(rt, policy, trigger, pick_range(rt.fold, policy), None)


def pick_range(
    fold: Fold, policy: ContextPolicy, before: int | None = None
) -> tuple[int, int] | None:
    """From the first event after ``thread_started`` through the newest step boundary that
    leaves ``keep_tail_tokens`` after it (a quarter token per recorded byte of what the model
    sees) and is not followed by a tool call; None when no such end lies past every earlier
    compacted range. ``before``: as the log stood before that seq (a side request's own)."""
    events = fold.events
    if before is not None:
        events = events[: before - events[0].seq]
    first = next((e.seq for e in events if e.type != "thread_started"
                  and e.seq > _started_seq(events)), None)
    if first is None:
        return None
    done = max((b for _, b in fold.compaction.ranges), default=first - 1)
    boundaries = fold.features.boundaries
    tail = 0
    for index in range(len(events) - 1, -1, -1):
        event = events[index]
        if event.seq <= done:
            break
        follows = events[index + 1] if index + 1 < len(events) else None
        if (
            tail // 4 >= policy.keep_tail_tokens
            and event.seq in boundaries
            and event.seq >= first
            and (follows is None or follows.type != "tool_call")
        ):
            return first, event.seq
        if event.type in _RENDERED:
            tail += len(event.line)
    return None


def _at(fold: Fold, seq: int) -> Event:
    """The event at ``seq`` (a chain's seqs are contiguous)."""
    return fold.events[seq - fold.events[0].seq]


def _started_seq(events: list[Event]) -> int:
    return next((e.seq for e in events if e.type == "thread_started"), 0)


async def _summarize_range(
    rt: Runtime, policy: ContextPolicy, trigger: Trigger, span: tuple[int, int] | None,
    cause: Event | None,
) -> bool:
    """One compaction of ``span``; True when it was recorded ``compacted``."""
    if span is None:
        await _failed(rt, "still_over_threshold", cause)
        return False
    if await _denied(rt, trigger, span, cause):
        return False
    return await _send(rt, policy, trigger, span, cause)


async def _denied(
    rt: Runtime, trigger: Trigger, span: tuple[int, int], cause: Event | None
) -> bool:
    """The ``before_compact`` hooks, each decision appended before the next hook runs (a
    decision already recorded for this compaction is reused, never asked again). A deny or
    a failure is answered ``compaction_failed{hook, hook_denied}`` in the same batch."""
    fold = rt.fold
    since = cause.seq if cause is not None else next(
        (e.seq for e in reversed(fold.events) if e.type in ("model_request", *_OUTCOMES)), 0
    )
    done = recorded(fold.events, "before_compact", since)
    if any(data_of(e, "hook_decision")["decision"] in ("deny", "failed")
           for e in done.values()):
        return True  # a crash before the answer: the answer follows from the recorded decision
    view = CompactView(trigger, *span)
    for extension in rt.spec.extensions:
        if extension.before_compact is None or extension.name in done:
            continue
        outcome = await ask(extension, "before_compact", extension.before_compact, view)
        if outcome.verdict in ("deny", "failed"):
            denied = _failed_draft("hook_denied", cause, stage="hook")
            await rt.writer.append([outcome.draft, denied])
            return True
        await rt.writer.append([outcome.draft])
    return False


async def _send(
    rt: Runtime, policy: ContextPolicy, trigger: Trigger, span: tuple[int, int],
    cause: Event | None,
) -> bool:
    """Render, record and send one summarizer request for ``span``."""
    fold = rt.fold
    started = fold.thread_started
    model = current_model(rt)
    assert started is not None
    if model is None:
        await _failed(rt, "model_error", cause)
        return False
    guides = summary_guides(fold.events, cause)
    rendered = render_summary_request(
        started, fold.events, await render_artifacts(rt), guides, cause
    )
    data: ModelRequestData = {
        "attempt": _attempt(fold, cause),
        "declared_prefix": rendered.declared_prefix(),
        "purpose": "compaction",
        "request_ref": rendered.request_ref(),
    }
    if cause is not None:
        data["cause_event_id"] = cause.event_id
    [request] = await rt.writer.append(
        [draft("model_request", data, HOST)],
        artifacts=[PendingArtifact(rendered.body, MEDIA_TYPE, rendered.sha256)],
    )
    return await _answer(rt, policy, request, rendered, span, trigger=trigger, cause=cause)


def _attempt(fold: Fold, cause: Event | None) -> int:
    """n + 1 after an abandoned summarizer attempt serving the same request, else 1."""
    last = fold.last_attempt
    if (
        last is not None
        and is_side_request(last.event)
        and last.outcome not in (None, "response")
        and data_of(last.event, "model_request").get("cause_event_id")
        == (cause.event_id if cause else None)
        and (cause is not None or not any(e.type in _OUTCOMES for e in _step(fold)))
    ):
        return last.attempt + 1
    return 1


async def _answer(
    rt: Runtime, policy: ContextPolicy, request: Event, rendered: Rendered,
    span: tuple[int, int], *, trigger: Trigger, cause: Event | None,
) -> bool:
    """Send the durable side request, record the reply and the compaction's outcome."""
    model = current_model(rt)
    assert model is not None
    call = ModelRequest(
        request_key=f"{rt.writer.branch_id}:{request.event_id}",
        system=rendered.prefix["system"],
        messages=rendered.messages,
        tools=[],
        params=rendered.prefix["params"],
        attempt=data_of(request, "model_request")["attempt"],
        provider_call_ids={},
    )
    try:
        output = await call_model(rt, model, call)
        await record_response(rt, request.event_id, output, "model_response", MODEL)
    except ModelCallError as exc:
        abandoned = draft("model_attempt_abandoned", abandoned_data(request.event_id, exc), HOST)
        if exc.reason == "prompt_too_long" and not _too_long_before(rt.fold):
            # the summarizer's own window: clear every shown result (none kept), ask once more
            calls = clearable(rt.fold, policy, keep_recent=0)
            edit = [clear_draft(calls, "compaction_fallback")] if calls else []
            await rt.writer.append([abandoned, *edit])
            return await _send(rt, policy, trigger, span, cause)
        reason: FailReason = (
            "prompt_too_long" if exc.reason == "prompt_too_long" else "model_error"
        )
        await rt.writer.append([abandoned, _failed_draft(reason, cause, request)])
        return False
    return await record_summary(rt, policy, request, span, trigger=trigger, cause=cause)


def _too_long_before(fold: Fold) -> bool:
    """A summarizer request of this compaction was already abandoned ``prompt_too_long``."""
    for event in reversed(fold.events):
        if event.type in _OUTCOMES or (event.type == "model_request"
                                       and not is_side_request(event)):
            return False
        if event.type != "model_attempt_abandoned":
            continue
        abandoned = data_of(event, "model_attempt_abandoned")
        if abandoned["reason"] == "prompt_too_long" and fold.compaction.is_side(
            abandoned["request_event_id"]
        ):
            return True
    return False


async def record_summary(
    rt: Runtime, policy: ContextPolicy, request: Event, span: tuple[int, int], *,
    trigger: Trigger, cause: Event | None,
) -> bool:
    """The outcome of a side request whose reply is recorded: ``compacted`` with the summary
    artifact, or ``compaction_failed{empty_summary}``."""
    fold = rt.fold
    response = fold.response_to(request.event_id)
    assert response is not None
    text = summary_text(response.data).encode("utf-8")
    if not text:
        await _failed(rt, "empty_summary", cause, request)
        return False
    start, end = span
    first, last = _at(fold, start), _at(fold, end)
    sha256 = sha256_hex(text)
    ref: ArtifactRef = {"bytes": len(text), "media_type": SUMMARY_MEDIA, "sha256": sha256}
    data: CompactedData = {
        "from_event_id": first.event_id, "from_seq": start,
        "summary_ref": ref, "summary_request_event_id": request.event_id,
        "to_event_id": last.event_id, "to_seq": end, "trigger": trigger,
    }
    if cause is not None:
        data["cause_event_id"] = cause.event_id
    restore = await restore_drafts(rt, policy, span)  # L3: the same batch as the compacted
    await rt.writer.append([draft("compacted", data, HOST), *restore],
                           artifacts=[PendingArtifact(text, SUMMARY_MEDIA, sha256)])
    view = CompactedView(trigger, start, end, text.decode("utf-8"))
    told = [await ask(e, "after_compact", e.after_compact, view)
            for e in rt.spec.extensions if e.after_compact is not None]
    failed = rt.fold.turn is not None and any(o.verdict == "failed" for o in told)
    end_turn = [draft("turn_completed", {"reason": "error"}, HOST)] if failed else []
    if told:  # a failing hook ends the open turn in the same append (digest §1.5)
        await rt.writer.append([*(outcome.draft for outcome in told), *end_turn])
    return True


def ended_by_hook(rt: Runtime) -> Failed | None:
    """The outcome of a turn an ``after_compact`` hook's failure just ended, else None."""
    last = rt.fold.events[-1] if rt.fold.events else None
    if rt.fold.turn is not None or last is None or last.type != "turn_completed":
        return None
    failed = next((e for e in reversed(rt.fold.events[-len(rt.spec.extensions) - 1:])
                   if e.type == "hook_decision"
                   and data_of(e, "hook_decision")["decision"] == "failed"), None)
    if failed is None:
        return None
    decision = data_of(failed, "hook_decision")
    reason = f"{decision['extension']}: {decision.get('reason', 'no reason given')}"
    return Failed(rt.thread, ErrorInfo(
        "hook_failed", f"an after_compact hook failed ({reason}), which ends the turn; the"
        " compaction is kept. Fix the extension, then run the thread again",
    ))


async def _failed(
    rt: Runtime, reason: FailReason, cause: Event | None, request: Event | None = None
) -> None:
    await rt.writer.append([_failed_draft(reason, cause, request)])


def _failed_draft(
    reason: FailReason, cause: Event | None, request: Event | None = None, *,
    stage: Literal["summary", "hook"] = "summary",
) -> Draft:
    data: CompactionFailedData = {"reason": reason, "stage": stage}
    if cause is not None:
        data["cause_event_id"] = cause.event_id
    if request is not None:
        data["request_event_id"] = request.event_id
    return draft("compaction_failed", data, HOST)
