"""Context edits the run writes (``context_edited``): clearing tool results the model has already
seen, and redacting or clearing a result a ``before_tool_result`` hook objects to.

Stored results never change: an edit only changes what later requests show (the renderer puts
``[tool result cleared: ...]`` in a cleared result's place and ``[redacted]`` over redacted
spans). Clearable (digest §1.3 L1) = results recorded before the turn's latest request that was
not a summarizer's, all but the newest ``keep_recent``, minus those of ``exclude_tools``, minus
those already cleared. A guardrail edit is appended in the same batch as the result it edits,
so no request can ever show the result unedited, whatever crashes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal

from threads.log.fold import Fold
from threads.log.fold.compaction import is_side_request
from threads.log.fold.features import spans_fit
from threads.log.lines import Draft, Event
from threads.log.vocabulary import (
    ContextEditedData,
    ContextEditedDataEditsItem,
    Span,
    data_of,
    draft,
)
from threads.run.context_policy import ContextPolicy
from threads.run.drafts import HOST
from threads.run.hooks import Outcome, ToolResultView, ask
from threads.run.runtime import Runtime

ClearReason = Literal["threshold", "idle", "compaction_fallback"]


def cleared_calls(events: Sequence[Event]) -> set[str]:
    """The calls whose results a recorded ``context_edited`` cleared."""
    return {
        edit["call_id"]
        for event in events if event.type == "context_edited"
        for edit in data_of(event, "context_edited")["edits"] if edit["action"] == "clear"
    }


def clearable(fold: Fold, policy: ContextPolicy, *, keep_recent: int | None = None) -> list[str]:
    """The call ids whose results may be cleared now, oldest first."""
    latest = next((e.seq for e in reversed(fold.events)
                   if e.type == "model_request" and not is_side_request(e)), None)
    if latest is None:
        return []
    shown = [data_of(e, "tool_result")["call_id"] for e in fold.events
             if e.type == "tool_result" and e.seq < latest]
    keep = policy.keep_recent if keep_recent is None else keep_recent
    older = shown[: max(0, len(shown) - keep)]
    done = cleared_calls(fold.events)
    excluded = set(policy.exclude_tools)
    return [c for c in older if c not in done and fold.calls[c].name not in excluded]


def clear_draft(call_ids: Sequence[str], reason: ClearReason) -> Draft:
    edits: list[ContextEditedDataEditsItem] = [
        {"action": "clear", "call_id": c} for c in call_ids
    ]
    data: ContextEditedData = {"edits": edits, "reason": reason}
    return draft("context_edited", data, HOST)


def clear_reason(
    rt: Runtime, policy: ContextPolicy, tokens: int, window: int
) -> ClearReason | None:
    """Why results should be cleared before this request: ``threshold`` (the estimate reached
    the clear trigger), ``idle`` (``idle_ms`` passed since the last reply), or None."""
    if tokens >= policy.clear_threshold(window):
        return "threshold"
    if policy.idle_ms is None:
        return None
    last = next((e.time for e in reversed(rt.fold.events) if e.type == "model_response"), None)
    if last is not None and rt.now() - last >= policy.idle_ms:
        return "idle"
    return None


async def guard_result(
    rt: Runtime, call_id: str, tool: str, result: Mapping[str, object]
) -> list[Draft]:
    """The ``before_tool_result`` hooks on a result about to be recorded: their decisions and,
    when one objects, the ``context_edited{guardrail}`` to append with the result. A deny, a
    failure, or spans that don't fit the first text part clear the result; valid spans redact
    it."""
    hooks = [(e, e.before_tool_result) for e in rt.spec.extensions if e.before_tool_result]
    if not hooks:
        return []
    content = result.get("content")
    first = content[0] if isinstance(content, list) and content else None
    text = first["text"] if isinstance(first, dict) else str(result["preview"])
    view = ToolResultView(call_id, tool, text)
    outcomes: list[Outcome] = []
    for extension, hook in hooks:
        outcomes.append(await ask(extension, "before_tool_result", hook, view, call_id=call_id))
    drafts = [o.draft for o in outcomes]
    edit = _guardrail_edit(call_id, result, outcomes)
    if edit is not None:
        data: ContextEditedData = {"edits": [edit], "reason": "guardrail"}
        drafts.append(draft("context_edited", data, HOST))
    return drafts


def _guardrail_edit(
    call_id: str, result: Mapping[str, object], outcomes: Sequence[Outcome]
) -> ContextEditedDataEditsItem | None:
    spans: list[tuple[int, int]] = []
    for outcome in outcomes:
        if outcome.verdict in ("deny", "failed"):
            return {"action": "clear", "call_id": call_id}
        if outcome.verdict == "redact":
            if not outcome.spans:
                return {"action": "clear", "call_id": call_id}
            spans.extend(outcome.spans)
    if not spans:
        return None
    wire: list[Span] = [{"end": end, "start": start} for start, end in sorted(set(spans))]
    if not all(isinstance(s, int) for span in spans for s in span) or not spans_fit(
        result, 0, wire
    ):
        return {"action": "clear", "call_id": call_id}
    return {"action": "redact", "call_id": call_id, "part": 0, "spans": wire}
