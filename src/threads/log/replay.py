"""Replay: re-render every recorded ``model_request`` from the log and compare, free of model
calls.

Each turn request is rendered again from the events before it (Render v1) and must produce
exactly the bytes its ``request_ref`` names (``request_hash_mismatch`` otherwise) and declare the
line 0 it renders (``prefix_changed`` otherwise). Compaction side requests render a summarizer's
history, not the conversation, and are not replayed. Invariant: pure; the first mismatch, in
log order, is the one reported, with the seq of its ``model_request``; ``missing_before`` applies
the same order to a reader failure that comes after a missing artifact.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass

from threads.errors import LogError
from threads.log.lines import Event
from threads.log.render import Artifacts, RenderCache, event_refs, render


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
    for index, event in enumerate(events):
        if event.type == "thread_started":
            started = event.data
        if event.type != "model_request" or event.data.get("purpose") == "compaction":
            continue
        if started is None:
            return Replayed(matched, ReplayMismatch(
                "invalid_transition", event.seq, "a model_request before thread_started"
            ))
        try:
            rendered = render(started, events[:index], artifacts, cache)
        except LogError as err:
            return Replayed(matched, ReplayMismatch(
                err.code, err.seq if err.seq is not None else event.seq, err.message
            ))
        if rendered.declared_prefix() != event.data["declared_prefix"]:
            return Replayed(matched, ReplayMismatch(
                "prefix_changed", event.seq,
                f"the request declares prefix {event.data['declared_prefix']}, but its line 0"
                f" renders as {rendered.declared_prefix()}",
            ))
        ref = rendered.request_ref()
        if ref != event.data["request_ref"]:
            return Replayed(matched, ReplayMismatch(
                "request_hash_mismatch", event.seq,
                f"the recorded request is {event.data['request_ref']['sha256']}"
                f" ({event.data['request_ref']['bytes']} bytes), but the log before it renders"
                f" {ref['sha256']} ({ref['bytes']} bytes)",
            ))
        matched += 1
    return Replayed(matched)
