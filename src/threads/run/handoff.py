"""Handoffs: an agent hands the conversation to another agent, whose own thread carries it on.

``agent(..., handoffs=[...])`` pins ``policy.handoffs`` (the targets' names), the ``handoff``
tool and a system line naming them. An allowed ``handoff`` call is never executed: when its turn
comes (in call order) an unlisted name closes it ``not_executed``; a listed one is ONE append,
``handoff{call_id, to_agent, to_thread_id, forwarded: transcript, forwarded_ref}`` + the call's
``tool_result`` + ``turn_completed{handoff}`` (with the forwarded transcript's artifact,
``threads.run.handoff_transcript``). The reply's other calls never run.

The target thread's id is chosen in that append, so the target is made from the log alone
(``ensure_target``): a crash before or after its header, then a rerun, makes one target, never
two. Its header, ``thread_started.parent{relation: handoff}``, ``injected{source: handoff}`` and
``user_input{source: handoff}`` are one transaction; its first turn is run by the runner.
Invariant (rule 26): after ``handoff`` the source takes no input, steer or model request; a
run of it returns the same ``HandedOff`` again.
"""

from __future__ import annotations

from threads.errors import ConfigError, NotFoundError
from threads.log.event_types import Actor
from threads.log.fold import Call, Fold
from threads.log.ids import uuid7
from threads.log.lines import Event, Header, first_event, make_header, next_event
from threads.log.vocabulary import (
    ArtifactRef,
    HandoffData,
    InjectedData,
    ThreadStartedDataParent,
    UserInputData,
    data_of,
    draft,
)
from threads.principal import Principal
from threads.run.config import AgentSpec
from threads.run.drafts import HOST, TOOL, tool_result_data
from threads.run.handoff_tool import HANDOFF
from threads.run.handoff_transcript import spill_threshold, transcript
from threads.run.record import close
from threads.run.results import ErrorInfo, Failed, HandedOff
from threads.run.runtime import Runtime
from threads.run.thread import Thread
from threads.store.protocol import PendingArtifact
from threads.store.rows import artifact_ref

BY_HOST: Actor = {"kind": "host"}


def pinned_targets(fold: Fold) -> list[str] | None:
    """``policy.handoffs`` of the thread (None: it pins no handoff)."""
    targets = fold.policy.get("handoffs")
    return None if targets is None else [str(name) for name in targets]


def is_handoff(fold: Fold, name: str) -> bool:
    """A ``handoff`` call the run carries out itself (the thread pins handoff targets)."""
    return name == HANDOFF and pinned_targets(fold) is not None


async def hand_off(rt: Runtime, call: Call) -> None:
    """Carry out an allowed ``handoff`` call: refuse an unlisted target, else record the
    handoff, the call's result and the turn's end in one append."""
    fold = rt.fold
    name = str(call.input.get("agent", ""))
    if name not in (pinned_targets(fold) or []):
        await close(rt, call, f"{name} is not a handoff target of this agent",
                    origin="not_executed", actor=HOST)
        return
    policy = data_of(fold.events[0], "thread_started").get("policy", {})
    forwarded = transcript(fold.events, call.call_id, spill_threshold(policy))
    stored = artifact_ref(forwarded, "text/plain")
    ref: ArtifactRef = {
        "bytes": stored["bytes"], "media_type": stored["media_type"], "sha256": stored["sha256"]
    }
    data: HandoffData = {
        "call_id": call.call_id,
        "forwarded": "transcript",
        "forwarded_ref": ref,
        "to_agent": name,
        "to_thread_id": uuid7(rt.now()),
    }
    result = tool_result_data(call.call_id, f"handed off to {name}", origin="executed",
                              is_error=False)
    await rt.writer.append(
        [draft("handoff", data, BY_HOST), draft("tool_result", result, TOOL),
         draft("turn_completed", {"reason": "handoff"}, HOST)],
        artifacts=[PendingArtifact(forwarded, "text/plain")],
    )


def refusal(fold: Fold) -> ErrorInfo | None:
    """Why a handed-off thread takes no new input (rule 26), or None when it is not one."""
    event = fold.features.handoff
    if event is None:
        return None
    data = data_of(event, "handoff")
    return ErrorInfo(
        "invalid_transition",
        f"this thread was handed off to {data['to_agent']}, which carries the conversation on"
        f" in thread {data['to_thread_id']}: send the message there",
        event.seq,
    )


async def handed_off(rt: Runtime, input: str | None) -> Failed | HandedOff:
    """What a run of a handed-off thread returns: the same ``HandedOff`` (its target made if a
    crash left it unmade), or ``Failed(invalid_transition)`` for a new input."""
    refused = refusal(rt.fold)
    if input is not None and refused is not None:
        return Failed(rt.thread, refused)
    return await ensure_target(rt)


async def ensure_target(rt: Runtime) -> HandedOff:
    """The target thread the recorded handoff names, made when it does not exist yet."""
    event = rt.fold.features.handoff
    assert event is not None
    data = data_of(event, "handoff")
    spec = _target_spec(rt.spec, data["to_agent"])
    opener = _latest_input(rt.fold)
    principal = Principal.from_wire(opener.actor["principal"])
    store = rt.writer.store
    try:
        await store.root_branch(data["to_thread_id"])
    except NotFoundError:
        await rt.writer.check()  # still this branch's writer: no one else makes the target
        now = rt.now()
        header = make_header(data["to_thread_id"], uuid7(now), now)
        await store.create_branch(
            header, tenant_id=principal.tenant,
            events=_target_events(rt, header, spec, opener),
        )
    target = Thread(store, data["to_thread_id"], principal=principal, agent=spec)
    return HandedOff(rt.thread, target, data["to_agent"])


def _target_events(rt: Runtime, header: Header, spec: AgentSpec, opener: Event) -> list[Event]:
    """The target's ``thread_started`` (naming its parent), the forwarded transcript and the
    source's latest input, written with its header."""
    handoff = rt.fold.features.handoff
    assert handoff is not None
    data = data_of(handoff, "handoff")
    now = header.created_at
    parent: ThreadStartedDataParent = {
        "branch_id": rt.writer.branch_id,
        "event_id": handoff.event_id,
        "relation": "handoff",
        "thread_id": rt.writer.thread_id,
    }
    started = first_event(header, draft("thread_started", spec.config(parent=parent), HOST))
    injected: InjectedData = {
        "origin": {"id": rt.writer.thread_id},
        "source": "handoff",
        "trust": "untrusted_reference",
    }
    if "forwarded_ref" in data:
        injected["ref"] = data["forwarded_ref"]
    context = next_event(started, draft("injected", injected, BY_HOST), time=now)
    said: UserInputData = {"source": "handoff", "text": _input_text(opener)}
    by: Actor = {"kind": "user", "principal": opener.actor["principal"]}
    return [started, context, next_event(context, draft("user_input", said, by), time=now)]


def _input_text(opener: Event) -> str:
    said = data_of(opener, "user_input")
    text = said.get("text")
    if text is not None:
        return text
    return "\n".join(p["text"] for p in said.get("content", []) if p["type"] == "text")


def _latest_input(fold: Fold) -> Event:
    opener = next((e for e in reversed(fold.events) if e.type == "user_input"), None)
    if opener is None:  # a handoff is a tool call, made in a turn some input opened
        raise NotFoundError("the handed-off thread has no user_input")
    return opener


def _target_spec(spec: AgentSpec, name: str) -> AgentSpec:
    for target in spec.handoffs:
        if target.name == name:
            return target
    raise ConfigError(
        "invalid_config",
        f"this thread was handed off to {name!r}, which agent {spec.name!r} does not list in"
        " handoffs=[...]: run it with the agent it was started with",
    )
