"""Replay: re-render every recorded ``model_request`` from the log and compare, free of model
calls.

Each turn request is rendered again from the events before it (Render v1) and must produce
exactly the bytes its ``request_ref`` names (``request_hash_mismatch`` otherwise) and declare the
line 0 it renders (``prefix_changed`` otherwise). A compaction side request is rendered as the
summarizer's request it was (the conversation so far, then the ask for a summary) and compared
the same way. Invariant: pure; the first mismatch, in
log order, is the one reported, with the seq of its ``model_request``; ``missing_before`` applies
the same order to a reader failure that comes after a missing artifact.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from threads.errors import LogError
from threads.log.lines import Event
from threads.log.render import (
    Artifacts,
    RenderCache,
    Rendered,
    event_refs,
    render,
    render_summary_request,
)
from threads.log.render_context import summary_guides
from threads.log.vocabulary import data_of


@dataclass(frozen=True, slots=True)
class ReplayMismatch:
    """The first recorded request that does not re-render: its code and ``model_request`` seq
    (or, for an artifact a rendered part needs, the seq of the event that references it)."""

    code: str
    seq: int
    message: str


@dataclass(frozen=True, slots=True)
class Replayed:
    requests: int  # recorded requests re-rendered and matched before any mismatch
    mismatch: ReplayMismatch | None = None

    @property
    def ok(self) -> bool:
        return self.mismatch is None


def needed_artifacts(events: Sequence[Event]) -> list[str]:
    """sha256 of every artifact rendering these events reads or verifies, in first-use order."""
    seen: dict[str, None] = {}
    for event in events:
        for ref in event_refs(event):
            seen.setdefault(ref["sha256"], None)
    return list(seen)


def first_use(events: Sequence[Event], sha256: str) -> int:
    """Index of the first event whose rendering reads artifact ``sha256``."""
    return next(
        i for i, event in enumerate(events)
        if any(ref["sha256"] == sha256 for ref in event_refs(event))
    )


def missing_before(
    events: Iterable[Event], missing: Collection[str], failure: LogError
) -> LogError:
    """The failure a verifier reports: ``artifact_missing`` at the first event before
    ``failure``'s seq whose rendering needs one of ``missing``, if there is one; else
    ``failure``. (The first failure by seq wins, as in the reference.)"""
    if not missing or failure.seq is None:
        return failure
    for event in events:
        if event.seq >= failure.seq:
            break
        for ref in event_refs(event):
            if ref["sha256"] in missing:
                return LogError(
                    "artifact_missing", f"{event.type} references artifact {ref['sha256']}, "
                    "which is neither carried nor stored", seq=event.seq,
                )
    return failure


def replay(events: Sequence[Event], artifacts: Artifacts) -> Replayed:
    """Replay a resolved chain (``events`` from seq 1) against the artifacts it references."""
    cache = RenderCache()
    started = None
    matched = 0
    requested: dict[str, Event] = {}  # compaction_requested events by id
    for index, event in enumerate(events):
        if event.type == "thread_started":
            started = event.data
        if event.type == "compaction_requested":
            requested[event.event_id] = event
        if event.type != "model_request":
            continue
        if started is None:
            return Replayed(matched, ReplayMismatch(
                "invalid_transition", event.seq, "a model_request before thread_started"
            ))
        try:
            rendered = _rerender(
                started, events[:index], artifacts, cache, event, requested=requested
            )
        except LogError as err:
            return Replayed(matched, ReplayMismatch(
                err.code, err.seq if err.seq is not None else event.seq, err.message
            ))
        recorded = data_of(event, "model_request")
        if rendered.declared_prefix() != recorded["declared_prefix"]:
            return Replayed(matched, ReplayMismatch(
                "prefix_changed", event.seq,
                f"the request declares prefix {recorded['declared_prefix']}, but its line 0"
                f" renders as {rendered.declared_prefix()}",
            ))
        ref = rendered.request_ref()
        if ref != recorded["request_ref"]:
            return Replayed(matched, ReplayMismatch(
                "request_hash_mismatch", event.seq,
                f"the recorded request is {recorded['request_ref']['sha256']}"
                f" ({recorded['request_ref']['bytes']} bytes), but the log before it renders"
                f" {ref['sha256']} ({ref['bytes']} bytes)",
            ))
        matched += 1
    return Replayed(matched)


def _rerender(
    started: Mapping[str, Any],
    before: Sequence[Event],
    artifacts: Artifacts,
    cache: RenderCache,
    request: Event,
    *,
    requested: Mapping[str, Event],
) -> Rendered:
    recorded = data_of(request, "model_request")
    if recorded.get("purpose") != "compaction":
        return render(started, before, artifacts, cache)
    cause = requested.get(recorded.get("cause_event_id") or "")
    guides = summary_guides(before, cause)
    return render_summary_request(started, before, artifacts, guides, cause)
