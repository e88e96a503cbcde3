"""What ``Thread.state()``, ``usage()``, ``cost()`` and ``fork_points()`` return: frozen, typed
values read back from a thread's log.

Each is projected from a ``Fold`` (the reduced log) and nothing else, so two processes reading
the same log get equal values. ``ThreadCost`` never passes an unknown spend off as zero: without
a declared price its nanos are ``None`` and ``priced`` is false.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import starmap
from typing import Literal, cast

from threads.errors import LogError
from threads.log.reduce import EffectStatus, Fold, ParkKind, ThreadStatus


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
    pinned price; ``upper_bound_nanos`` adds every unreported or in-doubt attempt at the model's
    bound. ``complete``: nothing is unreported or in doubt. ``bounded``: the upper bound is a
    real bound. Without a price (``priced`` false) the spend is unknown: both nanos are
    ``None`` and neither ``complete`` nor ``bounded`` holds."""

    currency: str
    priced: bool
    known_nanos: int | None
    upper_bound_nanos: int | None
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


def cost_of(fold: Fold) -> ThreadCost:
    wire = fold.cost()
    _, price, _ = fold.model_price()
    if price is None:
        return ThreadCost(wire["currency"], False, None, None, complete=False, bounded=False)
    return ThreadCost(
        wire["currency"],
        True,
        wire["known_nanos"],
        wire["upper_bound_nanos"],
        complete=wire["complete"],
        bounded=wire["bounded"],
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
        transcript=tuple(
            starmap(TranscriptItem, cast(list[tuple[TranscriptRole, str]], fold.transcript))
        ),
    )
