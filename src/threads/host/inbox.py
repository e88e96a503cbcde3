"""The inbox's items: what a thread waits on a person for (``threads.run.waiting``), as the
host answers it, with the words a person decides by and whether the caller may decide it.

Invariant: ``may_decide`` applies the same rule the decision routes apply (the owning agent's
approvers, else the thread's starter; for a question, only the principal who asked it), so
an item marked decidable is not refused for authority, and one not marked is (403). Only a
thread's root branch is decided on by this host, so a fork's items are never decidable here.
"""

from __future__ import annotations

from dataclasses import dataclass

from threads.host.bodies import (
    ApprovalWaiting,
    EffectWaiting,
    InboxItem,
    ParentRef,
    PrincipalBody,
    QuestionWaiting,
)
from threads.principal import Principal
from threads.run import Agent, Waiting, explain, refusal_given


@dataclass(frozen=True, slots=True)
class Place:
    """Where the items wait and who asks: the branch, its agent (this host's, when it serves
    it), its starter, and whether it is the thread's root."""

    thread_id: str
    branch_id: str
    tenant_id: str
    agent_name: str | None
    agent: Agent | None
    starter: Principal | None
    root: bool
    parent: tuple[str, str] | None = None  # (thread id, relation): a subagent's, a target's


def inbox_items(place: Place, waiting: Waiting, caller: Principal, now: int) -> list[InboxItem]:
    decider = (
        place.root
        and place.agent is not None
        and refusal_given(
            place.starter, caller, tenant=place.tenant_id, agent_approvers=place.agent.approvers
        ) is None
    )

    parent = None if place.parent is None else ParentRef.model_validate(
        {"thread_id": place.parent[0], "relation": place.parent[1]}
    )

    def item(kind: str, since: int, may: bool) -> dict[str, object]:
        return {"kind": kind, "thread_id": place.thread_id, "branch_id": place.branch_id,
                "agent": place.agent_name, "since": since, "may_decide": may, "parent": parent}

    out: list[InboxItem] = []
    for a in waiting.approvals:
        body = ApprovalWaiting(
            challenge_id=a.challenge_id, call_id=a.call_id, tool=a.tool, input=a.input,
            effect_class=a.effect_class, args_hash=a.args_hash,
            requested_by=_principal(a.requested_by), requested_at=a.requested_at,
            expires_at=a.expires_at, expired=a.expires_at <= now, suggested_rules=[a.tool],
        )
        out.append(InboxItem.model_validate(
            {**item("approval", a.requested_at, decider), "approval": body}))
    for f in waiting.effects:
        words = explain(f, now)
        effect = EffectWaiting(
            effect_key=f.effect_key, call_id=f.call_id, tool=f.tool, input=f.input,
            effect_class=f.effect_class, attempts=f.attempts, reason=f.unknown_reason,
            parked_at=f.parked_at, proved=words.proved, unproved=words.unproved,
            if_done=words.if_done, if_not_done=words.if_not_done,
            not_done_refused_until=words.not_done_refused_until,
        )
        out.append(InboxItem.model_validate(
            {**item("effect", f.parked_at or 0, decider), "effect": effect}))
    for q in waiting.questions:
        asker = (
            place.root and place.agent is not None and q.asked_by == caller
            and caller.tenant == place.tenant_id
        )
        question = QuestionWaiting(
            call_id=q.call_id, question=q.question,
            options=list(q.options) if q.options is not None else None,
            multi_select=q.multi_select, asked_by=_principal(q.asked_by), asked_at=q.asked_at,
            expires_at=q.expires_at,
        )
        out.append(InboxItem.model_validate(
            {**item("question", q.asked_at, asker), "question": question}))
    return out


def item_id(item: InboxItem) -> str:
    """The id a decision names: the challenge, the effect key or the question's call."""
    if item.approval is not None:
        return item.approval.challenge_id
    if item.effect is not None:
        return item.effect.effect_key
    assert item.question is not None
    return item.question.call_id


def _principal(principal: Principal | None) -> PrincipalBody | None:
    if principal is None:
        return None
    return PrincipalBody(
        issuer=principal.issuer, tenant=principal.tenant, subject=principal.subject
    )
