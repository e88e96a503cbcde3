"""Every event type the reader knows, generated from the event schema by
``tools/sync_schema.py``: do not edit. ``EventType`` is what ``Event.type`` holds for a known
event, and ``Actor`` (with the ``Principal`` it may carry) what ``Event.actor`` holds;
``threads.log.vocabulary`` has each type's data.
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict, get_args

EventType = Literal[
    "agent_finished",
    "agent_spawned",
    "answer_rejected",
    "approval_denied",
    "approval_granted",
    "approval_requested",
    "ask_closed",
    "budget_exceeded",
    "cancel_requested",
    "cancelled",
    "channel_delivery",
    "compacted",
    "compaction_failed",
    "compaction_requested",
    "context_edited",
    "context_preflight_blocked",
    "effect_begin",
    "effect_commit",
    "effect_resolved",
    "effect_unknown",
    "fork",
    "handoff",
    "heartbeat",
    "hook_decision",
    "injected",
    "log_repaired",
    "mail_refused",
    "member_ended",
    "member_idle",
    "member_observed",
    "member_started",
    "message_policy_decided",
    "message_received",
    "message_sent",
    "mode_changed",
    "model_attempt_abandoned",
    "model_request",
    "model_response",
    "model_response_recovered",
    "monitor_set",
    "operator_refused",
    "operator_request",
    "output_validated",
    "park_escalated",
    "parked",
    "permission_decision",
    "permission_rule_added",
    "resumed",
    "retry_scheduled",
    "schedule_fired",
    "schedule_skipped",
    "settings_changed",
    "snapshot",
    "steer",
    "stop_when_idle",
    "team_message",
    "team_opened",
    "team_task_claimed",
    "team_task_created",
    "team_task_updated",
    "thread_started",
    "todos_updated",
    "tool_call",
    "tool_result",
    "tool_result_late",
    "tools_changed",
    "tools_loaded",
    "turn_completed",
    "user_input",
    "wait_finished",
    "wait_started",
    "woken",
]
EVENT_TYPES: frozenset[str] = frozenset(get_args(EventType))


ActorKind: TypeAlias = 'Literal["user", "model", "host", "tool", "channel", "scheduler", "approver", "recovery"]'


NonEmpty: TypeAlias = 'str'


class Principal(TypedDict):
    issuer: NonEmpty
    subject: NonEmpty
    tenant: NonEmpty


class Actor(TypedDict):
    kind: ActorKind
    principal: NotRequired[Principal]
