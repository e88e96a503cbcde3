"""The three kinds of log line as values: ``Header`` (a branch's first line), ``Event`` (the
envelope plus its ``data``) and ``Head`` (the checkpoint closing an export).

Each value keeps the exact bytes it was read from or written as (``line``) and their hash, so
nothing is ever re-serialized once stored. ``encode_event`` is the only way events are written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from operator import add, itemgetter
from typing import Any, NamedTuple, TypedDict, Unpack

from threads.log.canonical import JsonValue, canonical
from threads.log.event_types import Actor, EventType
from threads.log.hashing import sha256_hex, sha256_hexes
from threads.log.ids import uuid7
from threads.log.json_types import JsonObject

FORMAT_LOG = "threads.log"
FORMAT_HEAD = "threads.head"
FORMAT_VERSION = 1
WRITER_IMPL = "threads-py"
WRITER_VERSION = "0.1.0"

# Known types that a reader without them may skip; every other known type is critical.
NON_CRITICAL_TYPES: frozenset[str] = frozenset(
    {"log_repaired", "park_escalated", "schedule_skipped"}
)

# An event's data as its line holds it: JSON. ``threads.log.vocabulary.data_of`` reads it as its
# type's TypedDict.
Data = JsonObject


class Draft(NamedTuple):
    """An event a writer wants appended, before it gets its seq, epoch and hash: a
    ``(type, data, actor)`` triple. ``threads.log.vocabulary.draft`` builds one with data of its
    type's shape."""

    type: EventType
    data: Data
    actor: Actor


@dataclass(frozen=True, slots=True)
class Header:
    thread_id: str
    branch_id: str
    created_at: int
    writer_impl: str
    writer_version: str
    line: bytes = field(repr=False)
    hash: str = field(repr=False)


class Event(NamedTuple):
    """One event line. A tuple (immutable, and cheap to build: a read of a long branch builds
    one per line) whose fields are the envelope's, in this order, then the line and its hash.

    ``data`` is the line's JSON object (``JsonObject``); ``threads.log.vocabulary.data_of(event,
    "<type>")`` reads it as that type's TypedDict, so a type checker knows each field."""

    seq: int
    event_id: str
    thread_id: str
    branch_id: str
    epoch: int
    type: EventType  # a skipped unknown non-critical event keeps its own name here
    type_version: int
    time: int
    actor: Actor
    prev_hash: str
    critical: bool
    data: Data
    line: bytes
    hash: str

    @property
    def actor_kind(self) -> str:
        return str(self.actor["kind"])

    def __repr__(self) -> str:  # without the line and its hash
        shown = zip(self._fields[:-2], self, strict=False)
        return "Event(" + ", ".join(f"{name}={value!r}" for name, value in shown) + ")"


@dataclass(frozen=True, slots=True)
class Head:
    branch_id: str
    seq: int
    hash: str

    def line(self) -> bytes:
        return canonical(
            {
                "branch_id": self.branch_id,
                "format": FORMAT_HEAD,
                "format_version": FORMAT_VERSION,
                "hash": self.hash,
                "seq": self.seq,
            }
        )


def make_header(thread_id: str, branch_id: str, created_at: int) -> Header:
    line = canonical(
        {
            "branch_id": branch_id,
            "created_at": created_at,
            "format": FORMAT_LOG,
            "format_version": FORMAT_VERSION,
            "thread_id": thread_id,
            "writer": {"impl": WRITER_IMPL, "version": WRITER_VERSION},
        }
    )
    return Header(
        thread_id, branch_id, created_at, WRITER_IMPL, WRITER_VERSION, line, sha256_hex(line)
    )


def first_event(header: Header, draft: Draft, *, seq: int = 1, epoch: int = 1) -> Event:
    """A new branch's first event (``draft``, built by ``threads.log.vocabulary.draft``),
    chained to ``header`` and written together with it when the branch is created: a root's
    (seq 1, epoch 1), or a child's ``fork`` (``seq`` at_seq + 1, at the parent's epoch there)."""
    return encode_event(
        seq=seq,
        event_id=uuid7(header.created_at),
        thread_id=header.thread_id,
        branch_id=header.branch_id,
        epoch=epoch,
        type=draft.type,
        time=header.created_at,
        actor=draft.actor,
        prev_hash=header.hash,
        data=draft.data,
    )


def next_event(previous: Event, draft: Draft, time: int) -> Event:
    """The event (``draft``) after ``previous`` on its branch, at its epoch: for a batch written
    together with the branch (a new thread's ``thread_started`` and first ``user_input``)."""
    return encode_event(
        seq=previous.seq + 1,
        event_id=uuid7(time),
        thread_id=previous.thread_id,
        branch_id=previous.branch_id,
        epoch=previous.epoch,
        type=draft.type,
        time=time,
        actor=draft.actor,
        prev_hash=previous.hash,
        data=draft.data,
    )


def header_from_value(value: Mapping[str, Any], line: bytes) -> Header:
    """The header ``line`` decodes to (``value``), taken as it reads: its caller has checked it
    (admission against the header schema; a stored segment by its chain's hashes)."""
    writer = value["writer"]
    return Header(
        value["thread_id"],
        value["branch_id"],
        value["created_at"],
        writer["impl"],
        writer["version"],
        line,
        sha256_hex(line),
    )


# The envelope's keys in ``Event`` field order, and their values (one C call per line).
_ENVELOPE_KEYS = (
    "seq", "event_id", "thread_id", "branch_id", "epoch", "type", "type_version", "time",
    "actor", "prev_hash", "critical", "data",
)
_ENVELOPE = itemgetter(*_ENVELOPE_KEYS)


def event_from_value(value: JsonObject, line: bytes) -> Event:
    """The event ``line`` decodes to (``value``); a missing envelope key is a ``KeyError``."""
    return Event._make((*_ENVELOPE(value), line, sha256_hex(line)))


_new_event = partial(tuple.__new__, Event)


def events_from_values(values: Sequence[JsonObject], lines: Sequence[bytes]) -> list[Event]:
    """``event_from_value`` of each value and its line, in C loops (a read of a long branch
    builds one event per line); a value that is no envelope raises as it does there."""
    stored = zip(lines, sha256_hexes(lines), strict=True)
    return list(map(_new_event, map(add, map(_envelope_of(values), values), stored)))


def _envelope_of(values: Sequence[JsonObject]) -> itemgetter[Any]:
    """``_ENVELOPE`` with the key objects of the first value: a decoder reuses one object per
    key from line to line (orjson does), and a lookup by the very object the dict holds skips
    comparing the strings. Any other value is looked up by equal keys, as ever."""
    first = values[0] if values else None
    if type(first) is not dict or len(first) != len(_ENVELOPE_KEYS):
        return _ENVELOPE
    own = {key: key for key in first}
    try:
        return itemgetter(*(own[key] for key in _ENVELOPE_KEYS))
    except KeyError:
        return _ENVELOPE


class EventFields(TypedDict):
    """What a writer chooses of an event line; ``type_version`` (1) and ``critical`` (pinned by
    the type) follow from them."""

    seq: int
    event_id: str
    thread_id: str
    branch_id: str
    epoch: int
    type: EventType
    time: int
    actor: Actor
    prev_hash: str
    data: Data


def event_line(**fields: Unpack[EventFields]) -> bytes:
    """The canonical bytes of an event line at ``type_version`` 1; ``critical`` is pinned by
    the type. Every writer's line is made here (``encode_event``, ``encode_admitted``)."""
    value: dict[str, JsonValue] = {
        **fields, "critical": fields["type"] not in NON_CRITICAL_TYPES, "type_version": 1,
    }
    return canonical(value)


def encode_event(**fields: Unpack[EventFields]) -> Event:
    """Write one event line in canonical form; ``critical`` is pinned by the type."""
    line = event_line(**fields)
    return Event(
        fields["seq"],
        fields["event_id"],
        fields["thread_id"],
        fields["branch_id"],
        fields["epoch"],
        fields["type"],
        1,
        fields["time"],
        fields["actor"],
        fields["prev_hash"],
        fields["type"] not in NON_CRITICAL_TYPES,
        fields["data"],
        line,
        sha256_hex(line),
    )
