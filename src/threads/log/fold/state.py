"""The fold's state: what a branch's resolved chain, folded so far, says.

``FoldState`` keeps the working state the run loop and recovery decide from: the open turn and
model request, every call with its tool spec as of call time, decision, approval and effect
history, parks, cancel barrier, budget and usage; ``state()`` projects the normative
``ReducedState`` the conformance cases compare.
The rules that fill it, and ``Fold``, which feeds it lines, are in ``threads.log.fold.rules``.
Invariant: nothing here does I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from operator import attrgetter
from typing import TypedDict

from threads.errors import LogError, ThreadsError
from threads.log.fold.cache_breaks import CacheBreak, CacheBreaks
from threads.log.fold.compaction import BreakerProjection, Compaction
from threads.log.fold.cost import Cost, CostWire, PriceTable
from threads.log.fold.features import FeatureProjections, Features, current_mode
from threads.log.fold.records import (
    Call,
    EffectStatus,
    Epoch,
    ModelAttempt,
    ParkKind,
    Response,
    ThreadStatus,
    Turn,
)
from threads.log.fold.wakes import Wakes
from threads.log.json_types import JsonObject
from threads.log.lines import Event, Header
from threads.log.render import prefix_digest, prefix_line
from threads.log.vocabulary import (
    ParkAddress,
    Policy,
    ThreadStartedData,
    ToolResultData,
    ToolSpec,
)


class HeadRef(TypedDict):
    seq: int
    hash: str


class EffectEntry(TypedDict):
    effect_key: str
    call_id: str
    status: EffectStatus | None


class ForkPoint(TypedDict):
    seq: int
    snapshot_event_id: str


class UsageTotals(TypedDict):
    input_tokens: int
    output_tokens: int
    unknown_responses: int


class TranscriptItem(TypedDict):
    role: str
    event_id: str


class ReducedState(TypedDict):
    """The normative ReducedState (what the conformance cases compare), as JSON values."""

    thread_id: str
    branch_id: str
    head: HeadRef
    epoch: int
    status: ThreadStatus
    turns_completed: int
    pending_calls: list[str]
    effects: list[EffectEntry]
    parked: list[ParkAddress]
    fork_points: list[ForkPoint]
    usage: UsageTotals
    transcript: list[TranscriptItem]


class CostError(TypedDict):
    error: str  # cost_overflow


class Projections(FeatureProjections):
    """The read projections beside ``ReducedState``: spend, permission mode, model in force
    (empty before a ``thread_started``), the compaction breaker, cache breaks, children, todos."""

    cost: CostWire | CostError | None
    mode: str
    model: Mapping[str, object]
    compaction: BreakerProjection
    cache_breaks: list[CacheBreak] | None


@dataclass
class FoldState:
    """What a fold knows after the lines it was fed (``Fold`` in ``rules`` feeds it);
    ``now_ms`` only decides which snapshots are still fork points."""

    now_ms: int | None = None
    header_: Header | None = None
    root_header: Header | None = None
    thread_started: ThreadStartedData | None = None
    tools: list[ToolSpec] = field(default_factory=list)
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
    parks: dict[tuple[ParkKind, str], ParkAddress] = field(default_factory=dict)
    approvals: dict[str, Call] = field(default_factory=dict)
    thread_rules: list[tuple[str, str]] = field(default_factory=list)  # (rule, allow|deny)
    snapshots: list[tuple[int, str, int | None]] = field(default_factory=list)
    transcript: list[tuple[str, str]] = field(default_factory=list)
    transcript_seqs: list[int] = field(default_factory=list)  # the seq of each transcript item
    responses: list[Response] = field(default_factory=list)  # turn responses
    side_responses: list[Response] = field(default_factory=list)  # summarizer replies
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
    _prefix: tuple[object, JsonObject] | None = None

    # ---- queries the loop uses -----------------------------------------------------------

    def pending_calls(self) -> list[Call]:
        order, calls = self.call_order, self.calls
        settled = self.settled_calls
        while settled < len(order) and calls[order[settled]].result is not None:
            settled += 1  # a result is final: these are never looked at again
        self.settled_calls = settled
        return [calls[c] for c in order[settled:] if calls[c].result is None]

    def tool_spec(self, name: str) -> ToolSpec | None:
        for spec in self.tools:
            if spec["name"] == name:
                return spec
        return None

    @property
    def policy(self) -> Policy:
        """The policy ``thread_started`` pins (empty before one, or when it pins none)."""
        started = self.thread_started
        return {} if started is None else started.get("policy", {})

    @property
    def mode(self) -> str:
        """The permission mode in force: the pinned one until a ``mode_changed``."""
        return current_mode(self.features, self)

    @property
    def settings(self) -> Epoch:
        """The model settings in force (``model``, ``model_params``, ``adapter``): the pinned
        ones until a ``settings_changed``; ``LogError`` before a ``thread_started``."""
        settings = self.features.settings or self.thread_started
        if settings is None:
            raise LogError("invalid_transition", "no thread_started was read", seq=self.last_seq)
        return settings.copy()

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

    def state(self) -> ReducedState:
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
            "parked": [address.copy() for address in self.parks.values()],
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

    def projections(self) -> Projections:
        settings = self.features.settings or self.thread_started
        return {
            "cost": _cost_wire(self),
            "mode": self.mode,
            "model": {} if settings is None else settings["model"].copy(),
            "compaction": self.compaction.breaker(self.thread_started),
            "cache_breaks": self.cache_breaks(),
            **self.features.projections(),
        }

    def cache_breaks(self) -> list[CacheBreak] | None:
        """The ``cache_breaks`` projection: None when the thread pins no context policy."""
        if not self.policy.get("context"):
            return None
        return [CacheBreak(**entry) for entry in self.cache.breaks]

    # ---- ChainFacts (what the feature rules read) ------------------------------------------

    def attempt_open(self) -> bool:
        return self.open_attempt is not None

    def has_call(self, call_id: str) -> bool:
        return call_id in self.calls

    def result_of(self, call_id: str) -> ToolResultData | None:
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

    def expected_prefix(self) -> JsonObject:
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

    def _call(self, event: Event, call_id: str) -> Call:
        """The call ``event`` (of a type that names one) names as ``call_id``."""
        call = self.calls.get(call_id)
        if call is None:
            raise LogError(
                "invalid_transition",
                f"{event.type} names call {call_id!r}, which has no tool_call on this branch",
                seq=event.seq,
            )
        return call


_event_id = attrgetter("event_id")


def _cost_wire(fold: FoldState) -> CostWire | CostError | None:
    try:
        cost = fold.cost()
    except ThreadsError as exc:
        if exc.code != "cost_overflow":
            raise
        return {"error": "cost_overflow"}
    return None if cost is None else cost.to_wire()
