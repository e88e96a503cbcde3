"""Reader rules for compaction (rules 10 and 30) and the breaker it derives.

A compaction replaces a range of the conversation with a summary a side ``model_request``
(``purpose: compaction``) produced. The reader tracks what a writer may append next: a
``compaction_requested`` (an operator asked for one) stays unanswered until a ``compacted`` or
``compaction_failed`` names it in ``cause_event_id``; meanwhile every side request and outcome
names it, and a compacted range that answers it spans the first ``user_input`` through the event
before the request. Ranges begin and end at step boundaries, never partly overlap, and the
summary artifact is the text of the side response it names. A broken rule raises ``LogError``
(``invalid_transition``) at the event's seq. The breaker is open once ``max_failures``
``compaction_failed`` follow the last ``compacted``.
Invariant: a pure function of the events it was given (no I/O), like the rest of reduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from threads.errors import LogError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.vocabulary import (
    CompactedData,
    CompactionFailedData,
    ModelRequestData,
    ThreadStartedData,
    data_of,
)

DEFAULT_MAX_FAILURES = 3
SIDE_PURPOSE = "compaction"


class BreakerProjection(TypedDict):
    consecutive_failures: int
    breaker_open: bool


class Facts(Protocol):
    """What the compaction rules read from the rest of the fold."""

    @property
    def thread_started(self) -> ThreadStartedData | None: ...

    def turn_open(self) -> bool: ...

    def event_by_id(self, event_id: str) -> Event | None: ...

    def response_to(self, request_event_id: str) -> Event | None: ...

    def step_boundary(self, seq: int) -> bool: ...


def is_side_request(event: Event) -> bool:
    return event.type == "model_request" and is_side(data_of(event, "model_request"))


def is_side(request: ModelRequestData) -> bool:
    """Whether a ``model_request`` is a summarizer's (``purpose: compaction``)."""
    return request.get("purpose") == SIDE_PURPOSE


def summary_text(response: Mapping[str, Any]) -> str:
    """A summarizer's reply as the summary: its text parts, concatenated."""
    return "".join(p["text"] for p in response["content"] if p.get("type") == "text")


def max_failures(started: ThreadStartedData | None) -> int:
    context = None if started is None else started.get("policy", {}).get("context")
    compact = None if context is None else context.get("compact")
    return DEFAULT_MAX_FAILURES if compact is None else int(
        compact.get("max_failures", DEFAULT_MAX_FAILURES)
    )


def _fail(event: Event, message: str) -> LogError:
    return LogError("invalid_transition", message, seq=event.seq)


@dataclass(slots=True)
class Compaction:
    """The compaction part of the fold."""

    first_input_seq: int | None = None
    requested: Event | None = None  # the unanswered compaction_requested, if any
    side_requests: set[str] = field(default_factory=set)  # event ids of side requests
    ranges: list[tuple[int, int]] = field(default_factory=list)
    failures: int = 0  # compaction_failed since the last compacted
    pending_side: Event | None = None  # the newest side request, until an outcome follows

    def is_side(self, request_event_id: str) -> bool:
        return request_event_id in self.side_requests

    def breaker(self, started: ThreadStartedData | None) -> BreakerProjection:
        return {
            "consecutive_failures": self.failures,
            "breaker_open": self.failures >= max_failures(started),
        }

    def on_user_input(self, event: Event) -> None:
        if self.first_input_seq is None:
            self.first_input_seq = event.seq

    def on_requested(self, facts: Facts, event: Event) -> None:
        """Rule 30: one unanswered request at a time, between turns, after some input."""
        if self.requested is not None:
            raise _fail(event, "compaction_requested while another one is unanswered")
        if facts.turn_open():
            raise _fail(event, "compaction_requested while a turn is open")
        if self.first_input_seq is None:
            raise _fail(event, "compaction_requested before any user_input")
        self.requested = event

    def _check_cause(
        self, event: Event, data: ModelRequestData | CompactionFailedData | CompactedData
    ) -> bool:
        """While a request is unanswered every side request and outcome names it, and none
        names any other. True when ``event`` (of ``data``) names the unanswered request."""
        cause = data.get("cause_event_id")
        requested = self.requested
        if requested is None:
            if cause is not None:
                raise _fail(event, f"{event.type} names compaction request {cause}, but none is"
                            " unanswered")
            return False
        if cause != requested.event_id:
            raise _fail(event, f"{event.type} must name the unanswered compaction_requested"
                        f" {requested.event_id} in cause_event_id")
        return True

    def on_side_request(self, facts: Facts, event: Event, data: ModelRequestData) -> None:
        """A side request (``event``, of ``data``) may stand between turns only to serve an
        unanswered request."""
        if not self._check_cause(event, data) and not facts.turn_open():
            raise _fail(event, "model_request outside a turn")
        self.side_requests.add(event.event_id)
        self.pending_side = event

    def on_failed(self, facts: Facts, event: Event) -> None:
        data = data_of(event, "compaction_failed")
        if self._check_cause(event, data):
            self.requested = None
        named = data.get("request_event_id")
        if named is not None and named not in self.side_requests:
            raise _fail(event, "compaction_failed names a request that is no compaction request")
        self.failures += 1
        self.pending_side = None

    def on_compacted(self, facts: Facts, event: Event, data: CompactedData) -> None:
        """``event`` (of ``data``) as rules 10 and 30 judge a ``compacted``."""
        manual = self._check_cause(event, data)
        _check_edges(facts, event, data)
        self._check_overlap(event, data)
        if data.get("summary_request_event_id") is not None:
            self._check_summary(facts, event, data)
        if manual:
            self._check_manual(facts, event, data)
            self.requested = None
        self.ranges.append((data["from_seq"], data["to_seq"]))
        self.failures = 0
        self.pending_side = None

    def _check_overlap(self, event: Event, data: CompactedData) -> None:
        start, end = data["from_seq"], data["to_seq"]
        for a, b in self.ranges:
            disjoint = end < a or start > b
            nested = (a <= start and end <= b) or (start <= a and b <= end)
            if not (disjoint or nested):
                raise _fail(event, f"compacted range {start}..{end} partly overlaps {a}..{b}")

    def _check_summary(self, facts: Facts, event: Event, data: CompactedData) -> None:
        """Rule 10: the summary artifact is the named side response's text, as UTF-8."""
        named = data["summary_request_event_id"]
        if named not in self.side_requests:
            raise _fail(event, "compacted summary_request_event_id names no compaction request")
        response = facts.response_to(named)
        if response is None:
            raise _fail(event, "compacted names a compaction request that has no response")
        text = summary_text(response.data).encode("utf-8")
        ref = data["summary_ref"]
        if not text or ref["bytes"] != len(text) or ref["sha256"] != sha256_hex(text):
            raise _fail(event, "compacted summary_ref is not the text of its summary response")

    def _check_manual(self, facts: Facts, event: Event, data: CompactedData) -> None:
        """Rule 30: a compaction that answers a request is manual and spans exactly the first
        user_input through the event before the request, summarized by a request naming it."""
        requested = self.requested
        assert requested is not None
        if data.get("trigger") != "manual":
            raise _fail(event, "a compacted answering a compaction_requested has trigger manual")
        if data["from_seq"] != self.first_input_seq or data["to_seq"] != requested.seq - 1:
            raise _fail(event, "a requested compaction spans the first user_input through the"
                        " event before its compaction_requested")
        summary = facts.event_by_id(data.get("summary_request_event_id") or "")
        if (
            summary is None
            or summary.type != "model_request"
            or data_of(summary, "model_request").get("cause_event_id") != requested.event_id
        ):
            raise _fail(event, "a requested compaction's summary request must name the request")


def _check_edges(facts: Facts, event: Event, data: CompactedData) -> None:
    """Rule 10: the range names its own edges, holds no line 0, and cuts no step."""
    if not data["from_seq"] <= data["to_seq"] < event.seq:
        raise _fail(event, "compacted range must end before the compacted event")
    edges = (("from", data["from_seq"], data["from_event_id"]),
             ("to", data["to_seq"], data["to_event_id"]))
    for edge, seq, event_id in edges:
        named = facts.event_by_id(event_id)
        if named is None or named.seq != seq:
            raise _fail(event, f"compacted {edge}_event_id is not the event at {edge}_seq")
        if named.type == "thread_started":
            raise _fail(event, "line 0 (thread_started) is never compacted")
    if not (facts.step_boundary(data["from_seq"] - 1) and facts.step_boundary(data["to_seq"])):
        raise _fail(event, "compacted range splits a step (a pending call or an open request)")
