"""Who may decide for a thread: the one authority rule that every control (``approve``,
``deny``, ``resolve_parked``, ``cancel``) applies before it appends, and that a run applies again
to a recorded decision before acting on it.

The rule: a principal of another tenant never; else one of the agent's ``approvers`` when it
names them; else the thread's starter (the principal of the root's first ``user_input``; a
thread nobody started yet has no starter to protect). A handle's own ``approvers`` can only
narrow that set, never widen it.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.log.fold import Fold
from threads.log.fold.saved import first_user_input
from threads.log.lines import Event
from threads.log.vocabulary import data_of
from threads.principal import Principal


def starter(fold: Fold) -> Principal | None:
    """The principal of the thread's first ``user_input`` (None before any)."""
    root = first_user_input(fold)
    wire = root.actor.get("principal") if root is not None else None
    return Principal.from_wire(wire) if isinstance(wire, dict) else None


def refusal(
    fold: Fold,
    principal: Principal,
    *,
    tenant: str,
    agent_approvers: Sequence[Principal] | None,
    narrowed_to: Sequence[Principal] | None = None,
) -> str | None:
    """Why ``principal`` may not decide for this thread, or None when it may."""
    return refusal_given(
        starter(fold), principal, tenant=tenant, agent_approvers=agent_approvers,
        narrowed_to=narrowed_to,
    )


def refusal_given(
    first: Principal | None,
    principal: Principal,
    *,
    tenant: str,
    agent_approvers: Sequence[Principal] | None,
    narrowed_to: Sequence[Principal] | None = None,
) -> str | None:
    """The rule for a thread whose starter is ``first`` (None: nobody started it yet)."""
    if principal.tenant != tenant:
        return "a principal of another tenant can't act on this thread"
    if narrowed_to is not None and principal not in narrowed_to:
        return f"{principal.subject} is not among the approvers this handle was opened with"
    if agent_approvers is not None:
        if principal in agent_approvers:
            return None
        return f"{principal.subject} is not one of the agent's approvers"
    if first is None or first == principal:
        return None
    return (
        f"{principal.subject} may not decide for this thread: only the principal who started"
        " it may (or the agent's approvers, where the agent that runs it is known)"
    )


def recorded_refusal(
    fold: Fold,
    wire: object,
    *,
    tenant: str,
    agent_approvers: Sequence[Principal] | None,
) -> str | None:
    """The rule applied to a decision already in the log, made by the principal ``wire`` (its
    actor's): why it must be treated as not made, or None when it stands."""
    if not isinstance(wire, dict):
        return "it names no principal"
    try:
        principal = Principal.from_wire(wire)
    except (KeyError, TypeError, ValueError):
        return "its principal is malformed"
    return refusal(fold, principal, tenant=tenant, agent_approvers=agent_approvers)


def human_resolution(fold: Fold, call_id: str) -> Event | None:
    """The call's latest ``effect_resolved`` when a person made it: ``by: human``, or any
    resolution whose actor names a principal (a run's own proofs are written as ``recovery``)."""
    for event in reversed(fold.events):
        if event.type != "effect_resolved":
            continue
        data = data_of(event, "effect_resolved")
        if data["call_id"] == call_id:
            made_by_a_person = data["by"] == "human" or "principal" in event.actor
            return event if made_by_a_person else None
    return None
