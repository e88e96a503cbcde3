"""One model request: render the log (Render v1 artifact), make ``model_request`` durable before
dispatch, stream the reply through the fence, record ``model_response`` with its tool calls.

The request goes to the model of the settings epoch in force (``threads.run.settings_epoch``),
with that epoch's params: first a turn-scoped fallback reverts, a recorded retry wait is waited
out. A failed request is handed to ``threads.run.model_retry`` (abandon, then retry, fall back,
resend or end the turn); a request left in doubt is resent at most ``crash_resends`` times per
reply. The step returns ``None`` when the turn goes on, else the run's outcome. A request a queued
cancel overtook is abandoned (``not_sent``) before it leaves.
"""

from __future__ import annotations

from threads import telemetry
from threads.errors import LogError
from threads.log.fold.saved import RestoredFold
from threads.log.render import MEDIA_TYPE, Rendered, render
from threads.log.render_resume import checkpoint_of
from threads.log.vocabulary import (
    ModelAttemptAbandonedData,
    ModelRequestData,
    ThreadStartedData,
    draft,
)
from threads.models.protocol import (
    ModelCallError,
    ModelRequest,
    ToolDefinition,
    foreign_reasoning,
    unsupported_content,
)
from threads.run import budget_check
from threads.run.compaction import before_request
from threads.run.drafts import HOST, MODEL
from threads.run.model_call import call_model, known_call_ids, record_response, render_artifacts
from threads.run.model_retry import (
    IN_DOUBT_REASONS,
    failures_in_step,
    on_model_error,
    wait_for_scheduled_retry,
)
from threads.run.queued_controls import apply_queued_cancels, cancel_queued
from threads.run.results import ErrorInfo, Failed, RunResult
from threads.run.retry_policy import pinned_retry
from threads.run.runtime import Runtime
from threads.run.settings_epoch import current_model, revert
from threads.run.turn import fail_turn
from threads.store.protocol import PendingArtifact


async def model_step(rt: Runtime) -> RunResult | None:
    in_doubt = failures_in_step(rt, IN_DOUBT_REASONS)
    if in_doubt > pinned_retry(rt.fold.thread_started).crash_resends:
        return await fail_turn(
            rt,
            "model_error",
            f"the model request was left in doubt {in_doubt} times in a row (crashes,"
            " timeouts, 5xx or cut streams after sending); threads stops resending rather"
            " than pay for it again. Check the provider, then run the thread again.",
        )
    await wait_for_scheduled_retry(rt)
    reverted = revert(rt)
    if reverted:
        await rt.writer.append(reverted)
    model = current_model(rt)
    if model is None:
        return await fail_turn(
            rt, "model_unavailable", "the thread's settings epoch names a model this agent does"
            " not have among its model and fallbacks", "model_unavailable",
        )
    exhausted = await budget_check.before_request(rt)
    if exhausted is not None:
        return exhausted
    started = rt.fold.thread_started
    assert started is not None
    try:
        rendered = await _render(rt, started)
    except LogError as exc:
        # An artifact the request needs is missing or corrupt: a coded outcome, nothing
        # recorded, the turn left open (as the loop treats missing bytes): once the bytes are
        # back (a bundle imported), the next run continues it.
        return Failed(rt.thread, ErrorInfo(exc.code, exc.message, exc.seq))
    unsupported = unsupported_content(rendered.part_types, model)
    if unsupported is not None:
        return await fail_turn(rt, "content_unsupported", unsupported)
    foreign = (
        foreign_reasoning(rendered.messages, model) if "reasoning" in rendered.part_types else None
    )
    if foreign is not None:
        return await fail_turn(rt, "continuation_unsupported", foreign)
    ladder = await before_request(rt, rendered)  # compact first, or end the turn
    if ladder is not False:
        return None if ladder is True else ladder
    attempt = _next_attempt(rt)
    data: ModelRequestData = {
        "attempt": attempt,
        "declared_prefix": rendered.declared_prefix(),
        "request_ref": rendered.request_ref(),
    }
    [request_event] = await rt.writer.append(
        [draft("model_request", data, HOST)],
        artifacts=[PendingArtifact(rendered.body, MEDIA_TYPE, rendered.sha256)],
    )
    rt.writer.keep_checkpoint(checkpoint_of(rt.memo.cache, request_event))
    if await cancel_queued(rt):  # queued while a tool ran: this request is never sent
        unsent: ModelAttemptAbandonedData = {
            "billing": "not_billed",
            "provider_outcome": "not_sent",
            "reason": "cancelled",
            "request_event_id": request_event.event_id,
        }
        await rt.writer.append([draft("model_attempt_abandoned", unsent, HOST)])
        await apply_queued_cancels(rt)  # the barrier, here: the loop's next check ends the turn
        return None
    request = ModelRequest(
        request_key=f"{rt.writer.branch_id}:{request_event.event_id}",
        system=rendered.prefix["system"],
        messages=rendered.messages,
        tools=[
            ToolDefinition(t["name"], t["description"], t["input_schema"]) for t in rt.fold.tools
        ],
        params=rendered.prefix["params"],  # the settings epoch in force
        attempt=attempt,
        provider_call_ids=dict((await known_call_ids(rt)).provider),
    )
    with telemetry.model_span(
        rt.writer.thread_id, request_event.event_id, attempt, model.provider, model.name
    ) as span:
        try:
            output = await call_model(rt, model, request)
        except ModelCallError as exc:
            telemetry.outcome(span, exc.reason, error=True)
            failure: ModelCallError | None = exc
        else:
            telemetry.outcome(span, "response")
            telemetry.model_usage(span, output.usage)
            failure = None
    if failure is None:
        try:
            await record_response(
                rt, request_event.event_id, output, "model_response", MODEL, hold=True
            )
        except ModelCallError as exc:  # a reply the log can't hold faithfully: nothing recorded
            failure = exc
    if failure is not None:
        return await on_model_error(rt, request_event.event_id, failure)
    return None


def _next_attempt(rt: Runtime) -> int:
    """1 for a fresh request; n + 1 when it resends the turn's last attempt, which was abandoned
    (rate limited, in doubt after a crash, ...)."""
    last = rt.fold.last_attempt
    turn = rt.fold.turn
    if last is None or turn is None or last.outcome in (None, "response"):
        return 1
    if last.event.seq < turn.input_event.seq:
        return 1
    return last.attempt + 1


async def _render(rt: Runtime, started: ThreadStartedData) -> Rendered:
    """The next turn request. A run opened from the fold row renders on from its checkpoint;
    once that no longer holds, the fold is read whole (``BranchWriter.read_whole``) before
    every line is rendered."""
    cache = rt.memo.cache
    if isinstance(rt.fold, RestoredFold) and rt.fold.partial:
        artifacts = await render_artifacts(rt)
        resumed = cache.resumed
        rendered = None if resumed is None else resumed.render(started, rt.fold.events, artifacts)
        if rendered is not None:
            return rendered
        await rt.writer.read_whole()
        cache.resumed = None
    return render(started, rt.fold.events, await render_artifacts(rt), cache)
