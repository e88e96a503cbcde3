"""The host's HTTP bodies as Pydantic models: what each route accepts and answers.

Request models forbid extra keys and never coerce types, so a wrong shape is a 400
``invalid_request`` rather than a guess. The same models generate ``/openapi.json``, so the
document can't drift from what the routes check.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints

NonEmpty = Annotated[str, StringConstraints(min_length=1)]
Id = Annotated[str, StringConstraints(min_length=1, max_length=128)]
Count = Annotated[int, Field(ge=1, le=2**53 - 1)]


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class TextPart(_Body):
    type: Literal["text"]
    text: NonEmpty


class RunBudget(_Body):
    max_model_requests: Count | None = None
    max_turns: Count | None = None
    max_input_tokens: Count | None = None
    max_output_tokens: Count | None = None
    max_cost_nanos: Count | None = None
    max_wall_ms: Count | None = None


class StartRunRequest(_Body):
    agent: NonEmpty
    input: NonEmpty | Annotated[list[TextPart], Field(min_length=1)]
    thread_id: Id | None = None
    branch_id: Id | None = None
    budget: RunBudget | None = None

    def text(self) -> str:
        if isinstance(self.input, str):
            return self.input
        return "\n".join(part.text for part in self.input)


class ForkRequest(_Body):
    event_id: Id
    mode: Literal["live", "stub"] = "live"
    knowledge: Literal["pinned", "current"] = "pinned"


class ApprovalDecision(_Body):
    decision: Literal["grant", "deny"]
    remember_rule: NonEmpty | None = None
    reason: Annotated[str, StringConstraints(max_length=4096)] | None = None


class Answer(_Body):
    answer: NonEmpty | Annotated[list[NonEmpty], Field(min_length=1)]


class ParkedResolution(_Body):
    resolution: Literal["assume_done", "assume_not_done"]


class ModelRef(_Body):
    provider: NonEmpty
    name: NonEmpty


class SettingsChange(_Body):
    model: ModelRef
    model_params: dict[str, Any] | None = None
    reasoning_carryover: Literal["keep", "omit_prior"] | None = None


class ModeChange(_Body):
    mode: Literal["default", "accept_edits", "plan", "dont_ask", "bypass"]


# ---- answers ---------------------------------------------------------------------------------


class ErrorDetail(BaseModel):
    model_config = ConfigDict(extra="forbid")
    code: str
    message: str


class ErrorBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    error: ErrorDetail


class RunAccepted(BaseModel):
    thread_id: str
    branch_id: str
    run_id: str


class Appended(BaseModel):
    event_id: str


class CancelAccepted(BaseModel):
    item_key: str


class BranchRef(BaseModel):
    thread_id: str
    branch_id: str


class BranchEntry(BaseModel):
    branch_id: str
    parent_branch_id: str | None = None
    fork_at_seq: int | None = None
    mode: Literal["live", "stub"]
    runnable: bool


class ForkPoint(BaseModel):
    branch_id: str
    seq: int
    event_id: str
    snapshot: dict[str, Any]


class TimelineEntry(BaseModel):
    event: dict[str, Any]
    fork_point: bool


class Timeline(BaseModel):
    thread_id: str
    branch_id: str
    entries: list[TimelineEntry]


class PendingApproval(BaseModel):
    challenge_id: str
    call_id: str
    tool: str
    input: dict[str, Any]
    args_hash: str
    expires_at: int
    suggested_rules: list[str]
    reason: str | None = None


class PrincipalBody(BaseModel):
    issuer: str
    tenant: str
    subject: str


class CostBody(BaseModel):
    """Spend in nano-units of ``currency`` (the log format's ``Cost``); ``bounded`` false: an
    attempt's cost has no bound (a model without a price), so the upper bound is not one."""

    currency: str
    known_nanos: int
    upper_bound_nanos: int
    complete: bool
    bounded: bool


class ThreadSummary(BaseModel):
    thread_id: str
    branch_id: str
    agent: str | None
    status: str
    head_seq: int
    created_at: int | None
    updated_at: int | None
    first_input: str | None
    cost: CostBody | None
    waiting: int


class ApprovalWaiting(BaseModel):
    challenge_id: str
    call_id: str
    tool: str
    input: dict[str, Any]
    effect_class: str
    args_hash: str
    requested_by: PrincipalBody | None
    requested_at: int
    expires_at: int
    expired: bool
    suggested_rules: list[str]


class EffectWaiting(BaseModel):
    """A parked effect, with what threads proved and could not, and the risk of each choice."""

    effect_key: str
    call_id: str
    tool: str
    input: dict[str, Any]
    effect_class: str
    attempts: int
    reason: str
    parked_at: int | None
    proved: str
    unproved: str
    if_done: str
    if_not_done: str
    not_done_refused_until: int | None


class QuestionWaiting(BaseModel):
    call_id: str
    question: str
    options: list[str] | None
    multi_select: bool
    asked_by: PrincipalBody | None
    asked_at: int
    expires_at: int | None


class ParentRef(BaseModel):
    """The thread a thread was started from (its ``thread_started.parent``)."""

    thread_id: str
    relation: Literal["subagent", "handoff", "team_member"]
    branch_id: str | None = None
    event_id: str | None = None  # the parent's agent_spawned or handoff


class ChildEntry(BaseModel):
    """A thread this thread started: a subagent (``agent_spawned``) or a handoff target.
    ``status``: a subagent's ``running`` until its ``agent_finished``, then that status
    (``handed_off`` for a target); ``thread_status``: the child thread's own (None while it
    does not exist yet)."""

    thread_id: str
    relation: Literal["subagent", "handoff"]
    agent: str
    call_id: str
    event_id: str
    status: str
    thread_status: str | None


class ThreadDetail(BaseModel):
    """A thread and its place in the tree: where it came from, what it started."""

    thread_id: str
    branch_id: str
    agent: str | None
    status: str
    head_seq: int
    parent: ParentRef | None
    children: list[ChildEntry]


class InboxItem(BaseModel):
    """One thing waiting for a person; exactly the field ``kind`` names is set.
    ``may_decide``: whether the caller may decide it (else the host answers 403)."""

    kind: Literal["approval", "effect", "question"]
    thread_id: str
    branch_id: str
    agent: str | None
    since: int
    may_decide: bool
    parent: ParentRef | None = None  # set for a subagent's or handoff target's thread
    approval: ApprovalWaiting | None = None
    effect: EffectWaiting | None = None
    question: QuestionWaiting | None = None


class ModelCall(BaseModel):
    """One model request and how it ended (``open`` while it has no outcome)."""

    request_event_id: str
    attempt: int
    started_at: int
    outcome: str
    response_event_id: str | None
    ended_at: int | None
    duration_ms: int | None
    input_tokens: int | None
    output_tokens: int | None
    cost_nanos: int | None


class EffectEntry(BaseModel):
    effect_key: str
    call_id: str
    tool: str
    effect_class: str
    state: str | None


class UsageBody(BaseModel):
    input_tokens: int
    output_tokens: int
    unknown_responses: int
    model_requests: int
    turns_completed: int


class ForkPointRef(BaseModel):
    seq: int
    event_id: str


class ThreadOverview(BaseModel):
    """What a person reading a branch needs besides its events."""

    thread_id: str
    branch_id: str
    root_branch_id: str
    agent: str | None
    served: bool
    status: str
    head_seq: int
    created_at: int
    updated_at: int
    first_input: str | None
    cost: CostBody | None
    usage: UsageBody
    model_calls: list[ModelCall]
    effects: list[EffectEntry]
    waiting: list[InboxItem]
    fork_points: list[ForkPointRef]


REQUESTS: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (StartRunRequest, ForkRequest, ApprovalDecision, Answer, ParkedResolution,
              SettingsChange, ModeChange)
}
ANSWERS: dict[str, type[BaseModel]] = {
    m.__name__: m
    for m in (ErrorBody, RunAccepted, Appended, CancelAccepted, BranchRef, BranchEntry,
              ForkPoint, Timeline, PendingApproval, ThreadSummary, InboxItem, ThreadOverview,
              ThreadDetail)
}
