"""What a run does after a model attempt failed: record it ``model_attempt_abandoned``, then
retry, fall back, resend or end the turn, by the thread's pinned ``RetryPolicy``.

A rate limit or overload is retried after a recorded ``retry_scheduled{delay_ms, not_before,
basis}``; the wait happens at the start of the next step (``wait_for_scheduled_retry``), so a
run restarted in another process waits out the same ``not_before`` on the store's clock. After
``fallback_after`` overloads in a row a ``settings_changed{fallback}`` switches to the next
fallback model, which is asked at once. A request in doubt (crash, 5xx, cut stream) is resent by
the next step within ``crash_resends``. Retries past the policy end the turn
``model_unavailable``; anything else ends it ``Failed`` with its code.
"""

from __future__ import annotations

from collections.abc import Iterator

from threads import telemetry
from threads.log.lines import Event
from threads.log.vocabulary import (
    RetryScheduledData,
    TurnCompletedDataReason,
    data_of,
    draft,
)
from threads.models.protocol import ModelCallError
from threads.run.compaction import after_prompt_too_long
from threads.run.drafts import HOST
from threads.run.model_call import abandoned_data
from threads.run.results import ErrorInfo, Failed, RunResult
from threads.run.retry_policy import pinned_retry
from threads.run.runtime import Runtime
from threads.run.settings_epoch import fallback
from threads.run.turn import fail_turn

RETRYABLE = ("rate_limited", "overloaded")
IN_DOUBT_REASONS = ("crash", "server_error", "timeout", "stream_broken")

# The errors a turn ends with as its own reason, rather than ``error``.
_OWN_ENDINGS: dict[str, TurnCompletedDataReason] = {
    "context_exhausted": "context_exhausted", "model_unavailable": "model_unavailable",
}


async def on_model_error(
    rt: Runtime, request_event_id: str, exc: ModelCallError
) -> RunResult | None:
    """Record the failed attempt and decide what follows; None when the turn goes on."""
    data = abandoned_data(request_event_id, exc)
    if exc.code == "stale_epoch":
        return Failed(rt.thread, ErrorInfo("stale_epoch", exc.message))
    [abandoned] = await rt.writer.append([draft("model_attempt_abandoned", data, HOST)])
    if exc.retryable:
        return await _retry(rt, request_event_id, abandoned.event_id, exc)
    if exc.provider_outcome == "unknown" and not exc.terminal:
        return None  # resent by the next model_step, which enforces crash_resends
    if exc.reason == "prompt_too_long":
        compacted = await after_prompt_too_long(rt)
        if isinstance(compacted, Failed):
            return compacted
        if compacted:
            return None  # compacted: the turn goes on with a smaller request
    ending = _OWN_ENDINGS.get(exc.code)
    if ending is not None:
        return await fail_turn(rt, exc.code, exc.message, ending)
    return await fail_turn(rt, exc.code, exc.message)


async def _retry(
    rt: Runtime, request_event_id: str, abandoned_id: str, exc: ModelCallError
) -> RunResult | None:
    policy = pinned_retry(rt.fold.thread_started)
    if exc.reason == "overloaded" and _overloads(rt) >= policy.fallback_after:
        switch = fallback(rt, abandoned_id)
        if switch:
            await rt.writer.append(switch)
            return None  # the fallback model is asked at once
    retry = failures_in_step(rt, RETRYABLE)
    delay, basis = policy.delay(retry, exc.retry_after_ms)
    waited = _waited_in_step(rt)
    if retry > policy.max_retries or waited + delay > policy.max_total_wait_ms:
        return await fail_turn(
            rt, "model_unavailable", f"the model provider still answers {exc.reason} after"
            f" {retry - 1} retries ({waited} ms of waiting); run the thread again later",
            "model_unavailable",
        )
    data: RetryScheduledData = {
        "basis": basis,
        "delay_ms": delay,
        "not_before": rt.now() + delay,
        "request_event_id": request_event_id,
    }
    await rt.writer.append([draft("retry_scheduled", data, HOST)])
    telemetry.retry_wait(rt.writer.thread_id, delay, exc.reason)
    return None


async def wait_for_scheduled_retry(rt: Runtime) -> None:
    """Before the next request of a step: wait until the last attempt's recorded
    ``not_before``, on the store's clock (a restarted run honours it too)."""
    last, turn = rt.fold.last_attempt, rt.fold.turn
    if last is None or turn is None or last.retry_not_before is None:
        return
    if last.outcome in (None, "response") or last.event.seq < turn.input_event.seq:
        return
    await rt.wait_until(last.retry_not_before)


def failures_in_step(rt: Runtime, reasons: tuple[str, ...]) -> int:
    """Abandoned attempts with one of ``reasons`` since the turn's last model reply."""
    return sum(1 for e in _step(rt) if e.type == "model_attempt_abandoned"
               and data_of(e, "model_attempt_abandoned")["reason"] in reasons)


def _overloads(rt: Runtime) -> int:
    """Overloads in a row on the model in force (since its settings epoch began)."""
    count = 0
    for event in _step(rt):
        if event.type == "settings_changed":
            break
        if event.type == "model_attempt_abandoned":
            if data_of(event, "model_attempt_abandoned")["reason"] != "overloaded":
                break
            count += 1
    return count


def _waited_in_step(rt: Runtime) -> int:
    return sum(
        data_of(e, "retry_scheduled")["delay_ms"] for e in _step(rt) if e.type == "retry_scheduled"
    )


def _step(rt: Runtime) -> Iterator[Event]:
    """The events since the turn's last model reply (or its input), newest first."""
    for event in reversed(rt.fold.events):
        if event.type in ("model_response", "model_response_recovered", "user_input"):
            return
        yield event
