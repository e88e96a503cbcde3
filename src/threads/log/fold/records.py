"""The records a fold keeps per call, approval, model attempt and turn, and the vocabularies a
reader of a thread meets (park kinds, effect states, thread statuses) as the log format names them.
Plain data: the rules that fill them are in ``threads.log.fold.rules``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypeAlias

from threads.log.event_types import Principal
from threads.log.hashing import value_hash
from threads.log.ids import effect_key
from threads.log.json_types import JsonObject
from threads.log.lines import Event
from threads.log.vocabulary import (
    ArtifactRef,
    Budget,
    ModelResponseData,
    ModelResponseRecoveredData,
    ModelSettings,
    ThreadStartedData,
    ToolResultData,
    ToolResultLateData,
    ToolSpec,
    Usage,
)

# The vocabularies a reader of a thread meets, as the log format names them.
ParkKind = Literal["approval", "effect", "input", "resource", "child", "ask", "wait", "member"]
EffectStatus = Literal["begun", "committed", "unknown", "resolved"]
ThreadStatus = Literal["inspection_only", "cancelled", "parked", "in_turn", "idle"]
# The model settings of an epoch: a ``settings_changed``'s, or as ``thread_started`` pins them
# (both carry ``adapter``, ``model`` and ``model_params``).
Epoch: TypeAlias = ModelSettings | ThreadStartedData
# A model's reply as the fold keeps it: a ``model_response``'s data, or a recovered one's.
Response: TypeAlias = ModelResponseData | ModelResponseRecoveredData


@dataclass(slots=True)
class Approval:
    challenge_id: str
    args_hash: str
    expires_at: int
    state: str = "open"  # open | granted | denied
    decided_by: Principal | None = None
    reason: str | None = None
    used: bool = False


@dataclass(slots=True)
class Call:
    """One tool call and everything recorded about it since ``tool_call``."""

    call_id: str
    name: str
    input: JsonObject
    request_event_id: str
    branch_id: str
    seq: int
    spec: ToolSpec | None  # ToolSpec of that name in the tool set at call time
    event_id: str = ""  # the tool_call's
    removed: bool = False  # a later tools_changed dropped this tool
    decision: str | None = None  # allow | deny | ask
    decision_source: str | None = None
    decision_reason: str | None = None
    approval: Approval | None = None
    effect: EffectStatus | None = None
    attempt: int = 0
    first_begin_time: int | None = None
    unknown_reason: str | None = None
    resolution: str | None = None  # last effect_resolved outcome
    result_ref: ArtifactRef | None = None
    result: ToolResultData | None = None
    late_result: ToolResultLateData | None = None  # the real result after a deferred placeholder
    parked: bool = False
    begin_event: Event | None = None  # the last effect_begin (its epoch: who dispatched it)
    retry_not_before: int | None = None  # a retry_scheduled after that attempt: wait until

    @property
    def effect_key(self) -> str:
        return effect_key(self.branch_id, self.call_id)

    @property
    def effect_class(self) -> str:
        if self.spec is None:
            return "unguarded"
        return self.spec.get("effect_class", "unguarded")

    @property
    def args_hash(self) -> str:
        return value_hash(self.input)


@dataclass(slots=True)
class ModelAttempt:
    event: Event
    attempt: int
    settings: Epoch  # the settings epoch it was sent under (model, model_params)
    outcome: str | None = None  # response | not_sent | failed | unknown (None while open)
    retry_not_before: int | None = None
    usage: Usage | None = None  # its response's
    billing: str | None = None  # its abandonment's


@dataclass(slots=True)
class Turn:
    input_event: Event
    budget: Budget | None
    sent: bool = False  # a model_request follows the last user_input/steer
    budget_exceeded: bool = False
    cancel_event: Event | None = None
    model_requests: int = 0
