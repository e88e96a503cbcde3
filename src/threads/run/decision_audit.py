"""The decision audit ``threads verify`` applies: no recorded ``permission_decision`` lets a call
through that the thread's pinned permission policy holds back.

The log format records what decided a call (``source``: ``policy``, ``default``, ``mode`` or
``thread_rule``, and ``rule_id``/``mode``) but states no rule tying a decision to the pinned
policy; the audit checks only what those fields claim, for decisions that allow a call (a
stricter decision, from a run's ceiling or an ancestor's policy, is always consistent):

- a pinned ``deny`` rule that matches the call wins over everything: no allow may stand;
- ``source: default`` says no rule matched: a matching pinned ``ask`` rule contradicts it;
- ``source: policy`` names a pinned ``allow`` rule that matches, and no pinned ``ask`` matches;
- ``source: thread_rule`` names an allow rule a ``permission_rule_added`` recorded earlier;
- ``source: mode`` names the permission mode in force (pinned, or the last ``mode_changed``).

Another source (a newer writer's) is not judged. A thread whose ``thread_started`` pins no
permissions is not judged either.
"""

from __future__ import annotations

from collections.abc import Callable

from threads.errors import LogError
from threads.log.fold import Call, Fold
from threads.log.lines import Event
from threads.log.vocabulary import PermissionDecisionData, data_of
from threads.run.permissions import rule_matches

CODE = "decision_contradicts_policy"


def audited(fold: Fold) -> Callable[[Event], None]:
    """``fold.apply`` that first audits each ``permission_decision`` against the fold so far."""

    def apply(event: Event) -> None:
        if event.type == "permission_decision":
            contradiction = _contradiction(fold, data_of(event, "permission_decision"))
            if contradiction is not None:
                raise LogError(CODE, contradiction, seq=event.seq)
        fold.apply(event)

    return apply


def _contradiction(fold: Fold, data: PermissionDecisionData) -> str | None:
    """Why this decision contradicts the pinned policy, or None when it does not."""
    pinned = fold.policy.get("permissions")
    call = fold.calls.get(data["call_id"])
    if data["decision"] != "allow" or not isinstance(pinned, dict) or call is None:
        return None  # no call: the reducer refuses the line on its own
    source, rule_id = data["source"], data.get("rule_id")
    allowed = f"allow ({source}) for {call.name} call {call.call_id}"
    deny = _matching(pinned.get("deny"), call)
    if deny is not None:
        return f"{allowed}, but the pinned deny rule {deny!r} matches it"
    ask = _matching(pinned.get("ask"), call)
    if source in ("default", "policy") and ask is not None:
        return f"{allowed}, but the pinned ask rule {ask!r} matches it: it must be asked"
    if source == "policy" and (rule_id not in (pinned.get("allow") or ())
                               or not rule_matches(str(rule_id), call.name, call.input)):
        return f"{allowed} names rule {rule_id!r}, which is no pinned allow rule matching it"
    if source == "thread_rule" and not any(
        rule == rule_id and kind == "allow" and rule_matches(rule, call.name, call.input)
        for rule, kind in fold.thread_rules
    ):
        return f"{allowed} names rule {rule_id!r}, which no earlier permission_rule_added allows"
    if source == "mode" and data.get("mode") != fold.mode:
        return f"{allowed} names mode {data.get('mode')!r}, but the mode in force is {fold.mode!r}"
    return None


def _matching(rules: object, call: Call) -> str | None:
    for rule in rules if isinstance(rules, list) else ():
        if isinstance(rule, str) and rule_matches(rule, call.name, call.input):
            return rule
    return None
