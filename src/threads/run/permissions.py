"""``Permissions``: allow / ask / deny rules per tool, with an optional glob on one argument,
under a mode. Deny wins over ask over allow; a run-level ceiling can only narrow the policy.

A rule is ``"tool"``, ``"prefix*"`` or ``"tool(arg:glob)"``
(e.g. ``"send_email(to:*@example.com)"``).
Every decision is recorded as ``permission_decision`` with its source and the rule that made it.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, TypeAlias, cast

from threads.errors import ConfigError
from threads.log.json_types import JsonObject
from threads.log.vocabulary import PermissionDecisionData, PermissionMode, PolicyPermissions

Mode: TypeAlias = PermissionMode
MODES = ("default", "accept_edits", "plan", "dont_ask", "bypass")
RULE = re.compile(r"^(?P<tool>[a-z][a-z0-9_]{0,127}\*?)(\((?P<arg>[A-Za-z0-9_]+):(?P<glob>.+)\))?$")
RANK = {"allow": 0, "ask": 1, "deny": 2}


@dataclass(frozen=True, slots=True)
class Decision:
    decision: Literal["allow", "ask", "deny"]
    source: Literal["policy", "default", "mode", "thread_rule"]
    rule_id: str | None = None
    mode: Mode | None = None
    reason: str | None = None

    def to_wire(self, call_id: str) -> PermissionDecisionData:
        data: PermissionDecisionData = {
            "call_id": call_id,
            "decision": self.decision,
            "source": self.source,
        }
        if self.rule_id is not None:
            data["rule_id"] = self.rule_id
        if self.mode is not None:
            data["mode"] = self.mode
        if self.reason is not None:
            data["reason"] = self.reason
        return data


def check_rule(rule: str) -> None:
    """Raise ``ConfigError("permission_rule_invalid")`` unless ``rule`` is well formed."""
    if not isinstance(rule, str) or not RULE.match(rule):
        raise ConfigError(
            "permission_rule_invalid",
            f"permission rule {rule!r} must look like 'tool', 'prefix*' or 'tool(arg:glob)'",
        )


def rule_matches(rule: str, tool_name: str, args: JsonObject) -> bool:
    match = RULE.match(rule)
    if match is None:
        return False
    pattern = match.group("tool")
    if pattern.endswith("*"):
        if not tool_name.startswith(pattern[:-1]):
            return False
    elif pattern != tool_name:
        return False
    arg = match.group("arg")
    if arg is None:
        return True
    value = args.get(arg)
    return isinstance(value, str) and fnmatch.fnmatchcase(value, match.group("glob"))


@dataclass(frozen=True, slots=True, init=False)
class Permissions:
    mode: Mode
    allow: tuple[str, ...]
    ask: tuple[str, ...]
    deny: tuple[str, ...]
    allow_bypass: bool
    ceiling: Permissions | None

    def __init__(
        self,
        mode: Mode = "default",
        allow: Sequence[str] = (),
        ask: Sequence[str] = (),
        deny: Sequence[str] = (),
        *,
        allow_bypass: bool = False,
        ceiling: Permissions | None = None,
    ) -> None:
        """Rules may be given as any sequence (a list, as the README writes them); they are
        kept as tuples so a policy can't change after it was pinned."""
        for label, rules in (("allow", allow), ("ask", ask), ("deny", deny)):
            if isinstance(rules, str):
                raise ConfigError(
                    "invalid_config", f"{label} is a list of rules, e.g. {label}=[{rules!r}]"
                )
        object.__setattr__(self, "mode", mode)
        object.__setattr__(self, "allow", tuple(allow))
        object.__setattr__(self, "ask", tuple(ask))
        object.__setattr__(self, "deny", tuple(deny))
        object.__setattr__(self, "allow_bypass", allow_bypass)
        object.__setattr__(self, "ceiling", ceiling)
        self._check()

    def _check(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(
                "invalid_config", f"permission mode must be one of {', '.join(MODES)}"
            )
        if self.mode == "bypass" and not self.allow_bypass:
            raise ConfigError(
                "invalid_config",
                "mode='bypass' skips every ask; opt in explicitly with allow_bypass=True",
            )
        for rule in (*self.allow, *self.ask, *self.deny):
            check_rule(rule)

    def to_wire(self) -> PolicyPermissions:
        return {
            "allow": list(self.allow),
            "allow_bypass": self.allow_bypass,
            "ask": list(self.ask),
            "deny": list(self.deny),
            "mode": self.mode,
            "plan_exit_mode": "default",
            "protected_paths": [],
        }

    def in_mode(self, mode: str) -> Permissions:
        """This policy under the thread's current mode (a ``mode_changed`` moved it), the
        ceiling kept."""
        if mode == self.mode:
            return self
        return Permissions(
            cast(Mode, mode), self.allow, self.ask, self.deny,
            allow_bypass=self.allow_bypass, ceiling=self.ceiling,
        )

    def narrowed(self, ceiling: Permissions | None) -> Permissions:
        """This policy under a run-level ceiling: each call is decided under both and the
        stricter decision wins."""
        if ceiling is None:
            return self
        return Permissions(
            self.mode,
            self.allow,
            self.ask,
            self.deny,
            allow_bypass=self.allow_bypass,
            ceiling=ceiling,
        )

    def decide(
        self,
        tool_name: str,
        args: JsonObject,
        effect_class: str,
        thread_rules: Sequence[tuple[str, str]] = (),
    ) -> Decision:
        """The decision for one call. ``thread_rules`` are ``(rule, allow|deny)`` pairs an
        approver added to the thread (``permission_rule_added``): checked after the deny rules,
        so they never open a denied call, and never past the ceiling."""
        own = self._decide_own(tool_name, args, effect_class, thread_rules)
        if self.ceiling is None:
            return own
        return self.ceiling.narrow(own, tool_name, args, effect_class)

    def narrow(
        self, decision: Decision, tool_name: str, args: JsonObject, effect_class: str
    ) -> Decision:
        """``decision`` under this policy used as a ceiling: the stricter one wins, and a
        ``dont_ask`` ceiling turns a remaining ask into a deny."""
        other = self.decide(tool_name, args, effect_class)
        if RANK[other.decision] > RANK[decision.decision]:
            return other
        if decision.decision == "ask" and self.mode == "dont_ask":
            return Decision("deny", "mode", decision.rule_id, "dont_ask", "the run never asks")
        return decision

    def _decide_own(
        self,
        tool_name: str,
        args: JsonObject,
        effect_class: str,
        thread_rules: Sequence[tuple[str, str]],
    ) -> Decision:
        for rule in self.deny:
            if rule_matches(rule, tool_name, args):
                return Decision("deny", "policy", rule)
        for rule, kind in thread_rules:
            if rule_matches(rule, tool_name, args):
                return Decision("allow" if kind == "allow" else "deny", "thread_rule", rule)
        for rule in self.ask:
            if rule_matches(rule, tool_name, args):
                return self._under_mode(Decision("ask", "policy", rule))
        for rule in self.allow:
            if rule_matches(rule, tool_name, args):
                return Decision("allow", "policy", rule)
        if self.mode == "plan" and effect_class != "read_only":
            return Decision("deny", "mode", None, "plan", "plan mode runs read-only tools only")
        return self._under_mode(Decision("allow", "default"))

    def _under_mode(self, decision: Decision) -> Decision:
        if decision.decision == "ask" and self.mode == "dont_ask":
            return Decision(
                "deny", "mode", decision.rule_id, "dont_ask", "dont_ask mode never asks"
            )
        if decision.decision == "ask" and self.mode == "bypass":
            return Decision("allow", "mode", decision.rule_id, "bypass")
        return decision
