"""What ``Thread.state()``, ``usage()``, ``cost()``, ``fork_points()`` and ``children()``
return: frozen, typed values read back from a thread's log.

Each is projected from a ``Fold`` (the reduced log) and nothing else, so two processes reading
the same log get equal values. ``ThreadCost`` never passes an unknown spend off as zero: an
attempt on a model without a price leaves the cost neither complete nor bounded.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import starmap
from types import MemberDescriptorType
from typing import Literal, cast

from threads.errors import LogError
from threads.log.fold import EffectStatus, Fold, ParkKind, ThreadStatus


@dataclass(frozen=True, slots=True)
class Head:
    """The last event of the branch: its seq and the hash the chain ends on."""

    seq: int
    hash: str


@dataclass(frozen=True, slots=True)
class EffectState:
    """One effectful call (in the order its first ``effect_begin`` was written)."""

    effect_key: str
    call_id: str
    status: EffectStatus | None


@dataclass(frozen=True, slots=True)
class ParkAddress:
    """What the thread is parked on: ``kind`` and its id (challenge id, effect key, call id)."""

    kind: ParkKind
    id: str


ChildStatus = Literal["running", "completed", "failed", "cancelled", "budget_exhausted"]


@dataclass(frozen=True, slots=True)
class Child:
    """A subagent thread this thread spawned (``spawn_agent``), in spawn order: ``running``
    until its one ``agent_finished`` records how it ended. ``call_id``: the call that spawned
    it; ``mode``: ``foreground`` or ``background``."""

    thread_id: str
    agent_name: str
    status: ChildStatus
    mode: Literal["foreground", "background"]
    call_id: str


def children_of(fold: Fold) -> tuple[Child, ...]:
    return tuple(
        Child(c.child_thread_id, c.agent_name, cast(ChildStatus, c.status),
              cast(Literal["foreground", "background"], c.mode), c.call_id)
        for c in fold.features.children.values()
    )


@dataclass(frozen=True, slots=True)
class ForkPoint:
    """A quiescent, unexpired snapshot: ``Thread.fork(snapshot_event_id, ...)`` starts there."""

    seq: int
    snapshot_event_id: str


TranscriptRole = Literal["user", "assistant", "tool", "context", "summary"]


@dataclass(frozen=True, slots=True)
class TranscriptItem:
    """One message of the conversation, by the event that holds it."""

    role: TranscriptRole
    event_id: str


@dataclass(frozen=True, slots=True)
class ThreadUsage:
    """Tokens the provider reported, and how many replies came without a usage report."""

    input_tokens: int
    output_tokens: int
    unknown_responses: int
    model_requests: int
    turns_completed: int


@dataclass(frozen=True, slots=True)
class ThreadCost:
    """Spend in nano-units of ``currency``. ``known_nanos`` is what reported usage cost at the
    pinned price; ``upper_bound_nanos`` adds every unreported or in-doubt attempt at its bound.
    ``complete``: every attempt's cost is known exactly. ``bounded``: the upper bound is a real
    bound (false once an attempt ran on a model without a price, or without a bound)."""

    currency: str
    known_nanos: int
    upper_bound_nanos: int
    complete: bool
    bounded: bool


@dataclass(frozen=True, slots=True)
class ThreadState:
    """The reduced state of one branch (the log format's ReducedState)."""

    thread_id: str
    branch_id: str
    head: Head
    epoch: int
    status: ThreadStatus
    turns_completed: int
    pending_calls: tuple[str, ...]
    effects: tuple[EffectState, ...]
    parked: tuple[ParkAddress, ...]
    fork_points: tuple[ForkPoint, ...]
    usage: ThreadUsage
    transcript: tuple[TranscriptItem, ...]


def fork_points_of(fold: Fold) -> tuple[ForkPoint, ...]:
    return tuple(starmap(ForkPoint, fold.fork_points()))


def usage_of(fold: Fold) -> ThreadUsage:
    return ThreadUsage(
        input_tokens=fold.input_tokens,
        output_tokens=fold.output_tokens,
        unknown_responses=fold.unknown_responses,
        model_requests=fold.model_requests,
        turns_completed=fold.turns_completed,
    )


def cost_of(fold: Fold) -> ThreadCost | None:
    """None when the thread's policy names no currency (its models have no price); raises
    ``ThreadsError("cost_overflow")`` when a sum passes 2^53-1."""
    cost = fold.cost()
    if cost is None:
        return None
    return ThreadCost(
        cost.currency,
        cost.known_nanos,
        cost.upper_bound_nanos,
        complete=cost.complete,
        bounded=cost.bounded,
    )


def state_of(fold: Fold) -> ThreadState:
    """The fold's ``state()`` as typed values, read from the fold directly (not through the
    wire dicts, which a long thread's transcript would make thousands of)."""
    header = fold.header_
    if header is None:
        raise LogError("invalid_transition", "no header was read", seq=0)
    calls = fold.calls
    return ThreadState(
        thread_id=header.thread_id,
        branch_id=header.branch_id,
        head=Head(fold.last_seq, fold.last_hash),
        epoch=fold.epoch,
        status=fold.status,
        turns_completed=fold.turns_completed,
        pending_calls=tuple(call.call_id for call in fold.pending_calls()),
        effects=tuple(
            EffectState(call.effect_key, call.call_id, call.effect)
            for call in (calls[c] for c in fold.effect_order)
        ),
        parked=tuple(ParkAddress(kind, ident) for kind, ident in fold.parks),
        fork_points=fork_points_of(fold),
        usage=usage_of(fold),
        transcript=_transcript(fold.transcript),
    )


_ROLE_SLOT = cast(MemberDescriptorType, TranscriptItem.__dict__["role"])
_EVENT_ID_SLOT = cast(MemberDescriptorType, TranscriptItem.__dict__["event_id"])


def _transcript(items: list[tuple[str, str]]) -> tuple[TranscriptItem, ...]:
    """The transcript's items, each set through its slots rather than the frozen
    ``__init__`` (an ``object.__setattr__`` call per field): the same values in about half
    the time, which is most of ``state()`` on a long thread (50,000 items at 100,001 events)."""
    new, set_role, set_event_id = object.__new__, _ROLE_SLOT.__set__, _EVENT_ID_SLOT.__set__
    out = []
    for role, event_id in items:
        item = new(TranscriptItem)
        set_role(item, role)
        set_event_id(item, event_id)
        out.append(item)
    return tuple(out)
