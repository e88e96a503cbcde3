"""Who may decide for a thread: the one authority rule every control, and every run that acts on
a recorded decision, applies.

The agent's approvers when it names them, else the thread's starter (the principal of the root's
first ``user_input``); a principal of another tenant never (the caller checks tenancy first).
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.log.reduce import Fold
from threads.principal import Principal


def may_decide(fold: Fold, principal: Principal, approvers: Sequence[Principal] | None) -> bool:
    """True when ``principal`` may decide for the thread folded in ``fold``: one of
    ``approvers`` when given, else the principal who started the thread (its first
    ``user_input``)."""
    if approvers is not None:
        return principal in approvers
    root = next((e for e in fold.events if e.type == "user_input"), None)
    starter = root.actor.get("principal") if root is not None else None
    return starter is None or Principal.from_wire(starter) == principal
