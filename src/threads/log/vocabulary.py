"""The log's vocabulary as types, generated from the event schema by
``tools/sync_schema.py``: do not edit (``tools/sync_schema.py --check`` fails when it is stale).

``EventType`` names every event type the reader knows; ``<Type>Data`` is the TypedDict of an
event's ``data``; the other TypedDicts and aliases are the schema's definitions those use.
``draft(type, data, actor)`` builds an event to append with data of its type's shape, and
``data_of(event, type)`` reads an event's data as that shape (``LogError`` when the event is of
another type). TypedDicts are plain dicts at run time: reading a branch builds nothing extra.
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict, overload

from threads.errors import LogError
from threads.log.event_types import Actor, EventType, NonEmpty, Principal
from threads.log.json_types import JsonObject, JsonValue
from threads.log.lines import Draft, Event

Uuid: TypeAlias = 'str'


ThreadId: TypeAlias = 'Uuid'


Int: TypeAlias = 'int'


Sha256: TypeAlias = 'str'


class ArtifactRef(TypedDict):
    bytes: Int
    media_type: str
    sha256: Sha256


AgentFinishedDataStatus: TypeAlias = 'Literal["completed", "failed", "cancelled", "budget_exhausted"]'


Tokens: TypeAlias = 'Int | None'


class Usage(TypedDict):
    cache_read_tokens: NotRequired[Tokens]
    cache_write_tokens: NotRequired[Tokens]
    input_tokens: Tokens
    output_tokens: Tokens
    reasoning_tokens: NotRequired[Tokens]


class AgentFinishedData(TypedDict):
    child_thread_id: ThreadId
    output_ref: NotRequired[ArtifactRef]
    status: AgentFinishedDataStatus
    usage: Usage


PosInt: TypeAlias = 'Int'


class Budget(TypedDict):
    max_cost_nanos: NotRequired[PosInt]
    max_input_tokens: NotRequired[PosInt]
    max_model_requests: NotRequired[PosInt]
    max_output_tokens: NotRequired[PosInt]
    max_turns: NotRequired[PosInt]
    max_wall_ms: NotRequired[PosInt]


CallId: TypeAlias = 'str'


AgentSpawnedDataIsolation: TypeAlias = 'Literal["none", "shared_sandbox", "worktree", "forked_sandbox"]'


AgentSpawnedDataMode: TypeAlias = 'Literal["foreground", "background"]'


class AgentSpawnedData(TypedDict):
    agent_name: NonEmpty
    budget: NotRequired[Budget]
    call_id: CallId
    child_thread_id: ThreadId
    isolation: AgentSpawnedDataIsolation
    mode: AgentSpawnedDataMode


EventId: TypeAlias = 'Uuid'


AnswerRejectedDataReason: TypeAlias = 'Literal["not_an_option"]'


class AnswerRejectedData(TypedDict):
    call_id: CallId
    delivery_event_id: EventId
    reason: AnswerRejectedDataReason


class ApprovalBinding(TypedDict):
    args_hash: Sha256
    call_id: CallId
    challenge_id: Uuid
    reason: NotRequired[str]


ApprovalDeniedData: TypeAlias = 'ApprovalBinding'


ApprovalGrantedData: TypeAlias = 'ApprovalBinding'


TimeMs: TypeAlias = 'Int'


class ApprovalRequestedData(TypedDict):
    args_hash: Sha256
    call_id: CallId
    challenge_id: Uuid
    expires_at: TimeMs


AskId: TypeAlias = 'str'


MailId: TypeAlias = 'str'


class AskClosedDataOutcome0(TypedDict):
    reply: MailId
    status: Literal["answered"]


class AskClosedDataOutcome1(TypedDict):
    status: Literal["timed_out"]


MemberErrorCode: TypeAlias = 'Literal["model_unavailable", "context_exhausted", "max_output", "max_turns", "output_invalid", "input_denied", "stop_hook_limit", "model_error", "content_unsupported", "continuation_unsupported", "transport_fence_unsupported", "secret_in_provider_output", "secret_in_stored_bytes", "artifact_missing", "artifact_corrupt", "unmatched_external_op", "branch_busy", "branch_not_runnable", "pin_unavailable", "pin_mismatch"]'


class FailedResultError(TypedDict):
    code: MemberErrorCode
    message: str


MemberName: TypeAlias = 'str'


TeamId: TypeAlias = 'Uuid'


class MemberRef(TypedDict):
    generation: PosInt
    name: MemberName
    team: TeamId
    tenant: NonEmpty


class FailedResult(TypedDict):
    error: FailedResultError
    member: MemberRef
    status: Literal["failed"]


class CancelledResult(TypedDict):
    member: MemberRef
    status: Literal["cancelled"]


ExhaustedResultBudgetLimit: TypeAlias = 'Literal["max_cost_nanos", "max_input_tokens", "max_output_tokens", "max_model_requests", "max_turns", "max_wall_ms"]'


ExhaustedResultBudgetScope: TypeAlias = 'Literal["run", "thread", "ancestor"]'


class ExhaustedResultBudget(TypedDict):
    limit: ExhaustedResultBudgetLimit
    limit_value: Int
    observed: Int
    observed_is_upper_bound: bool
    owner_thread_id: NotRequired[ThreadId]
    scope: ExhaustedResultBudgetScope


class ExhaustedResult(TypedDict):
    budget: ExhaustedResultBudget
    member: MemberRef
    status: Literal["budget_exhausted"]


class HandedOffResult(TypedDict):
    member: MemberRef
    status: Literal["handed_off"]
    to_thread: ThreadId


EndedResult: TypeAlias = 'FailedResult | CancelledResult | ExhaustedResult | HandedOffResult'


class AskClosedDataOutcome2(TypedDict):
    result: EndedResult
    status: Literal["member_ended"]


class AskClosedDataOutcome3(TypedDict):
    status: Literal["cancelled"]


class AskClosedData(TypedDict):
    ask_id: AskId
    outcome: AskClosedDataOutcome0 | AskClosedDataOutcome1 | AskClosedDataOutcome2 | AskClosedDataOutcome3


BudgetExceededDataLimit: TypeAlias = 'Literal["max_cost_nanos", "max_input_tokens", "max_output_tokens", "max_model_requests", "max_turns", "max_wall_ms"]'


BudgetExceededDataScope: TypeAlias = 'Literal["run", "thread", "ancestor"]'


class BudgetExceededData(TypedDict):
    limit: BudgetExceededDataLimit
    limit_value: Int
    observed: Int
    observed_is_upper_bound: bool
    owner_thread_id: NotRequired[ThreadId]
    scope: BudgetExceededDataScope


CancelRequestedDataScope: TypeAlias = 'Literal["turn", "thread", "tree"]'


class CancelRequestedData(TypedDict):
    reason: NotRequired[str]
    scope: CancelRequestedDataScope


class CancelledData(TypedDict):
    request_event_id: EventId


Name: TypeAlias = 'str'


class ChannelDeliveryData(TypedDict):
    channel: Name
    conversation: NonEmpty
    delivery_id: NonEmpty
    installation: NonEmpty
    item_key: NonEmpty
    ref: NotRequired[ArtifactRef]
    text: NotRequired[str]


CompactedDataTrigger: TypeAlias = 'Literal["threshold", "reactive", "manual"]'


class CompactedData(TypedDict):
    cause_event_id: NotRequired[EventId]
    from_event_id: EventId
    from_seq: PosInt
    summary_ref: ArtifactRef
    summary_request_event_id: NotRequired[EventId]
    to_event_id: EventId
    to_seq: PosInt
    trigger: NotRequired[CompactedDataTrigger]


CompactionFailedDataReason: TypeAlias = 'Literal["hook_denied", "model_error", "prompt_too_long", "empty_summary", "artifact_error", "still_over_threshold"]'


CompactionFailedDataStage: TypeAlias = 'Literal["hook", "summary", "restore"]'


class CompactionFailedData(TypedDict):
    cause_event_id: NotRequired[EventId]
    reason: CompactionFailedDataReason
    request_event_id: NotRequired[EventId]
    stage: CompactionFailedDataStage


class CompactionRequestedData(TypedDict):
    instructions: NotRequired[NonEmpty]


ContextEditedDataEditsItemAction: TypeAlias = 'Literal["clear", "redact"]'


class Span(TypedDict):
    end: Int
    start: Int


class ContextEditedDataEditsItem(TypedDict):
    action: ContextEditedDataEditsItemAction
    call_id: CallId
    part: NotRequired[Int]
    spans: NotRequired[list[Span]]


ContextEditedDataReason: TypeAlias = 'Literal["threshold", "idle", "provider", "guardrail", "manual", "compaction_fallback"]'


class ContextEditedData(TypedDict):
    edits: list[ContextEditedDataEditsItem]
    reason: ContextEditedDataReason
    request_event_id: NotRequired[EventId]


ContextPreflightBlockedDataAction: TypeAlias = 'Literal["compact", "fail"]'


class ContextPreflightBlockedData(TypedDict):
    action: ContextPreflightBlockedDataAction
    estimated_tokens: Int
    window_tokens: Int


class EffectBeginData(TypedDict):
    attempt: PosInt
    call_id: CallId


class EffectCommitData(TypedDict):
    call_id: CallId
    provider_receipt: NotRequired[str]
    result_ref: ArtifactRef


EffectResolvedDataBy: TypeAlias = 'Literal["provider_dedup", "reconcile", "adapter", "sandbox_terminated", "human"]'


EffectResolvedDataOutcome: TypeAlias = 'Literal["confirmed_success", "safe_to_retry", "not_sent", "interrupted", "assume_done", "assume_not_done"]'


class EffectResolvedData(TypedDict):
    by: EffectResolvedDataBy
    call_id: CallId
    outcome: EffectResolvedDataOutcome
    result_ref: NotRequired[ArtifactRef]


EffectUnknownDataReason: TypeAlias = 'Literal["crash_after_begin", "timeout", "transport_error"]'


class EffectUnknownData(TypedDict):
    call_id: CallId
    reason: EffectUnknownDataReason


ForkDataKnowledgePolicy: TypeAlias = 'Literal["pinned", "current"]'


BranchId: TypeAlias = 'Uuid'


ForkDataReason: TypeAlias = 'Literal["snapshot", "repair"]'


class ForkData(TypedDict):
    at_hash: Sha256
    knowledge_policy: NotRequired[ForkDataKnowledgePolicy]
    parent_branch_id: BranchId
    reason: ForkDataReason
    sandbox_id: NotRequired[NonEmpty]


HandoffDataForwarded: TypeAlias = 'Literal["none", "summary", "transcript"]'


class HandoffData(TypedDict):
    call_id: CallId
    forwarded: HandoffDataForwarded
    forwarded_ref: NotRequired[ArtifactRef]
    to_agent: NonEmpty
    to_thread_id: ThreadId


class HeartbeatData(TypedDict):
    running_call_ids: list[CallId]


HookDecisionDataDecision: TypeAlias = 'Literal["proceed", "deny", "guide", "retry", "allow", "ask", "annotate", "stop", "continue", "failed", "redact"]'


HookDecisionDataHook: TypeAlias = 'Literal["before_model", "after_model", "before_tool", "after_tool", "on_stop", "before_input", "after_tool_batch", "before_tool_result", "permission_request", "permission_denied", "before_compact", "after_compact", "stop_failure", "session_start", "session_end", "subagent_start", "subagent_stop", "before_model_switch", "after_model_switch", "notification"]'


class HookDecisionData(TypedDict):
    call_id: NotRequired[CallId]
    decision: HookDecisionDataDecision
    extension: Name
    hook: HookDecisionDataHook
    input_event_id: NotRequired[EventId]
    reason: NotRequired[str]
    request_event_id: NotRequired[EventId]


class InjectedDataOrigin(TypedDict):
    id: NonEmpty
    location: NotRequired[str]
    version: NotRequired[str]


InjectedDataSource: TypeAlias = 'Literal["memory", "knowledge", "skill", "hook", "attachment", "recovery", "todo", "mode", "output_style", "agent", "handoff"]'


InjectedDataTrust: TypeAlias = 'Literal["untrusted_reference", "trusted_instruction"]'


class InjectedData(TypedDict):
    origin: InjectedDataOrigin
    ref: NotRequired[ArtifactRef]
    source: InjectedDataSource
    text: NotRequired[str]
    trust: InjectedDataTrust


class LogRepairedData(TypedDict):
    at_offset: Int
    dropped_ref: NotRequired[ArtifactRef]
    truncated_bytes: PosInt


BounceCode: TypeAlias = 'Literal["stale_member", "member_ended"]'


class MailRefusedData(TypedDict):
    code: BounceCode
    mail_id: MailId


class MemberEndedData(TypedDict):
    result: EndedResult


class TextBody(TypedDict):
    ref: NotRequired[ArtifactRef]
    text: NotRequired[str]


class CompletedResult(TypedDict):
    member: MemberRef
    output: TextBody
    status: Literal["completed"]


class MemberIdleData(TypedDict):
    result: CompletedResult


MonitorId: TypeAlias = 'str'


StoredMemberResult: TypeAlias = 'CompletedResult | FailedResult | CancelledResult | ExhaustedResult | HandedOffResult'


class MemberObservedDataSource(TypedDict):
    branch_id: BranchId
    seq: PosInt
    thread_id: ThreadId


class MemberObservedData(TypedDict):
    monitor_id: MonitorId
    result: StoredMemberResult
    source: MemberObservedDataSource


class MemberStartedDataParent(TypedDict):
    branch_id: BranchId
    event_id: EventId
    relation: Literal["team_member"]
    thread_id: ThreadId


class RequestRef(TypedDict):
    event_id: EventId
    thread_id: ThreadId


class Provenance(TypedDict):
    principal: Principal
    root_request: RequestRef
    via: list[MemberRef]


class MemberStartedData(TypedDict):
    agent: NonEmpty
    budget: NotRequired[Budget]
    config_hash: Sha256
    member: MemberRef
    parent: MemberStartedDataParent
    provenance: Provenance
    thread_id: ThreadId


MessagePolicyDecidedDataDecision: TypeAlias = 'Literal["allow", "deny"]'


MessagePolicyDecidedDataOp: TypeAlias = 'Literal["start", "send", "ask", "monitor", "cancel"]'


RequestId: TypeAlias = 'Uuid'


MessagePolicyDecidedDataRule = TypedDict(
    "MessagePolicyDecidedDataRule",
    {
        "from": 'Name',
        "to": 'Name',
    },
)


MessagePolicyDecidedDataSource: TypeAlias = 'Literal["team", "message_policy", "default"]'


class MessagePolicyDecidedData(TypedDict):
    call_id: NotRequired[CallId]
    decision: MessagePolicyDecidedDataDecision
    op: MessagePolicyDecidedDataOp
    request_id: NotRequired[RequestId]
    rule: NotRequired[MessagePolicyDecidedDataRule]
    source: MessagePolicyDecidedDataSource
    target: NonEmpty


class MailSender1(TypedDict):
    operator: RequestId


MailSender: TypeAlias = 'MemberRef | MailSender1'


MailEnvelopeKind: TypeAlias = 'Literal["message", "ask", "reply", "task", "cancel", "member_settled", "member_parked", "member_ended", "bounce"]'


ParkReason: TypeAlias = 'Literal["awaiting_approval", "effect_unknown", "awaiting_input", "awaiting_resource", "awaiting_member"]'


class MailAddress0(TypedDict):
    generation: PosInt
    name: MemberName


MailAddress: TypeAlias = 'MailAddress0 | Literal["team_log"]'


MailEnvelope = TypedDict(
    "MailEnvelope",
    {
        "ask_id": 'NotRequired[AskId]',
        "body": 'NotRequired[TextBody]',
        "causal": 'RequestRef',
        "code": 'NotRequired[BounceCode]',
        "deadline": 'NotRequired[TimeMs]',
        "from": 'MailSender',
        "kind": 'MailEnvelopeKind',
        "mail_id": 'MailId',
        "monitor_id": 'NotRequired[MonitorId]',
        "provenance": 'Provenance',
        "reason": 'NotRequired[ParkReason]',
        "result": 'NotRequired[StoredMemberResult]',
        "team": 'TeamId',
        "to": 'MailAddress',
    },
)


class MessageReceivedData(TypedDict):
    envelope: MailEnvelope
    mail_id: MailId


class MessageSentData(TypedDict):
    envelope: MailEnvelope


PermissionMode: TypeAlias = 'Literal["plan", "dont_ask", "default", "accept_edits", "bypass"]'


ModeChangedData = TypedDict(
    "ModeChangedData",
    {
        "cause_event_id": 'NotRequired[EventId]',
        "from": 'PermissionMode',
        "to": 'PermissionMode',
    },
)


ModelAttemptAbandonedDataBilling: TypeAlias = 'Literal["not_billed", "unknown"]'


ModelAttemptAbandonedDataProviderOutcome: TypeAlias = 'Literal["not_sent", "unknown", "failed"]'


ModelAttemptAbandonedDataReason: TypeAlias = 'Literal["crash", "timeout", "provider_error", "stream_broken", "cancelled", "steered", "rate_limited", "overloaded", "server_error", "prompt_too_long", "guardrail"]'


class ModelAttemptAbandonedData(TypedDict):
    billing: NotRequired[ModelAttemptAbandonedDataBilling]
    http_status: NotRequired[Int]
    provider_outcome: ModelAttemptAbandonedDataProviderOutcome
    reason: ModelAttemptAbandonedDataReason
    request_event_id: EventId
    retry_after_ms: NotRequired[Int]


class ModelRequestDataDeclaredPrefix(TypedDict):
    bytes: PosInt
    sha256: Sha256


ModelRequestDataPurpose: TypeAlias = 'Literal["turn", "compaction"]'


class ModelRequestData(TypedDict):
    attempt: PosInt
    cause_event_id: NotRequired[EventId]
    declared_prefix: ModelRequestDataDeclaredPrefix
    input_bound_tokens: NotRequired[PosInt]
    purpose: NotRequired[ModelRequestDataPurpose]
    request_ref: ArtifactRef


ModelResponseDataCompleteness: TypeAlias = 'Literal["complete", "partial"]'


class TextPart(TypedDict):
    text: str
    type: Literal["text"]


class ToolUsePart(TypedDict):
    call_id: CallId
    input: JsonObject
    name: Name
    type: Literal["tool_use"]


class ReasoningPart(TypedDict):
    format: Name
    model: NonEmpty
    provider: Name
    ref: ArtifactRef
    summary: NotRequired[str]
    type: Literal["reasoning"]


class HostedToolPart(TypedDict):
    format: Name
    model: NonEmpty
    name: Name
    provider: Name
    ref: ArtifactRef
    type: Literal["hosted_tool"]


CitationPartSourceKind: TypeAlias = 'Literal["web", "knowledge", "document", "tool_result"]'


class CitationPart(TypedDict):
    cited_text: NotRequired[str]
    ref: NotRequired[ArtifactRef]
    source_id: NonEmpty
    source_kind: CitationPartSourceKind
    span: NotRequired[Span]
    title: NotRequired[str]
    type: Literal["citation"]
    version: NotRequired[str]


ImageRef: TypeAlias = 'ArtifactRef'


class ImagePart(TypedDict):
    alt: NotRequired[str]
    height: PosInt
    ref: ImageRef
    type: Literal["image_ref"]
    width: PosInt


OutputPart: TypeAlias = 'TextPart | ToolUsePart | ReasoningPart | HostedToolPart | CitationPart | ImagePart'


ModelResponseDataStopReason: TypeAlias = 'Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "context_window_exceeded", "other"]'


class ModelResponseData(TypedDict):
    completeness: ModelResponseDataCompleteness
    content: list[OutputPart]
    request_event_id: EventId
    stop_reason: ModelResponseDataStopReason
    usage: Usage


ModelResponseRecoveredDataCompleteness: TypeAlias = 'Literal["complete", "partial"]'


ModelResponseRecoveredDataStopReason: TypeAlias = 'Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "refusal", "pause_turn", "context_window_exceeded", "other"]'


class ModelResponseRecoveredData(TypedDict):
    completeness: ModelResponseRecoveredDataCompleteness
    content: list[OutputPart]
    provider_request_id: NonEmpty
    request_event_id: EventId
    stop_reason: ModelResponseRecoveredDataStopReason
    usage: Usage


class MonitorSetData(TypedDict):
    member: MemberRef


TeamRefusal: TypeAlias = 'Literal["forbidden", "unknown_agent", "concurrency_cap", "budget_exceeded", "team_closed", "unknown_member", "stale_member", "member_ended", "self", "mailbox_full", "idempotency_key_reused", "idempotency_key_principal_mismatch"]'


class OperatorRefusedData(TypedDict):
    code: TeamRefusal
    request_id: RequestId


OperatorRequestDataOp: TypeAlias = 'Literal["start", "send", "ask", "wait", "cancel"]'


class OperatorRequestData(TypedDict):
    body_hash: Sha256
    idempotency_key: NotRequired[NonEmpty]
    op: OperatorRequestDataOp
    principal: Principal
    provenance: Provenance
    request_id: RequestId


class OutputValidatedDataErrorsItem(TypedDict):
    message: str
    path: str


OutputValidatedDataOutcome: TypeAlias = 'Literal["accepted", "rejected"]'


class OutputValidatedData(TypedDict):
    errors: NotRequired[list[OutputValidatedDataErrorsItem]]
    outcome: OutputValidatedDataOutcome
    schema_sha256: Sha256
    source_event_id: EventId
    value: NotRequired[JsonValue]


ParkAddressKind: TypeAlias = 'Literal["approval", "effect", "input", "resource", "child", "ask", "wait", "member"]'


class ParkAddress(TypedDict):
    id: NonEmpty
    kind: ParkAddressKind


class ParkEscalatedData(TypedDict):
    address: ParkAddress


class ParkedData(TypedDict):
    address: ParkAddress
    expires_at: NotRequired[TimeMs]
    reason: ParkReason


PermissionDecisionDataDecision: TypeAlias = 'Literal["allow", "deny", "ask"]'


PermissionDecisionDataSource: TypeAlias = 'Literal["policy", "hook", "default", "self_config_guard", "mode", "protected_path", "thread_rule"]'


class PermissionDecisionData(TypedDict):
    call_id: CallId
    decision: PermissionDecisionDataDecision
    mode: NotRequired[PermissionMode]
    reason: NotRequired[str]
    rule_id: NotRequired[str]
    source: PermissionDecisionDataSource


PermissionRuleAddedDataDecision: TypeAlias = 'Literal["allow", "deny"]'


PermissionRule: TypeAlias = 'str'


class PermissionRuleAddedData(TypedDict):
    challenge_id: Uuid
    decision: PermissionRuleAddedDataDecision
    rule: PermissionRule


class ResumedData(TypedDict):
    address: ParkAddress
    cause_event_id: EventId


RetryScheduledDataBasis: TypeAlias = 'Literal["retry_after", "backoff"]'


class RetryScheduledData(TypedDict):
    basis: RetryScheduledDataBasis
    delay_ms: Int
    not_before: TimeMs
    request_event_id: EventId


class ScheduleFiredData(TypedDict):
    occurrence_id: NonEmpty
    schedule_id: NonEmpty
    scheduled_for: TimeMs
    timezone: NonEmpty


ScheduleSkippedDataReason: TypeAlias = 'Literal["missed", "overlap", "removed"]'


class ScheduleSkippedData(TypedDict):
    occurrence_id: NonEmpty
    reason: ScheduleSkippedDataReason
    schedule_id: NonEmpty
    scheduled_for: TimeMs
    timezone: NonEmpty


SettingsChangedDataReason: TypeAlias = 'Literal["user", "fallback", "escalation", "revert"]'


class AdapterRef(TypedDict):
    name: Name
    settings: JsonObject
    version: NonEmpty


class ModelRef(TypedDict):
    name: NonEmpty
    provider: Name


ModelSettingsReasoningCarryover: TypeAlias = 'Literal["keep", "omit_prior"]'


class ModelSettings(TypedDict):
    adapter: AdapterRef
    model: ModelRef
    model_params: JsonObject
    reasoning_carryover: ModelSettingsReasoningCarryover


class SettingsChangedData(TypedDict):
    cause_event_id: NotRequired[EventId]
    reason: SettingsChangedDataReason
    settings: ModelSettings


SnapshotDataCaptureClass: TypeAlias = 'Literal["filesystem", "filesystem_and_processes", "full_vm"]'


class SnapshotDataQuiesced(TypedDict):
    excluded: list[NonEmpty]
    frozen: list[NonEmpty]
    stopped: list[NonEmpty]


class SnapshotData(TypedDict):
    capture_class: SnapshotDataCaptureClass
    expires_at: TimeMs | None
    knowledge_revision: NotRequired[Int]
    manifest_hash: Sha256
    provider: Name
    quiesced: SnapshotDataQuiesced
    sandbox_id: NonEmpty
    snapshot_id: NonEmpty


DocumentRef: TypeAlias = 'ArtifactRef'


class DocumentPart(TypedDict):
    pages: NotRequired[PosInt]
    ref: DocumentRef
    title: NotRequired[str]
    type: Literal["document_ref"]


AudioRef: TypeAlias = 'ArtifactRef'


class AudioPart(TypedDict):
    duration_ms: PosInt
    ref: AudioRef
    transcript: NotRequired[str]
    type: Literal["audio_ref"]


InputPart: TypeAlias = 'TextPart | ImagePart | DocumentPart | AudioPart'


SteerDataSource: TypeAlias = 'Literal["api", "cli", "channel", "parent_agent"]'


class SteerData(TypedDict):
    content: NotRequired[list[InputPart]]
    delivery_event_id: NotRequired[EventId]
    source: SteerDataSource
    text: NotRequired[str]


class StopWhenIdleData(TypedDict):
    reason: NotRequired[str]


TeamMessageData = TypedDict(
    "TeamMessageData",
    {
        "from": 'NonEmpty',
        "message_id": 'NonEmpty',
        "ref": 'NotRequired[ArtifactRef]',
        "text": 'NotRequired[str]',
        "to": 'NonEmpty',
    },
)


class TeamOpenedData(TypedDict):
    lead: MemberRef
    lead_thread_id: ThreadId
    team: TeamId


class TeamTaskClaimedData(TypedDict):
    member: NonEmpty
    task_id: NonEmpty


class TeamTaskCreatedData(TypedDict):
    blocked_by: list[NonEmpty]
    description: NotRequired[str]
    subject: NonEmpty
    task_id: NonEmpty


TeamTaskUpdatedDataStatus: TypeAlias = 'Literal["completed", "failed", "released"]'


class TeamTaskUpdatedData(TypedDict):
    status: TeamTaskUpdatedDataStatus
    task_id: NonEmpty


ThreadStartedDataParentRelation: TypeAlias = 'Literal["subagent", "handoff", "team_member"]'


class ThreadStartedDataParent(TypedDict):
    branch_id: BranchId
    event_id: EventId
    relation: ThreadStartedDataParentRelation
    thread_id: ThreadId


class Threshold0(TypedDict):
    tokens: PosInt


class Threshold1(TypedDict):
    permille: int


Threshold: TypeAlias = 'Threshold0 | Threshold1'


class PolicyContextClearResults(TypedDict):
    exclude_tools: list[Name]
    idle_ms: NotRequired[PosInt]
    keep_recent: Int
    trigger: Threshold


class PolicyContextCompact(TypedDict):
    keep_tail: Threshold
    max_failures: PosInt
    trigger: Threshold


PolicyContextDeferTools: TypeAlias = 'Literal["auto", "always", "never"]'


class PolicyContextRestore(TypedDict):
    file_tokens: Int
    max_files: Int
    skill_tokens: Int
    skills_total_tokens: Int


PolicyContextServerEdits: TypeAlias = 'Literal["disabled", "exact_report"]'


class PolicyContextSpill(TypedDict):
    head_bytes: Int
    request_budget_bytes: PosInt
    tail_bytes: Int
    threshold_bytes: PosInt


class PolicyContext(TypedDict):
    cache_ttl_ms: PosInt
    clear_results: PolicyContextClearResults
    compact: PolicyContextCompact
    defer_threshold: Threshold
    defer_tools: PolicyContextDeferTools
    max_output_continuations: Int
    max_output_escalation_tokens: NotRequired[PosInt]
    max_pause_continuations: NotRequired[Int]
    reserve_tokens: Int
    restore: PolicyContextRestore
    server_edits: PolicyContextServerEdits
    spill: PolicyContextSpill


PolicyModelsItemInputBillingBound: TypeAlias = 'Literal["context_window", "none"]'


class PolicyModelsItemPrice(TypedDict):
    cache_read: NotRequired[Int]
    cache_write: NotRequired[Int]
    input: Int
    output: Int


class PolicyModelsItem(TypedDict):
    context_window: PosInt
    input_billing_bound: PolicyModelsItemInputBillingBound
    max_output_tokens: PosInt
    name: NonEmpty
    price: NotRequired[PolicyModelsItemPrice]
    provider: Name


PolicyOnUnknownUsage: TypeAlias = 'Literal["upper_bound", "stop"]'


PolicyOutputMode: TypeAlias = 'Literal["tool", "native"]'


class PolicyOutput(TypedDict):
    max_retries: Int
    mode: PolicyOutputMode
    schema: JsonObject
    schema_sha256: Sha256


class PolicyPermissions(TypedDict):
    allow: list[PermissionRule]
    allow_bypass: bool
    ask: list[PermissionRule]
    deny: list[PermissionRule]
    mode: PermissionMode
    plan_exit_mode: PermissionMode
    protected_paths: list[NonEmpty]


PolicyRetryFallbackScope: TypeAlias = 'Literal["turn", "thread"]'


class PolicyRetry(TypedDict):
    base_delay_ms: PosInt
    crash_resends: Int
    fallback_after: PosInt
    fallback_scope: PolicyRetryFallbackScope
    heartbeat_ms: PosInt
    max_delay_ms: PosInt
    max_retries: Int
    max_retry_after_ms: PosInt
    max_total_wait_ms: PosInt


class Policy(TypedDict):
    budget: NotRequired[Budget]
    context: NotRequired[PolicyContext]
    currency: NotRequired[str]
    fallback: NotRequired[list[ModelSettings]]
    handoffs: NotRequired[list[NonEmpty]]
    models: NotRequired[list[PolicyModelsItem]]
    on_unknown_usage: NotRequired[PolicyOnUnknownUsage]
    output: NotRequired[PolicyOutput]
    output_styles: NotRequired[dict[str, NonEmpty]]
    permissions: NotRequired[PolicyPermissions]
    retry: NotRequired[PolicyRetry]


class ThreadStartedDataTeam(TypedDict):
    id: TeamId
    log_branch_id: BranchId


EffectClass: TypeAlias = 'Literal["read_only", "sandbox_local", "idempotent", "reconcilable", "unguarded"]'


class RemoteCard(TypedDict):
    sha256: Sha256
    url: NonEmpty


class ToolSpec(TypedDict):
    dedup_window_ms: NotRequired[PosInt]
    defer_loading: NotRequired[bool]
    description: str
    effect_class: EffectClass
    ends_turn: NotRequired[bool]
    input_schema: NotRequired[JsonObject]
    name: Name
    output_schema: NotRequired[JsonObject]
    remote_card: NotRequired[RemoteCard]
    spec_ref: NotRequired[ArtifactRef]


class ThreadStartedData(TypedDict):
    adapter: AdapterRef
    agent_name: NonEmpty
    config_hash: Sha256
    instructions: str
    model: ModelRef
    model_params: JsonObject
    parent: NotRequired[ThreadStartedDataParent]
    policy: NotRequired[Policy]
    sandbox_provider: NotRequired[Name]
    team: NotRequired[ThreadStartedDataTeam]
    tools: list[ToolSpec]


TodosUpdatedDataTodosItemStatus: TypeAlias = 'Literal["pending", "in_progress", "completed"]'


class TodosUpdatedDataTodosItem(TypedDict):
    active_form: NotRequired[str]
    content: NonEmpty
    id: NonEmpty
    status: TodosUpdatedDataTodosItemStatus


class TodosUpdatedData(TypedDict):
    call_id: CallId
    todos: list[TodosUpdatedDataTodosItem]


class ToolCallData(TypedDict):
    call_id: CallId
    input: JsonObject
    name: Name
    request_event_id: EventId


ToolResultDataCompleteness: TypeAlias = 'Literal["complete", "partial"]'


ResultPart: TypeAlias = 'TextPart | ImagePart | DocumentPart | CitationPart'


ToolResultDataOrigin: TypeAlias = 'Literal["executed", "materialized_from_commit", "denied", "not_executed", "interrupted", "deferred", "answered"]'


class ToolResultData(TypedDict):
    call_id: CallId
    completeness: ToolResultDataCompleteness
    content: NotRequired[list[ResultPart]]
    is_error: bool
    origin: ToolResultDataOrigin
    preview: str
    ref: NotRequired[ArtifactRef]


ToolResultLateDataCompleteness: TypeAlias = 'Literal["complete", "partial"]'


class ToolResultLateData(TypedDict):
    call_id: CallId
    completeness: ToolResultLateDataCompleteness
    content: NotRequired[list[ResultPart]]
    is_error: bool
    preview: str
    ref: NotRequired[ArtifactRef]


ToolsChangedDataCauseKind: TypeAlias = 'Literal["tool_search", "mcp_list_changed", "host"]'


class ToolsChangedDataCause(TypedDict):
    call_id: NotRequired[CallId]
    kind: ToolsChangedDataCauseKind
    server: NotRequired[Name]


class ToolsChangedData(TypedDict):
    cause: NotRequired[ToolsChangedDataCause]
    tools: list[ToolSpec]
    tools_hash: Sha256


class ToolsLoadedData(TypedDict):
    call_id: CallId
    names: list[Name]


TurnCompletedDataCode: TypeAlias = 'Literal["content_unsupported", "continuation_unsupported", "transport_fence_unsupported", "secret_in_provider_output", "pin_unavailable", "pin_mismatch"]'


TurnCompletedDataReason: TypeAlias = 'Literal["end_turn", "max_turns", "budget_exhausted", "cancelled", "error", "interrupted", "stop_hook_limit", "max_output", "context_exhausted", "output_invalid", "input_denied", "model_unavailable", "handoff"]'


class TurnCompletedData(TypedDict):
    code: NotRequired[TurnCompletedDataCode]
    reason: TurnCompletedDataReason


UserInputDataSource: TypeAlias = 'Literal["api", "cli", "channel", "schedule", "parent_agent", "handoff", "team_task"]'


class UserInputData(TypedDict):
    budget: NotRequired[Budget]
    content: NotRequired[list[InputPart]]
    delivery_event_id: NotRequired[EventId]
    mail_id: NotRequired[MailId]
    source: UserInputDataSource
    text: NotRequired[str]


class WaitFinishedDataParkedItem(TypedDict):
    member: MemberRef
    reason: ParkReason


WaitId: TypeAlias = 'str'


class WaitFinishedData(TypedDict):
    finished: list[StoredMemberResult]
    parked: list[WaitFinishedDataParkedItem]
    pending: list[MemberRef]
    timed_out: bool
    wait_id: WaitId


class WaitStartedData(TypedDict):
    deadline: TimeMs
    members: list[MemberRef]
    mode: Literal["all", "any"] | PosInt
    wait_id: WaitId


class WokenData(TypedDict):
    causes: list[EventId]


ActorWithPrincipal: TypeAlias = 'Actor'



@overload
def draft(type: Literal["agent_finished"], data: AgentFinishedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["agent_spawned"], data: AgentSpawnedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["answer_rejected"], data: AnswerRejectedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["approval_denied"], data: ApprovalDeniedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["approval_granted"], data: ApprovalGrantedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["approval_requested"], data: ApprovalRequestedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["ask_closed"], data: AskClosedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["budget_exceeded"], data: BudgetExceededData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["cancel_requested"], data: CancelRequestedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["cancelled"], data: CancelledData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["channel_delivery"], data: ChannelDeliveryData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["compacted"], data: CompactedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["compaction_failed"], data: CompactionFailedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["compaction_requested"], data: CompactionRequestedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["context_edited"], data: ContextEditedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["context_preflight_blocked"], data: ContextPreflightBlockedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["effect_begin"], data: EffectBeginData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["effect_commit"], data: EffectCommitData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["effect_resolved"], data: EffectResolvedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["effect_unknown"], data: EffectUnknownData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["fork"], data: ForkData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["handoff"], data: HandoffData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["heartbeat"], data: HeartbeatData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["hook_decision"], data: HookDecisionData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["injected"], data: InjectedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["log_repaired"], data: LogRepairedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["mail_refused"], data: MailRefusedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["member_ended"], data: MemberEndedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["member_idle"], data: MemberIdleData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["member_observed"], data: MemberObservedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["member_started"], data: MemberStartedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["message_policy_decided"], data: MessagePolicyDecidedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["message_received"], data: MessageReceivedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["message_sent"], data: MessageSentData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["mode_changed"], data: ModeChangedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["model_attempt_abandoned"], data: ModelAttemptAbandonedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["model_request"], data: ModelRequestData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["model_response"], data: ModelResponseData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["model_response_recovered"], data: ModelResponseRecoveredData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["monitor_set"], data: MonitorSetData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["operator_refused"], data: OperatorRefusedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["operator_request"], data: OperatorRequestData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["output_validated"], data: OutputValidatedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["park_escalated"], data: ParkEscalatedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["parked"], data: ParkedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["permission_decision"], data: PermissionDecisionData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["permission_rule_added"], data: PermissionRuleAddedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["resumed"], data: ResumedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["retry_scheduled"], data: RetryScheduledData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["schedule_fired"], data: ScheduleFiredData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["schedule_skipped"], data: ScheduleSkippedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["settings_changed"], data: SettingsChangedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["snapshot"], data: SnapshotData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["steer"], data: SteerData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["stop_when_idle"], data: StopWhenIdleData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["team_message"], data: TeamMessageData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["team_opened"], data: TeamOpenedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["team_task_claimed"], data: TeamTaskClaimedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["team_task_created"], data: TeamTaskCreatedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["team_task_updated"], data: TeamTaskUpdatedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["thread_started"], data: ThreadStartedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["todos_updated"], data: TodosUpdatedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["tool_call"], data: ToolCallData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["tool_result"], data: ToolResultData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["tool_result_late"], data: ToolResultLateData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["tools_changed"], data: ToolsChangedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["tools_loaded"], data: ToolsLoadedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["turn_completed"], data: TurnCompletedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["user_input"], data: UserInputData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["wait_finished"], data: WaitFinishedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["wait_started"], data: WaitStartedData, actor: Actor | ActorWithPrincipal) -> Draft: ...

@overload
def draft(type: Literal["woken"], data: WokenData, actor: Actor | ActorWithPrincipal) -> Draft: ...


def draft(type: EventType, data: object, actor: Actor | ActorWithPrincipal) -> Draft:
    """An event to append: ``type`` with ``data`` of that type's shape, by ``actor``."""
    return Draft(type, data, actor)  # type: ignore[arg-type]

@overload
def data_of(event: Event, type: Literal["agent_finished"]) -> AgentFinishedData: ...

@overload
def data_of(event: Event, type: Literal["agent_spawned"]) -> AgentSpawnedData: ...

@overload
def data_of(event: Event, type: Literal["answer_rejected"]) -> AnswerRejectedData: ...

@overload
def data_of(event: Event, type: Literal["approval_denied"]) -> ApprovalDeniedData: ...

@overload
def data_of(event: Event, type: Literal["approval_granted"]) -> ApprovalGrantedData: ...

@overload
def data_of(event: Event, type: Literal["approval_requested"]) -> ApprovalRequestedData: ...

@overload
def data_of(event: Event, type: Literal["ask_closed"]) -> AskClosedData: ...

@overload
def data_of(event: Event, type: Literal["budget_exceeded"]) -> BudgetExceededData: ...

@overload
def data_of(event: Event, type: Literal["cancel_requested"]) -> CancelRequestedData: ...

@overload
def data_of(event: Event, type: Literal["cancelled"]) -> CancelledData: ...

@overload
def data_of(event: Event, type: Literal["channel_delivery"]) -> ChannelDeliveryData: ...

@overload
def data_of(event: Event, type: Literal["compacted"]) -> CompactedData: ...

@overload
def data_of(event: Event, type: Literal["compaction_failed"]) -> CompactionFailedData: ...

@overload
def data_of(event: Event, type: Literal["compaction_requested"]) -> CompactionRequestedData: ...

@overload
def data_of(event: Event, type: Literal["context_edited"]) -> ContextEditedData: ...

@overload
def data_of(event: Event, type: Literal["context_preflight_blocked"]) -> ContextPreflightBlockedData: ...

@overload
def data_of(event: Event, type: Literal["effect_begin"]) -> EffectBeginData: ...

@overload
def data_of(event: Event, type: Literal["effect_commit"]) -> EffectCommitData: ...

@overload
def data_of(event: Event, type: Literal["effect_resolved"]) -> EffectResolvedData: ...

@overload
def data_of(event: Event, type: Literal["effect_unknown"]) -> EffectUnknownData: ...

@overload
def data_of(event: Event, type: Literal["fork"]) -> ForkData: ...

@overload
def data_of(event: Event, type: Literal["handoff"]) -> HandoffData: ...

@overload
def data_of(event: Event, type: Literal["heartbeat"]) -> HeartbeatData: ...

@overload
def data_of(event: Event, type: Literal["hook_decision"]) -> HookDecisionData: ...

@overload
def data_of(event: Event, type: Literal["injected"]) -> InjectedData: ...

@overload
def data_of(event: Event, type: Literal["log_repaired"]) -> LogRepairedData: ...

@overload
def data_of(event: Event, type: Literal["mail_refused"]) -> MailRefusedData: ...

@overload
def data_of(event: Event, type: Literal["member_ended"]) -> MemberEndedData: ...

@overload
def data_of(event: Event, type: Literal["member_idle"]) -> MemberIdleData: ...

@overload
def data_of(event: Event, type: Literal["member_observed"]) -> MemberObservedData: ...

@overload
def data_of(event: Event, type: Literal["member_started"]) -> MemberStartedData: ...

@overload
def data_of(event: Event, type: Literal["message_policy_decided"]) -> MessagePolicyDecidedData: ...

@overload
def data_of(event: Event, type: Literal["message_received"]) -> MessageReceivedData: ...

@overload
def data_of(event: Event, type: Literal["message_sent"]) -> MessageSentData: ...

@overload
def data_of(event: Event, type: Literal["mode_changed"]) -> ModeChangedData: ...

@overload
def data_of(event: Event, type: Literal["model_attempt_abandoned"]) -> ModelAttemptAbandonedData: ...

@overload
def data_of(event: Event, type: Literal["model_request"]) -> ModelRequestData: ...

@overload
def data_of(event: Event, type: Literal["model_response"]) -> ModelResponseData: ...

@overload
def data_of(event: Event, type: Literal["model_response_recovered"]) -> ModelResponseRecoveredData: ...

@overload
def data_of(event: Event, type: Literal["monitor_set"]) -> MonitorSetData: ...

@overload
def data_of(event: Event, type: Literal["operator_refused"]) -> OperatorRefusedData: ...

@overload
def data_of(event: Event, type: Literal["operator_request"]) -> OperatorRequestData: ...

@overload
def data_of(event: Event, type: Literal["output_validated"]) -> OutputValidatedData: ...

@overload
def data_of(event: Event, type: Literal["park_escalated"]) -> ParkEscalatedData: ...

@overload
def data_of(event: Event, type: Literal["parked"]) -> ParkedData: ...

@overload
def data_of(event: Event, type: Literal["permission_decision"]) -> PermissionDecisionData: ...

@overload
def data_of(event: Event, type: Literal["permission_rule_added"]) -> PermissionRuleAddedData: ...

@overload
def data_of(event: Event, type: Literal["resumed"]) -> ResumedData: ...

@overload
def data_of(event: Event, type: Literal["retry_scheduled"]) -> RetryScheduledData: ...

@overload
def data_of(event: Event, type: Literal["schedule_fired"]) -> ScheduleFiredData: ...

@overload
def data_of(event: Event, type: Literal["schedule_skipped"]) -> ScheduleSkippedData: ...

@overload
def data_of(event: Event, type: Literal["settings_changed"]) -> SettingsChangedData: ...

@overload
def data_of(event: Event, type: Literal["snapshot"]) -> SnapshotData: ...

@overload
def data_of(event: Event, type: Literal["steer"]) -> SteerData: ...

@overload
def data_of(event: Event, type: Literal["stop_when_idle"]) -> StopWhenIdleData: ...

@overload
def data_of(event: Event, type: Literal["team_message"]) -> TeamMessageData: ...

@overload
def data_of(event: Event, type: Literal["team_opened"]) -> TeamOpenedData: ...

@overload
def data_of(event: Event, type: Literal["team_task_claimed"]) -> TeamTaskClaimedData: ...

@overload
def data_of(event: Event, type: Literal["team_task_created"]) -> TeamTaskCreatedData: ...

@overload
def data_of(event: Event, type: Literal["team_task_updated"]) -> TeamTaskUpdatedData: ...

@overload
def data_of(event: Event, type: Literal["thread_started"]) -> ThreadStartedData: ...

@overload
def data_of(event: Event, type: Literal["todos_updated"]) -> TodosUpdatedData: ...

@overload
def data_of(event: Event, type: Literal["tool_call"]) -> ToolCallData: ...

@overload
def data_of(event: Event, type: Literal["tool_result"]) -> ToolResultData: ...

@overload
def data_of(event: Event, type: Literal["tool_result_late"]) -> ToolResultLateData: ...

@overload
def data_of(event: Event, type: Literal["tools_changed"]) -> ToolsChangedData: ...

@overload
def data_of(event: Event, type: Literal["tools_loaded"]) -> ToolsLoadedData: ...

@overload
def data_of(event: Event, type: Literal["turn_completed"]) -> TurnCompletedData: ...

@overload
def data_of(event: Event, type: Literal["user_input"]) -> UserInputData: ...

@overload
def data_of(event: Event, type: Literal["wait_finished"]) -> WaitFinishedData: ...

@overload
def data_of(event: Event, type: Literal["wait_started"]) -> WaitStartedData: ...

@overload
def data_of(event: Event, type: Literal["woken"]) -> WokenData: ...


def data_of(event: Event, type: EventType) -> object:
    """``event``'s data as ``type``'s TypedDict; ``LogError`` when it is another type's."""
    if event.type != type:
        raise LogError(
            "invalid_transition", f"expected a {type} event, found {event.type}", seq=event.seq
        )
    return event.data
