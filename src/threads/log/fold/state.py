"""The fold's state: what a branch's resolved chain, folded so far, says.

``FoldState`` keeps the working state the run loop and recovery decide from: the open turn and
model request, every call with its tool spec as of call time, decision, approval and effect
history, parks, cancel barrier, budget and usage; ``state()`` projects the normative
``ReducedState`` the conformance cases compare.
The rules that fill it, and ``Fold``, which feeds it lines, are in ``threads.log.fold.rules``.
Invariant: nothing here does I/O.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import Any

from threads.errors import LogError, ThreadsError
from threads.log.fold.cache_breaks import CacheBreak, CacheBreaks
from threads.log.fold.compaction import Compaction
from threads.log.fold.cost import Cost, PriceTable
from threads.log.fold.features import Features, current_mode
from threads.log.fold.records import Call, ModelAttempt, ParkKind, ThreadStatus, Turn
from threads.log.fold.wakes import Wakes
from threads.log.lines import Event, Header
from threads.log.render import prefix_digest, prefix_line


@dataclass
class FoldState:
    """What a fold knows after the lines it was fed (``Fold`` in ``rules`` feeds it);
    ``now_ms`` only decides which snapshots are still fork points."""

    now_ms: int | None = None
    header_: Header | None = None
    root_header: Header | None = None
    thread_started: dict[str, Any] | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    last_seq: int = 0
    last_hash: str = ""
    epoch: int = 0
    inspection_only: bool = False
    thread_cancelled: bool = False
    turn: Turn | None = None
    turns_completed: int = 0
    calls: dict[str, Call] = field(default_factory=dict)
    call_order: list[str] = field(default_factory=list)
    settled_calls: int = 0  # the first calls in call_order that all have a result (final)
    effect_order: list[str] = field(default_factory=list)
    attempts: dict[str, ModelAttempt] = field(default_factory=dict)
    open_attempt: ModelAttempt | None = None
    last_attempt: ModelAttempt | None = None
    parks: dict[tuple[ParkKind, str], dict[str, Any]] = field(default_factory=dict)
    approvals: dict[str, Call] = field(default_factory=dict)
    thread_rules: list[tuple[str, str]] = field(default_factory=list)  # (rule, allow|deny)
    snapshots: list[tuple[int, str, int | None]] = field(default_factory=list)
    transcript: list[tuple[str, str]] = field(default_factory=list)
    transcript_seqs: list[int] = field(default_factory=list)  # the seq of each transcript item
    responses: list[dict[str, Any]] = field(default_factory=list)  # turn responses
    side_responses: list[dict[str, Any]] = field(default_factory=list)  # summarizer replies
    model_requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    unknown_responses: int = 0
    events: list[Event] = field(default_factory=list)
    segment_headers: list[Header] = field(default_factory=list)
    features: Features = field(default_factory=Features)
    compaction: Compaction = field(default_factory=Compaction)
    cache: CacheBreaks = field(default_factory=CacheBreaks)
    wakes: Wakes = field(default_factory=Wakes)
    loaded_tools: set[str] = field(default_factory=set)  # deferred tools a tools_loaded loaded
    knowledge_revision: int | None = None  # a fork's corpus revision (pinned policy), else None
    snapshot_revisions: dict[int, int | None] = field(default_factory=dict)
    # event_id -> event, of the first ``_indexed`` events (extended when looked up: most
    # folds never look one up, and a long read then pays no insert per event)
    _by_event_id: dict[str, Event] = field(default_factory=dict)
    _indexed: int = 0
    open_calls: int = 0  # calls without a result
    response_of: dict[str, Event] = field(default_factory=dict)  # request event_id -> response
    _prefix: tuple[object, dict[str, Any]] | None = None

    # ---- queries the loop uses -----------------------------------------------------------

    def pending_calls(self) -> list[Call]:
        order, calls = self.call_order, self.calls
        settled = self.settled_calls
        while settled < len(order) and calls[order[settled]].result is not None:
            settled += 1  # a result is final: these are never looked at again
        self.settled_calls = settled
        return [calls[c] for c in order[settled:] if calls[c].result is None]

    def tool_spec(self, name: str) -> dict[str, Any] | None:
        for spec in self.tools:
            if spec["name"] == name:
                return spec
        return None

    @property
    def mode(self) -> str:
        """The permission mode in force: the pinned one until a ``mode_changed``."""
        return current_mode(self.features, self)

    @property
    def settings(self) -> dict[str, Any]:
        """The model settings in force (``model``, ``model_params``, ``adapter``): the pinned
        ones until a ``settings_changed``."""
        return dict(self.features.settings or self.thread_started or {})

    @property
    def status(self) -> ThreadStatus:
        if self.inspection_only:
            return "inspection_only"
        if self.thread_cancelled:
            return "cancelled"
        if self.parks:
            return "parked"
        if self.turn is not None:
            return "in_turn"
        return "idle"

    def fork_points(self) -> list[tuple[int, str]]:
        """(seq, event_id) of each quiescent snapshot not expired at ``now_ms``."""
        now = self.now_ms
        return [
            (seq, event_id)
            for seq, event_id, expires_at in self.snapshots
            if expires_at is None or now is None or expires_at > now
        ]

    def state(self) -> dict[str, Any]:
        """The normative ReducedState as plain JSON values."""
        header = self.header_
        if header is None:
            raise LogError("invalid_transition", "no header was read", seq=0)
        return {
            "thread_id": header.thread_id,
            "branch_id": header.branch_id,
            "head": {"seq": self.last_seq, "hash": self.last_hash},
            "epoch": self.epoch,
            "status": self.status,
            "turns_completed": self.turns_completed,
            "pending_calls": [c.call_id for c in self.pending_calls()],
            "effects": [
                {"effect_key": call.effect_key, "call_id": call.call_id, "status": call.effect}
                for call in (self.calls[c] for c in self.effect_order)
            ],
            "parked": [dict(address) for address in self.parks.values()],
            "fork_points": [
                {"seq": seq, "snapshot_event_id": event_id} for seq, event_id in self.fork_points()
            ],
            "usage": {
                "input_tokens": self.input_tokens,
                "output_tokens": self.output_tokens,
                "unknown_responses": self.unknown_responses,
            },
            "transcript": [{"role": role, "event_id": eid} for role, eid in self.transcript],
        }

    def projections(self) -> dict[str, Any]:
        return {
            "cost": _cost_wire(self),
            "mode": self.mode,
            "model": dict(self.settings.get("model", {})),
            "compaction": self.compaction.breaker(self.thread_started),
            "cache_breaks": self.cache_breaks(),
            **self.features.projections(),
        }

    def cache_breaks(self) -> list[CacheBreak] | None:
        """The ``cache_breaks`` projection: None when the thread pins no context policy."""
        if not ((self.thread_started or {}).get("policy") or {}).get("context"):
            return None
        return [CacheBreak(**entry) for entry in self.cache.breaks]

    # ---- ChainFacts (what the feature rules read) ------------------------------------------

    def attempt_open(self) -> bool:
        return self.open_attempt is not None

    def has_call(self, call_id: str) -> bool:
        return call_id in self.calls

    def result_of(self, call_id: str) -> dict[str, Any] | None:
        call = self.calls.get(call_id)
        return None if call is None else call.result

    def turn_open(self) -> bool:
        return self.turn is not None

    def response_to(self, request_event_id: str) -> Event | None:
        return self.response_of.get(request_event_id)

    def step_boundary(self, seq: int) -> bool:
        return seq in self.features.boundaries

    def has_result(self, call_id: str) -> bool:
        call = self.calls.get(call_id)
        return call is not None and call.result is not None

    def event_by_id(self, event_id: str) -> Event | None:
        """The event with that id among those applied (the last, should two share it)."""
        events, indexed = self.events, self._indexed
        if indexed < len(events):
            fresh = events[indexed:]
            self._by_event_id.update(zip(map(_event_id, fresh), fresh, strict=True))
            self._indexed = len(events)
        return self._by_event_id.get(event_id)

    def expected_prefix(self) -> dict[str, Any]:
        """``declared_prefix`` every request of the settings epoch in force declares (C7)."""
        settings = self.features.settings
        cached = self._prefix
        if cached is None or cached[0] is not settings:
            assert self.thread_started is not None
            cached = (settings, prefix_digest(prefix_line(self.thread_started, settings)))
            self._prefix = cached
        return cached[1]

    def price_table(self) -> PriceTable:
        return PriceTable.of(self.thread_started)

    def cost(self) -> Cost | None:
        """Spend read back from the log (``threads.log.fold.cost``): None when the thread's policy
        names no currency; raises ``cost_overflow`` past 2^53-1."""
        table = self.price_table()
        if table.currency is None:
            return None
        return table.total(self.attempts.values())

    # ---- rules ---------------------------------------------------------------------------

    def _call(self, event: Event) -> Call:
        call_id = event.data["call_id"]
        call = self.calls.get(call_id)
        if call is None:
            raise LogError(
                "invalid_transition",
                f"{event.type} names call {call_id!r}, which has no tool_call on this branch",
                seq=event.seq,
            )
        return call


_event_id = attrgetter("event_id")


def _cost_wire(fold: FoldState) -> dict[str, Any] | None:
    try:
        cost = fold.cost()
    except ThreadsError as exc:
        if exc.code != "cost_overflow":
            raise
        return {"error": "cost_overflow"}
    return None if cost is None else cost.to_wire()
