"""Drafts: the events a run step wants appended, before the writer gives them seq, epoch and
hash. A ``Draft`` (``threads.log.lines``) is a ``(type, data, actor)`` triple (a tuple, so the
writer takes it as is).

This module also holds the actor values a run writes and the builders of event data that more
than one step writes. It imports only the log layer and principals, so every step may use it.
"""

from __future__ import annotations

from collections.abc import Mapping

from threads.log.event_types import Actor
from threads.log.fold import Fold
from threads.log.lines import Draft
from threads.log.vocabulary import (
    ArtifactRef,
    Budget,
    ResumedData,
    ToolResultData,
    ToolResultDataOrigin,
    UserInputData,
    UserInputDataSource,
    data_of,
    draft,
)
from threads.principal import Principal

HOST: Actor = {"kind": "host"}
MODEL: Actor = {"kind": "model"}
RECOVERY: Actor = {"kind": "recovery"}
TOOL: Actor = {"kind": "tool"}

PREVIEW_CHARS = 512
INLINE_RESULT_BYTES = 64 * 1024


def user_input(
    text: str, principal: Principal, budget: Budget | None, *, source: UserInputDataSource = "api"
) -> Draft:
    """The ``user_input`` that opens a turn for ``text``; ``budget``: the run's, on the wire;
    ``source``: ``parent_agent`` for a subagent's prompt."""
    data: UserInputData = {"source": source, "text": text}
    if budget is not None:
        data["budget"] = budget
    return draft("user_input", data, principal.actor())


def tool_result_data(
    call_id: str, text: str, *, origin: ToolResultDataOrigin, is_error: bool,
    ref: ArtifactRef | None = None,
) -> ToolResultData:
    """``tool_result``'s data: a preview always; the full text inline, or by ``ref`` when it was
    stored as an artifact."""
    data: ToolResultData = {
        "call_id": call_id,
        "completeness": "complete",
        "is_error": is_error,
        "origin": origin,
        "preview": text[:PREVIEW_CHARS],
    }
    if len(text) > PREVIEW_CHARS:
        if ref is not None:
            data["ref"] = ref
        else:
            data["content"] = [{"type": "text", "text": text}]
    return data


def resumed_data(fold: Fold, address: Mapping[str, object]) -> ResumedData:
    """``resumed``'s data for a park: its address and the ``parked`` event it ends."""
    park = next(
        e for e in reversed(fold.events)
        if e.type == "parked" and data_of(e, "parked")["address"] == address
    )
    return {"address": data_of(park, "parked")["address"].copy(), "cause_event_id": park.event_id}

