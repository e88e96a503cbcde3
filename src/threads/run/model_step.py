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

import json
from typing import Any

from threads import telemetry
from threads.errors import LogError, StoreError
from threads.log.render import MEDIA_TYPE, event_refs, render
from threads.models.normalize import (
    Unrecordable,
    minted_sha256,
    normalize_output,
    unrecordable_reply,
)
from threads.models.protocol import (
    Model,
    ModelCallError,
    ModelOutput,
    ModelRequest,
    TextDelta,
    ToolDefinition,
    foreign_reasoning,
    unsupported_content,
)
from threads.run import budget_check
from threads.run.admit import record_calls
from threads.run.drafts import HOST, MODEL, Draft
from threads.run.model_retry import (
    IN_DOUBT_REASONS,
    failures_in_step,
    on_model_error,
    wait_for_scheduled_retry,
)
from threads.run.queued_controls import apply_queued_cancels, cancel_queued
from threads.run.results import RunResult
from threads.run.retry_policy import pinned_retry
from threads.run.runtime import CallIdMemo, Runtime
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
        rendered = render(started, rt.fold.events, await _render_artifacts(rt), rt.memo.cache)
    except LogError as exc:  # an artifact the request needs is missing or corrupt
        return await fail_turn(rt, exc.code, exc.message)
    unsupported = unsupported_content(rendered.part_types, model)
    if unsupported is not None:
        return await fail_turn(rt, "content_unsupported", unsupported)
    foreign = (
        foreign_reasoning(rendered.messages, model) if "reasoning" in rendered.part_types else None
    )
    if foreign is not None:
        return await fail_turn(rt, "continuation_unsupported", foreign)
    attempt = _next_attempt(rt)
    data = {
        "attempt": attempt,
        "declared_prefix": rendered.declared_prefix(),
        "request_ref": rendered.request_ref(),
    }
    [request_event] = await rt.writer.append(
        [Draft("model_request", data, HOST)],
        artifacts=[PendingArtifact(rendered.body, MEDIA_TYPE, rendered.sha256)],
    )
    if await cancel_queued(rt):  # queued while a tool ran: this request is never sent
        unsent = {
            "billing": "not_billed",
            "provider_outcome": "not_sent",
            "reason": "cancelled",
            "request_event_id": request_event.event_id,
        }
        await rt.writer.append([Draft("model_attempt_abandoned", unsent, HOST)])
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
        provider_call_ids=dict((await _known_call_ids(rt)).provider),
    )
    with telemetry.model_span(
        rt.writer.thread_id, request_event.event_id, attempt, model.provider, model.name
    ) as span:
        try:
            output = await _call_model(rt, model, request)
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


async def _render_artifacts(rt: Runtime) -> dict[str, bytes]:
    """The artifacts the next request's Render v1 reads or verifies (images, reasoning blocks,
    injected text); one the store lacks is left out, so render names the event that needs it."""
    memo = rt.memo
    for event in rt.fold.events[memo.seen :]:
        for ref in event_refs(event):
            if ref["sha256"] in memo.artifacts:
                continue
            try:
                memo.artifacts[ref["sha256"]] = await rt.writer.store.get_artifact(ref["sha256"])
            except StoreError as exc:
                if exc.code != "artifact_missing":
                    raise
    memo.seen = len(rt.fold.events)
    return memo.artifacts


async def _call_model(rt: Runtime, model: Model, request: ModelRequest) -> ModelOutput:
    output: ModelOutput | None = None
    try:
        async for item in model.stream(request, rt.writer):
            if isinstance(item, TextDelta):
                if rt.sink is not None:
                    rt.sink.delta(item)
            else:
                output = item
    except StoreError as exc:
        if exc.code == "stale_epoch":
            raise ModelCallError(
                exc.message,
                reason="provider_error",
                provider_outcome="not_sent",
                code="stale_epoch",
            ) from exc
        raise
    if output is None:
        raise ModelCallError(
            "the model ended its stream without a response",
            reason="stream_broken",
            provider_outcome="unknown",
            code="model_error",
        )
    return output


async def record_response(
    rt: Runtime,
    request_event_id: str,
    output: ModelOutput,
    type_: str,
    actor: dict[str, Any],
    *,
    hold: bool = False,
) -> None:
    """The reply as the log can hold it (``threads.models.normalize``) and, in the same append,
    its tool calls with what can be decided at once. A reply with no faithful form raises
    ``ModelCallError(model_error)``, and nothing of it is written.

    ``hold``: when the reply calls an effectful tool, its batch is held (folded now, written
    by the next append): that is the first call's ``effect_begin``, or whatever the run records
    first instead (a denial, an approval challenge), or the fence check before any send; so
    the reply and the ``effect_begin`` it leads to cost one commit, and nothing runs before
    both are durable. A reply that calls only read-only tools (or none) is written at once:
    its commit answers the inbox look that follows it."""
    try:
        normalized = normalize_output(output, (await _known_call_ids(rt)).taken)
    except Unrecordable as exc:
        raise unrecordable_reply(str(exc)) from None
    output = normalized.output
    data: dict[str, Any] = {
        "completeness": "complete",
        "content": output.content,
        "request_event_id": request_event_id,
        "stop_reason": output.stop_reason,
        "usage": output.usage.to_wire(),
    }
    if type_ == "model_response_recovered":
        data["provider_request_id"] = output.provider_request_id or "unknown"
    drafts = [Draft(type_, data, actor), *record_calls(rt, output.content, request_event_id)]
    try:
        events = rt.writer.prepare(drafts)
    except LogError as exc:
        raise unrecordable_reply(exc.message) from None
    artifacts = [PendingArtifact(blob, media) for blob, media in normalized.artifacts]
    hold = hold and _calls_effectful(rt, output.content)
    await rt.writer.append_prepared(events, artifacts=artifacts, hold=hold)


def _calls_effectful(rt: Runtime, content: list[dict[str, Any]]) -> bool:
    """Whether a reply calls a tool of an effectful class (one ``effect_begin`` precedes)."""
    for part in content:
        if part.get("type") == "tool_use":
            tool = rt.spec.tool_named(part["name"])
            if tool is not None and tool.effect != "read_only":
                return True
    return False


async def _known_call_ids(rt: Runtime) -> CallIdMemo:
    """``rt.call_ids`` brought up to date with the events appended since it was last read."""
    memo = rt.call_ids
    events = rt.fold.events
    for event in events[memo.seen :]:
        if event.type == "tool_call":
            memo.taken.add(event.data["call_id"])
        elif event.type in ("model_response", "model_response_recovered"):
            for part in event.data["content"]:
                if part.get("type") != "tool_use":
                    continue
                memo.taken.add(part["call_id"])
                sha256 = minted_sha256(part["call_id"])
                if sha256 is not None and part["call_id"] not in memo.provider:
                    issued = json.loads(await rt.writer.store.get_artifact(sha256))
                    memo.provider[part["call_id"]] = issued["provider_call_id"]
    memo.seen = len(events)
    return memo
