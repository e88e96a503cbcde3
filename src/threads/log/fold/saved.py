"""The fold's state at a seq as bytes of our own format, and back: what a store keeps so that
opening a long branch folds only the lines after it (``threads.store.fold_snapshots``).

``dump(fold)`` writes two lines of JSON (sorted keys, no whitespace) of everything the fold's
rules and its read projections (``state``, ``cost``, ``projections``, usage, fork points) look
at, in format ``FORMAT``: the fold, then the rows of its settled model attempts, which a
restored fold decodes only once one is asked for (a cost, a budget, a rule naming an old one).
``restore(body, now_ms)`` gives a ``RestoredFold`` that folds further lines exactly as the full
fold would. What grows with the thread and only its rules look up is kept as ids:
every call (whole), every model attempt (its id, seq, time, number, outcome, usage and
billing; the event line only of the last and of those in doubt), and the transcript's roles,
ids and seqs. What no rule or read looks up again is dropped: responses but the last, and the
runs of turns no longer open that no spawn names (``Wakes``). Events themselves are not kept:
a restored fold's ``events`` holds only the lines folded after it. A rule that needs an older
line (a ``woken`` cause, a ``compacted`` range, an ``output_validated`` source, a ``tool_call``
naming an older response) raises ``SnapshotShortError``, and the caller folds the whole chain
instead.

Invariant: ``restore(dump(f))`` folds any further lines to the same ``state()``,
``projections()`` and ``cost()`` as ``f`` (or raises ``SnapshotShortError``); a body that does not
decode, or was written by another format or another fold code (``FOLD_CODE``), is refused
(``SnapshotUnusableError``), never half used.
"""

from __future__ import annotations

from _collections_abc import dict_items, dict_keys, dict_values
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any, NotRequired, TypedDict, cast

from threads.log import tool_ext
from threads.log.canonical import compact_dumps, fast_loads
from threads.log.event_types import Principal
from threads.log.fold.cache_breaks import CacheBreak, CacheBreaks, Cause
from threads.log.fold.compaction import Compaction
from threads.log.fold.features import Child, Features
from threads.log.fold.records import (
    Approval,
    Call,
    EffectStatus,
    Epoch,
    ModelAttempt,
    ParkKind,
    Response,
    Turn,
)
from threads.log.fold.rules import Fold
from threads.log.fold.wakes import RunRef, Spawn, Wakes
from threads.log.hashing import sha256_hex
from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import Event, Header, event_from_value, header_from_value
from threads.log.vocabulary import (
    ArtifactRef,
    Budget,
    ModelSettings,
    ParkAddress,
    ThreadStartedData,
    TodosUpdatedDataTodosItem,
    ToolResultData,
    ToolResultLateData,
    ToolSpec,
    Usage,
)

__all__ = [
    "FORMAT",
    "RestoredFold",
    "SnapshotShortError",
    "SnapshotUnusableError",
    "dump",
    "first_user_input",
    "fold_code",
    "last_time",
    "restore",
]

FORMAT = 6  # the body's layout; a reader of another refuses it

_ROLES = {"user": "u", "assistant": "a", "tool": "t", "context": "c", "summary": "s"}
_ROLE_NAMES = {letter: role for role, letter in _ROLES.items()}


class SnapshotShortError(Exception):
    """A line after a snapshot needs an event the snapshot does not keep: fold everything."""


class SnapshotUnusableError(Exception):
    """A snapshot body that is not one this code wrote (format, fold code, bytes)."""


@cache
def fold_code() -> str:
    """The sha256 of the fold's own source (every module of this package, the rules and this
    format among them, and the tool-extension rules it calls): a snapshot written by other rules
    is refused, as a changed rule could fold the same lines to another state."""
    package = sorted(Path(__file__).parent.glob("*.py"))
    sources = [*package, Path(tool_ext.__file__)]
    return sha256_hex(b"\0".join(path.read_bytes() for path in sources))


@dataclass
class RestoredFold(Fold):
    """A fold restored from a snapshot at seq ``cut``: ``events`` holds only the lines from seq
    ``start`` on, and of the earlier ones what a listing shows: the chain's first
    ``user_input`` (``first_input``) and the time of the line at the cut (``cut_time``; None
    for a header). ``start`` is ``cut + 1`` for an open (``threads.store.fold_open.open_fold``);
    a continuing run's fold (``open_window``) also holds the lines from its request
    checkpoint's request on, so ``start`` may be at or before the cut. Never the whole chain:
    a reader that needs a line before ``start`` reads the chain instead."""

    cut: int = 0
    start: int = 1
    first_input: Event | None = None
    cut_time: int | None = None
    # the bytes (newline included) of the lines after the last multiple of the snapshot
    # interval and before ``start``, as a continuing run's open counted them (a writer's row
    # schedule counts them: ``threads.store.fold_open.SnapshotSchedule``)
    bytes_before: int = 0

    @property
    def partial(self) -> bool:
        """Whether this is still the state restored from a snapshot (until ``become``): what
        it keeps of the lines through ``cut`` is not the whole fold's, even when ``events``
        hold every line (a window from the chain's first), so a rule may still need the
        whole chain (``SnapshotShortError``)."""
        return self.cut > 0

    def become(self, whole: Fold) -> None:
        """Take the state of ``whole``, the full fold of the same chain to the same head, in
        place: whoever holds this fold (a run's steps) sees every line from now on."""
        settled = self.settled_calls  # how far ``pending_calls`` looked: a full fold's too
        vars(self).update(vars(whole))
        self.cut, self.start, self.first_input, self.cut_time = 0, 1, None, None
        self.bytes_before = 0
        self.settled_calls = settled

    def event_by_id(self, event_id: str) -> Event | None:
        found = Fold.event_by_id(self, event_id)
        if found is None and self.partial:
            raise SnapshotShortError(f"event {event_id} is not after the snapshot")
        return found


def first_user_input(fold: Fold) -> Event | None:
    """The chain's first ``user_input`` (None before any), whether ``fold`` holds every event
    or was restored from a snapshot."""
    if isinstance(fold, RestoredFold) and fold.first_input is not None:
        return fold.first_input
    return next((e for e in fold.events if e.type == "user_input"), None)


def last_time(fold: Fold) -> int | None:
    """The time of the chain's last line (None when it has only headers)."""
    if fold.events:
        return fold.events[-1].time
    return fold.cut_time if isinstance(fold, RestoredFold) else None


class _Boundaries(set[int]):
    """Step boundaries after the cut; asking about an earlier seq needs the whole chain."""

    cut = 0

    def __contains__(self, seq: object) -> bool:
        if isinstance(seq, int) and seq < self.cut:
            raise SnapshotShortError(f"boundary at seq {seq} is before the snapshot")
        return set.__contains__(self, seq)


# A settled attempt as its row: seq, time, number, outcome, retry_not_before, the index of its
# settings epoch, usage, billing.
_Row = tuple[int, int, int, str | None, int | None, int, Usage | None, str | None]


class _Attempts(dict[str, ModelAttempt]):
    """``attempts`` with the settled ones whose line is not kept as their rows (seq, time,
    number, outcome, retry, settings, usage, billing) until one is asked for, and those rows as
    the body's bytes until any is: most opens never look one up, and the rows are the longest
    part of a long thread's body. (Their bytes were checked with the body's sha256, so they
    decode as ``dump`` wrote them.)"""

    def __init__(
        self, settled: bytes, count: int, settings: list[Epoch], header: Header
    ) -> None:
        super().__init__()
        self._settled = settled
        self._count = count  # rows in ``_settled``
        self._decoded: dict[str, _Row] | None = None
        self._settings = settings  # each distinct settings epoch once; a row names its index
        self._header = header

    @property
    def _rows(self) -> dict[str, _Row]:
        if self._decoded is None:
            try:
                self._decoded = cast(dict[str, _Row], fast_loads(self._settled))
            except ValueError as exc:
                raise SnapshotUnusableError(f"settled attempts do not decode ({exc})") from None
        return self._decoded

    def outcome(self, key: str) -> str | None:
        found = dict.get(self, key)
        if found is not None:
            return found.outcome
        row = self._rows.get(key)
        return None if row is None else row[3]

    def keep(self, event: Event, row: _Row) -> None:
        """Make the attempt ``event`` opened (of ``row``) a whole one (its line was kept)."""
        dict.__setitem__(self, event.event_id, self._attempt(event, row))

    def _attempt(self, event: Event, row: _Row) -> ModelAttempt:
        _, _, number, outcome, retry, settings, usage, billing = row
        return ModelAttempt(event, number, self._settings[settings], outcome, retry, usage,
                            billing)

    def _take(self, key: str) -> ModelAttempt | None:
        row = self._rows.pop(key, None)
        if row is None:
            return None
        seq, time = row[0], row[1]
        header = self._header
        # a settled older attempt's model_request as far as a rule reads it: id, seq, time
        event = Event(seq, key, header.thread_id, header.branch_id, 0, "model_request", 1, time,
                      {"kind": "host"}, "", False, {}, b"", "")
        attempt = self._attempt(event, row)
        dict.__setitem__(self, key, attempt)
        return attempt

    def _all(self) -> None:
        for key in list(self._rows):
            self._take(key)

    def __contains__(self, key: object) -> bool:
        return dict.__contains__(self, key) or key in self._rows

    def get(self, key: str, default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None:
            found = self._take(key)
        return default if found is None else found

    def __getitem__(self, key: str) -> ModelAttempt:
        found = self.get(key)
        if found is None:
            raise KeyError(key)
        return cast(ModelAttempt, found)

    def __len__(self) -> int:
        rows = self._count if self._decoded is None else len(self._decoded)
        return dict.__len__(self) + rows

    def __iter__(self) -> Iterator[str]:
        self._all()
        return dict.__iter__(self)

    def keys(self) -> dict_keys[str, ModelAttempt]:
        self._all()
        return dict.keys(self)

    def values(self) -> dict_values[str, ModelAttempt]:
        self._all()
        return dict.values(self)

    def items(self) -> dict_items[str, ModelAttempt]:
        self._all()
        return dict.items(self)


class _Responses(dict[str, Event]):
    """``response_of`` with older responses dropped: looking one of them up needs everything."""

    def __init__(self, attempts: _Attempts) -> None:
        super().__init__()
        self._attempts = attempts

    def get(self, key: str, default: Any = None) -> Any:
        found = dict.get(self, key)
        if found is None and self._attempts.outcome(key) == "response":
            raise SnapshotShortError(f"the response to {key} is before the snapshot")
        return default if found is None else found


class _TurnBody(TypedDict):
    input: str
    budget: Budget | None
    sent: bool
    budget_exceeded: bool
    cancel: str | None
    model_requests: int


class _ChildBody(TypedDict):
    child_thread_id: str
    call_id: str
    agent_name: str
    mode: str
    budget: Budget | None
    status: str
    usage: Usage | None


class _FeaturesBody(TypedDict):
    children: list[_ChildBody]
    todos: list[TodosUpdatedDataTodosItem]
    handoff: str | None
    mode: str | None
    settings: ModelSettings | None
    settings_event: str | None
    omit_reasoning_before: int
    boundary_at_head: bool
    accepted: tuple[JsonValue, int]
    style: str | None
    restyle_at: int | None


class _Body(TypedDict):
    """A body's first line as ``dump`` writes it (events as their lines' text)."""

    format: int
    headers: list[str]
    thread_started: ThreadStartedData | None
    tools: list[ToolSpec]
    head: tuple[int, str, int, int | None]  # last seq, last hash, epoch, time at the cut
    first_input: str | None
    flags: tuple[bool, bool]  # inspection_only, thread_cancelled
    turn: _TurnBody | None
    counts: tuple[int, int, int, int, int, int, int]
    calls: list[_CallBody]
    effect_order: list[str]
    attempts: list[tuple[str, _Row]]  # the attempts whose line is kept, with it
    settled_attempts: int
    settings_epochs: list[Epoch]
    open_attempt: str | None
    last_attempt: str | None
    last_response: str | None
    parks: list[tuple[ParkKind, str, ParkAddress]]
    approvals: dict[str, str]
    rules: list[tuple[str, str]]
    snapshots: list[tuple[int, str, int | None]]
    roles: str
    transcript: list[str]
    transcript_seqs: list[int]
    side_responses: list[Response]
    loaded_tools: list[str]
    compaction: _CompactionBody
    wakes: _WakesBody
    responses: list[Response]
    knowledge_revision: int | None
    snapshot_revision: list[tuple[int, int | None]]
    cache: tuple[tuple[int, int] | None, Cause | None, list[CacheBreak]]
    features: _FeaturesBody


def dump(fold: Fold) -> bytes:
    """The body of a snapshot of ``fold`` (see the module docstring)."""
    last = fold.last_attempt
    first = first_user_input(fold)
    epochs = _Epochs()
    # in seq order: a restored fold's attempts are in the order they were decoded, and the body
    # is the same bytes whichever way the fold was reached
    attempts = sorted(fold.attempts.items(), key=lambda item: item[1].event.seq)
    rows = {  # every attempt's row; those whose line is kept go with it, the rest apart
        key: [a.event.seq, a.event.time, a.attempt, a.outcome, a.retry_not_before,
              epochs.of(a.settings), a.usage, a.billing]
        for key, a in attempts
    }
    kept = [(k, a) for k, a in attempts if a is last or a.outcome in (None, "unknown")]
    roles, ids = zip(*fold.transcript, strict=True) if fold.transcript else ((), ())
    features = fold.features
    responses = fold.responses[-1:]  # a rule or a read looks at the last one only
    last_response = None
    if last is not None and last.event.event_id in fold.response_of:
        last_response = _text(fold.response_of[last.event.event_id])
    body = {
        "format": FORMAT,
        "headers": [h.line.decode() for h in fold.segment_headers],
        "thread_started": fold.thread_started,
        "tools": fold.tools,
        "head": [fold.last_seq, fold.last_hash, fold.epoch, last_time(fold)],
        "first_input": None if first is None else _text(first),
        "flags": [fold.inspection_only, fold.thread_cancelled],
        "turn": None if fold.turn is None else _turn(fold.turn),
        "counts": [fold.turns_completed, fold.settled_calls, fold.model_requests,
                   fold.input_tokens, fold.output_tokens, fold.unknown_responses, fold.open_calls],
        "calls": [_call(fold.calls[c]) for c in fold.call_order],
        "effect_order": fold.effect_order,
        "attempts": [[_text(a.event), rows.pop(key)] for key, a in kept],
        "settled_attempts": len(rows),
        "settings_epochs": epochs.values,
        "open_attempt": None if fold.open_attempt is None else fold.open_attempt.event.event_id,
        "last_attempt": None if last is None else last.event.event_id,
        "last_response": last_response,
        "parks": [[kind, ident, address] for (kind, ident), address in fold.parks.items()],
        "approvals": {cid: call.call_id for cid, call in fold.approvals.items()},
        "rules": fold.thread_rules,
        "snapshots": fold.snapshots,
        "roles": "".join(map(_ROLES.__getitem__, roles)),
        "transcript": ids,
        "transcript_seqs": fold.transcript_seqs,
        "side_responses": fold.side_responses,
        "loaded_tools": sorted(fold.loaded_tools),
        "compaction": _compaction(fold.compaction),
        "wakes": _wakes(fold.wakes, None if fold.turn is None else fold.turn.input_event),
        "responses": responses,
        "knowledge_revision": fold.knowledge_revision,
        "snapshot_revision": [
            [seq, rev] for seq, rev in fold.snapshot_revisions.items() if seq >= fold.last_seq
        ],
        "cache": [fold.cache.previous, fold.cache.cause, fold.cache.breaks],
        "features": {
            "children": [asdict(c) for c in features.children.values()],
            "todos": features.todos,
            "handoff": None if features.handoff is None else _text(features.handoff),
            "mode": features.mode,
            "settings": features.settings,
            "settings_event": (
                None if features.settings_event is None else _text(features.settings_event)
            ),
            "omit_reasoning_before": features.omit_reasoning_before,
            "boundary_at_head": _at_boundary(fold),
            "accepted": [features.accepted_output, features.accepted_seq],
            "style": None if features.style is None else _text(features.style),
            "restyle_at": features.restyle_at,
        },
    }
    return b"\n".join([compact_dumps(body), compact_dumps(rows)])  # no raw newline in either


class _Epochs:
    """The attempts' settings epochs, each distinct one once in the order first seen
    (``values``); ``of`` is one's index, looked up by the object before comparing values (a
    long thread's attempts share a few settings objects)."""

    def __init__(self) -> None:
        self.values: list[Epoch] = []
        self._at: dict[int, int] = {}  # id of a settings object -> its index

    def of(self, settings: Epoch) -> int:
        at = self._at.get(id(settings))
        if at is None:
            try:
                at = self.values.index(settings)  # equal to one seen in another object
            except ValueError:
                at = len(self.values)
                self.values.append(settings)
            self._at[id(settings)] = at
        return at


def restore(body: bytes, now_ms: int | None) -> RestoredFold:
    """The fold ``body`` holds; ``SnapshotUnusableError`` for a body this code can't take whole.
    The settled attempts' line is decoded when one is first asked for: ``body`` is bytes whose
    sha256 was checked against the one written with them (``StoredSnapshot.intact``)."""
    try:
        main, newline, settled = body.partition(b"\n")
        value = cast(_Body, fast_loads(main))  # as dump wrote it, else refused below
        if value.get("format") != FORMAT:
            raise SnapshotUnusableError(f"snapshot format {value.get('format')!r} is not {FORMAT}")
        if not newline:
            raise SnapshotUnusableError("snapshot body has no settled attempts part")
        return _restore(value, settled, now_ms)
    except SnapshotUnusableError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, IndexError) as exc:
        raise SnapshotUnusableError(f"snapshot body does not decode ({exc!r})") from None


def _restore(value: _Body, settled: bytes, now_ms: int | None) -> RestoredFold:
    headers = [_header(line) for line in value["headers"]]
    last_seq, last_hash, epoch, cut_time = value["head"]
    first = value["first_input"]
    fold = RestoredFold(now_ms=now_ms, cut=last_seq, start=last_seq + 1,
                        first_input=None if first is None else _event(first), cut_time=cut_time)
    fold.segment_headers = headers
    fold.root_header, fold.header_ = headers[0], headers[-1]
    fold.thread_started = value["thread_started"]
    fold.tools = value["tools"]
    fold.last_seq, fold.last_hash, fold.epoch = last_seq, last_hash, epoch
    fold.inspection_only, fold.thread_cancelled = value["flags"]
    (fold.turns_completed, fold.settled_calls, fold.model_requests, fold.input_tokens,
     fold.output_tokens, fold.unknown_responses, fold.open_calls) = value["counts"]
    fold.turn = None if value["turn"] is None else _restore_turn(value["turn"])
    fold.calls = {c.call_id: c for c in map(_restore_call, value["calls"])}
    fold.call_order = list(fold.calls)
    fold.effect_order = value["effect_order"]
    _restore_attempts(fold, value, settled, headers[-1])
    fold.parks = {(kind, ident): address for kind, ident, address in value["parks"]}
    fold.approvals = {cid: fold.calls[call_id] for cid, call_id in value["approvals"].items()}
    fold.thread_rules = [(rule, decision) for rule, decision in value["rules"]]
    fold.snapshots = [(seq, eid, expires) for seq, eid, expires in value["snapshots"]]
    roles, ids = value["roles"], value["transcript"]
    if len(roles) != len(ids):
        raise SnapshotUnusableError("transcript roles and ids differ in length")
    fold.transcript = list(zip(map(_ROLE_NAMES.__getitem__, roles), ids, strict=True))
    fold.transcript_seqs = value["transcript_seqs"]
    if len(fold.transcript_seqs) != len(ids):
        raise SnapshotUnusableError("transcript seqs and ids differ in length")
    fold.side_responses = value["side_responses"]
    fold.loaded_tools = set(value["loaded_tools"])
    fold.compaction = _restore_compaction(value["compaction"])
    fold.wakes = _restore_wakes(value["wakes"])
    fold.responses = value["responses"]
    fold.knowledge_revision = value["knowledge_revision"]
    fold.snapshot_revisions = dict(value["snapshot_revision"])
    fold.features = _restore_features(value["features"], last_seq)
    previous, cause, breaks = value["cache"]
    fold.cache = CacheBreaks(None if previous is None else (previous[0], previous[1]), cause,
                             breaks)
    return fold


def _restore_attempts(
    fold: RestoredFold, value: _Body, settled: bytes, header: Header
) -> None:
    attempts = _Attempts(settled, value["settled_attempts"], value["settings_epochs"], header)
    for line, row in value["attempts"]:
        attempts.keep(_event(line), row)
    fold.attempts = attempts
    open_id, last_id = value["open_attempt"], value["last_attempt"]
    fold.open_attempt = None if open_id is None else attempts[open_id]
    fold.last_attempt = None if last_id is None else attempts[last_id]
    responses = _Responses(attempts)
    if value["last_response"] is not None and last_id is not None:  # dump writes both or none
        responses[last_id] = _event(value["last_response"])
    fold.response_of = responses


def _restore_features(value: _FeaturesBody, cut: int) -> Features:
    boundaries = _Boundaries()
    boundaries.cut = cut
    if value["boundary_at_head"]:
        boundaries.add(cut)
    accepted_output, accepted_seq = value["accepted"]
    return Features(
        children={c["child_thread_id"]: Child(**c) for c in value["children"]},
        todos=value["todos"],
        handoff=None if value["handoff"] is None else _event(value["handoff"]),
        mode=value["mode"],
        settings=value["settings"],
        settings_event=(
            None if value["settings_event"] is None else _event(value["settings_event"])
        ),
        omit_reasoning_before=value["omit_reasoning_before"],
        boundaries=boundaries,
        accepted_output=accepted_output,
        accepted_seq=accepted_seq,
        style=None if value["style"] is None else _event(value["style"]),
        restyle_at=value["restyle_at"],
    )


def _at_boundary(fold: Fold) -> bool:
    try:
        return fold.last_seq in fold.features.boundaries
    except SnapshotShortError:  # a restored fold folded nothing yet: the cut is the head
        return False


def _turn(turn: Turn) -> _TurnBody:
    return {
        "input": _text(turn.input_event),
        "budget": turn.budget,
        "sent": turn.sent,
        "budget_exceeded": turn.budget_exceeded,
        "cancel": None if turn.cancel_event is None else _text(turn.cancel_event),
        "model_requests": turn.model_requests,
    }


def _restore_turn(value: _TurnBody) -> Turn:
    cancel = value["cancel"]
    return Turn(
        input_event=_event(value["input"]),
        budget=value["budget"],
        sent=value["sent"],
        budget_exceeded=value["budget_exceeded"],
        cancel_event=None if cancel is None else _event(cancel),
        model_requests=value["model_requests"],
    )


class _CallFields(TypedDict):
    """The fields of a ``Call`` a body keeps as they are."""

    call_id: str
    name: str
    input: JsonObject
    request_event_id: str
    branch_id: str
    seq: int
    spec: ToolSpec | None
    event_id: str
    removed: bool
    decision: str | None
    decision_source: str | None
    decision_reason: str | None
    effect: EffectStatus | None
    attempt: int
    first_begin_time: int | None
    unknown_reason: str | None
    resolution: str | None
    result_ref: ArtifactRef | None
    result: ToolResultData | None
    late_result: ToolResultLateData | None
    parked: bool
    retry_not_before: int | None


class _ApprovalBody(TypedDict):
    challenge_id: str
    args_hash: str
    expires_at: int
    state: str
    decided_by: Principal | None
    reason: str | None
    used: bool


class _CallBody(_CallFields):
    # always written; NotRequired only so that a restore may pop them before ``Call(**...)``
    approval: NotRequired[_ApprovalBody | None]
    begin: NotRequired[str | None]  # the last effect_begin's line


_CALL_FIELDS = tuple(_CallFields.__annotations__)


def _call(call: Call) -> dict[str, object]:
    body: dict[str, object] = {name: getattr(call, name) for name in _CALL_FIELDS}
    body["approval"] = None if call.approval is None else asdict(call.approval)
    body["begin"] = None if call.begin_event is None else _text(call.begin_event)
    return body


def _restore_call(value: _CallBody) -> Call:
    approval = value.pop("approval")
    begin = value.pop("begin")
    fields: _CallFields = value  # the two popped: exactly Call's other fields
    call = Call(**fields)
    call.approval = None if approval is None else Approval(**approval)
    call.begin_event = None if begin is None else _event(begin)
    return call


class _CompactionBody(TypedDict):
    first_input_seq: int | None
    requested: str | None
    side_requests: list[str]
    ranges: list[tuple[int, int]]
    failures: int
    pending_side: str | None


def _compaction(state: Compaction) -> _CompactionBody:
    return {
        "first_input_seq": state.first_input_seq,
        "requested": None if state.requested is None else _text(state.requested),
        "side_requests": sorted(state.side_requests),
        "ranges": state.ranges,
        "failures": state.failures,
        "pending_side": None if state.pending_side is None else _text(state.pending_side),
    }


def _restore_compaction(value: _CompactionBody) -> Compaction:
    requested, pending = value["requested"], value["pending_side"]
    return Compaction(
        first_input_seq=value["first_input_seq"],
        requested=None if requested is None else _event(requested),
        side_requests=set(value["side_requests"]),
        ranges=[(start, end) for start, end in value["ranges"]],
        failures=value["failures"],
        pending_side=None if pending is None else _event(pending),
    )


class _WakesBody(TypedDict):
    runs: list[tuple[Principal | None, str]]
    opened: dict[str, int]
    spawns: dict[str, tuple[int, int, bool]]
    ended_badly: list[str]
    woken: list[str]
    cancel_seq: int


def _wakes(state: Wakes, opener: Event | None) -> _WakesBody:
    """``state`` as the rules can still read it: a turn's run is looked up only by the open
    turn's opener (``Wakes.spawned``, ``turn_ended``), so of ``runs`` only that one is kept, and
    the runs the spawns name."""
    opened = {} if opener is None or opener.event_id not in state.runs else {
        opener.event_id: state.runs[opener.event_id]
    }
    runs = list({id(run): run for run in [*opened.values(),
                                          *(s.run for s in state.spawns.values())]}.values())
    index = {id(run): i for i, run in enumerate(runs)}  # a run is one object many entries share
    return {
        "runs": [(run.principal, run.root) for run in runs],
        "opened": {key: index[id(run)] for key, run in opened.items()},
        "spawns": {
            call_id: (index[id(spawn.run)], spawn.seq, spawn.background)
            for call_id, spawn in state.spawns.items()
        },
        "ended_badly": sorted(state.ended_badly),
        "woken": sorted(state.woken),
        "cancel_seq": state.cancel_seq,
    }


def _restore_wakes(value: _WakesBody) -> Wakes:
    runs = [RunRef(principal, root) for principal, root in value["runs"]]
    return Wakes(
        runs={opener: runs[i] for opener, i in value["opened"].items()},
        spawns={
            call_id: Spawn(runs[i], seq, background)
            for call_id, (i, seq, background) in value["spawns"].items()
        },
        ended_badly=set(value["ended_badly"]),
        woken=set(value["woken"]),
        cancel_seq=value["cancel_seq"],
    )


def _text(event: Event) -> str:
    return event.line.decode()


def _event(text: str) -> Event:
    line = text.encode()
    return event_from_value(fast_loads(line), line)


def _header(text: str) -> Header:
    line = text.encode()
    return header_from_value(fast_loads(line), line)
