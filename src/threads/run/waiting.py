"""What a thread waits on a person for, read from its fold alone: open approval challenges,
parked effects and open questions (``ask_user``), each with who asked and since when.

Invariant: nothing here reads a clock. An approval past its ``expires_at`` is still listed
(deciding it answers ``approval_expired``); a caller that shows only live ones filters by its
own ``now``. So a ``Waiting`` made at a head stays true for as long as the head does not move,
and the host keeps one per thread by head (``threads.host.summaries``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from threads.log.fold import Fold
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import (
    data_of,
)
from threads.principal import Principal
from threads.run.park_info import ParkFacts, park_facts, parked_event
from threads.tools.tool import Tool

ToolNamed = Callable[[str], Tool | None]


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """What an approver decides on: the tool, its arguments (``input``), its effect class, the
    hash a grant binds to, who asked (the principal of the turn that made the call, if any)
    and when the request expires (Unix ms; it counts as denied after)."""

    challenge_id: str
    call_id: str
    tool: str
    input: JsonObject
    args_hash: str
    expires_at: int
    effect_class: str
    requested_by: Principal | None
    requested_at: int  # when the challenge was recorded (Unix ms)


@dataclass(frozen=True, slots=True)
class OpenQuestion:
    """A question the model asked (``ask_user``) that waits for its answer: only ``asked_by``
    (the principal whose input opened the turn) may answer it."""

    call_id: str
    question: str
    options: tuple[str, ...] | None
    multi_select: bool
    asked_by: Principal | None
    asked_at: int
    expires_at: int | None


@dataclass(frozen=True, slots=True)
class Waiting:
    approvals: tuple[PendingApproval, ...]
    effects: tuple[ParkFacts, ...]
    questions: tuple[OpenQuestion, ...]

    def __len__(self) -> int:
        return len(self.approvals) + len(self.effects) + len(self.questions)


def waiting_on(fold: Fold, tool_named: ToolNamed, gone: frozenset[int] = frozenset()) -> Waiting:
    """Everything ``fold``'s branch waits on a person for. ``tool_named``: the agent's tools
    (what a tool allows adds to a park's facts), or a lookup that knows none; ``gone``: the
    epochs whose holders are proven dead (``threads.run.holders.gone_holders``)."""
    return Waiting(
        tuple(pending_approvals(fold)), tuple(effect_parks(fold, tool_named, gone)),
        tuple(open_questions(fold)),
    )


def pending_approvals(fold: Fold) -> list[PendingApproval]:
    out = []
    for challenge_id, call in fold.approvals.items():
        approval = call.approval
        if (
            approval is not None
            and approval.challenge_id == challenge_id  # not one a new challenge replaced
            and approval.state == "open"
            and call.result is None
        ):
            requested = _requested(fold, challenge_id)
            out.append(
                PendingApproval(
                    challenge_id,
                    call.call_id,
                    call.name,
                    call.input,
                    approval.args_hash,
                    approval.expires_at,
                    call.effect_class,
                    asked_by(fold, call.seq),
                    requested.time if requested is not None else 0,
                )
            )
    return out


def effect_parks(
    fold: Fold, tool_named: ToolNamed, gone: frozenset[int] = frozenset()
) -> list[ParkFacts]:
    out = []
    for kind, key in fold.parks:
        call = next((c for c in fold.calls.values() if c.effect_key == key), None)
        if kind == "effect" and call is not None:
            out.append(park_facts(fold, call, tool_named(call.name), gone))
    return out


def open_questions(fold: Fold) -> list[OpenQuestion]:
    out = []
    for kind, call_id in fold.parks:
        call = fold.calls.get(call_id)
        if kind != "input" or call is None:
            continue
        park = parked_event(fold, {"id": call_id, "kind": "input"})
        options = call.input.get("options")
        out.append(
            OpenQuestion(
                call_id,
                str(call.input.get("question", "")),
                tuple(str(o) for o in options) if isinstance(options, list) else None,
                bool(call.input.get("multi_select", False)),
                asked_by(fold, call.seq),
                park.time if park is not None else 0,
                data_of(park, "parked").get("expires_at") if park is not None else None,
            )
        )
    return out


def asked_by(fold: Fold, seq: int) -> Principal | None:
    """The principal of the input that opened the turn a call at ``seq`` belongs to."""
    opened = None
    for event in fold.events:
        if event.seq >= seq:
            break
        if event.type == "user_input":
            opened = event.actor.get("principal")
    return Principal.from_wire(opened) if isinstance(opened, dict) else None


def _requested(fold: Fold, challenge_id: str) -> Event | None:
    """The ``approval_requested`` that opened challenge ``challenge_id``."""
    return next(
        (e for e in reversed(fold.events) if e.type == "approval_requested"
         and data_of(e, "approval_requested")["challenge_id"] == challenge_id),
        None,
    )
