"""Calling the model and recording what came back: the artifacts a render reads, the stream
through the fence, and the reply written as the log can hold it with its tool calls. Shared by a
turn's request (``threads.run.model_step``), a summarizer's (``threads.run.compaction``) and
recovery.
"""

from __future__ import annotations

import json
from typing import Literal

from threads.errors import LogError, StoreError
from threads.log.event_types import Actor
from threads.log.lines import Event
from threads.log.render import event_refs
from threads.log.vocabulary import (
    ModelAttemptAbandonedData,
    ModelResponseData,
    ModelResponseRecoveredData,
    OutputPart,
    data_of,
    draft,
)
from threads.models.normalize import (
    Unrecordable,
    minted_sha256,
    normalize_output,
    unrecordable_reply,
)
from threads.models.protocol import Model, ModelCallError, ModelOutput, ModelRequest, TextDelta
from threads.run.admit import record_calls
from threads.run.runtime import CallIdMemo, Runtime
from threads.store.protocol import PendingArtifact


def abandoned_data(request_event_id: str, exc: ModelCallError) -> ModelAttemptAbandonedData:
    """``model_attempt_abandoned``'s data for a request that failed with ``exc``."""
    data: ModelAttemptAbandonedData = {
        "provider_outcome": exc.provider_outcome,
        "reason": exc.reason,
        "request_event_id": request_event_id,
    }
    if exc.http_status is not None:
        data["http_status"] = exc.http_status
    if exc.retry_after_ms is not None:
        data["retry_after_ms"] = exc.retry_after_ms
    return data


async def render_artifacts(rt: Runtime) -> dict[str, bytes]:
    """The artifacts the next request's Render v1 reads or verifies (images, reasoning blocks,
    injected text); one the store lacks is left out, so render names the event that needs it."""
    memo = rt.memo
    for event in memo.unscanned(rt.fold.events):
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


async def call_model(rt: Runtime, model: Model, request: ModelRequest) -> ModelOutput:
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
    type_: Literal["model_response", "model_response_recovered"],
    actor: Actor,
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
        normalized = normalize_output(output, (await known_call_ids(rt)).taken)
    except Unrecordable as exc:
        raise unrecordable_reply(str(exc)) from None
    output = normalized.output
    data: ModelResponseData = {
        "completeness": "complete",
        "content": output.content,
        "request_event_id": request_event_id,
        "stop_reason": output.stop_reason,
        "usage": output.usage.to_wire(),
    }
    if type_ == "model_response_recovered":
        recovered: ModelResponseRecoveredData = {
            **data, "provider_request_id": output.provider_request_id or "unknown"
        }
        response = draft("model_response_recovered", recovered, actor)
    else:
        response = draft("model_response", data, actor)
    drafts = [response, *record_calls(rt, output.content, request_event_id)]
    try:
        events = rt.writer.prepare(drafts)
    except LogError as exc:
        raise unrecordable_reply(exc.message) from None
    artifacts = [PendingArtifact(blob, media) for blob, media in normalized.artifacts]
    hold = hold and _calls_effectful(rt, output.content)
    await rt.writer.append_prepared(events, artifacts=artifacts, hold=hold)


def _calls_effectful(rt: Runtime, content: list[OutputPart]) -> bool:
    """Whether a reply calls a tool of an effectful class (one ``effect_begin`` precedes)."""
    for part in content:
        if part["type"] == "tool_use":
            tool = rt.spec.tool_named(part["name"])
            if tool is not None and tool.effect != "read_only":
                return True
    return False


async def known_call_ids(rt: Runtime) -> CallIdMemo:
    """``rt.call_ids`` brought up to date with the events appended since it was last read."""
    memo = rt.call_ids
    events = rt.fold.events
    for event in memo.unscanned(events):
        if event.type == "tool_call":
            memo.taken.add(data_of(event, "tool_call")["call_id"])
        elif event.type in ("model_response", "model_response_recovered"):
            for part in _response_content(event):
                if part["type"] != "tool_use":
                    continue
                memo.taken.add(part["call_id"])
                sha256 = minted_sha256(part["call_id"])
                if sha256 is not None and part["call_id"] not in memo.provider:
                    issued = json.loads(await rt.writer.store.get_artifact(sha256))
                    memo.provider[part["call_id"]] = issued["provider_call_id"]
    memo.seen = len(events)
    return memo


def _response_content(event: Event) -> list[OutputPart]:
    if event.type == "model_response_recovered":
        return data_of(event, "model_response_recovered")["content"]
    return data_of(event, "model_response")["content"]
