"""Reader rules and projections for features other writers record: subagents, todo lists,
handoffs, permission modes, settings epochs, structured output, compaction and context edits.

This implementation writes none of these events, but a log threads-ts wrote may hold them, and
a reader must judge it exactly as upstream does: a rule broken raises ``LogError`` at that
event's seq (``invalid_transition``). ``Features`` is the part of the fold these events build;
the handlers read the rest of the fold only through ``ChainFacts``.
Invariant: like the rest of reduce, a pure function of the events it was given (no I/O).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypedDict

from threads.errors import LogError
from threads.log.hashing import value_hash
from threads.log.json_types import JsonValue
from threads.log.lines import Event
from threads.log.output_eval import issues_of
from threads.log.vocabulary import (
    Budget,
    ModelSettings,
    Policy,
    Span,
    ThreadStartedData,
    TodosUpdatedDataTodosItem,
    ToolResultData,
    Usage,
    data_of,
)

# agent_finished statuses; a spawned child is ``running`` until its one agent_finished
CHILD_RUNNING = "running"


class ChainFacts(Protocol):
    """What the feature rules need to know about the rest of the fold."""

    @property
    def thread_started(self) -> ThreadStartedData | None: ...

    def attempt_open(self) -> bool: ...

    def has_call(self, call_id: str) -> bool: ...

    def has_result(self, call_id: str) -> bool: ...

    def result_of(self, call_id: str) -> ToolResultData | None: ...

    def event_by_id(self, event_id: str) -> Event | None: ...

    def turn_open(self) -> bool: ...


@dataclass(slots=True)
class Child:
    """A child thread an ``agent_spawned`` created, and its one terminal result."""

    child_thread_id: str
    call_id: str
    agent_name: str
    mode: str
    budget: Budget | None
    status: str = CHILD_RUNNING
    usage: Usage | None = None


class ChildEntry(TypedDict):
    child_thread_id: str
    status: str


class FeatureProjections(TypedDict):
    children: list[ChildEntry]
    todos: list[TodosUpdatedDataTodosItem]


@dataclass(slots=True)
class Features:
    children: dict[str, Child] = field(default_factory=dict)
    todos: list[TodosUpdatedDataTodosItem] = field(default_factory=list)
    handoff: Event | None = None
    mode: str | None = None  # None until read from the pinned policy
    settings: ModelSettings | None = None  # the settings epoch in force; None: as pinned
    settings_event: Event | None = None  # the settings_changed that began it
    omit_reasoning_before: int = 0  # seq of the last settings_changed{omit_prior}
    boundaries: set[int] = field(default_factory=set)  # seqs after which no step was open
    accepted_output: JsonValue = None
    accepted_seq: int = 0  # seq of the output_validated that accepted it
    style: Event | None = None  # the latest injected{output_style}
    restyle_at: int | None = None  # the seq a host may restore ``style`` at (after a compacted)

    def projections(self) -> FeatureProjections:
        return {
            "children": [
                {"child_thread_id": c.child_thread_id, "status": c.status}
                for c in self.children.values()
            ],
            "todos": [item.copy() for item in self.todos],
        }


def _fail(event: Event, message: str) -> LogError:
    return LogError("invalid_transition", message, seq=event.seq)


def _policy(facts: ChainFacts) -> Policy:
    started = facts.thread_started
    return {} if started is None else started.get("policy", {})


def _on_agent_spawned(features: Features, facts: ChainFacts, event: Event) -> None:
    data = data_of(event, "agent_spawned")
    if not facts.has_call(data["call_id"]):
        raise _fail(event, f"agent_spawned names call {data['call_id']!r}, which has no tool_call")
    if data["child_thread_id"] in features.children:
        raise _fail(event, f"child thread {data['child_thread_id']} was already spawned")
    features.children[data["child_thread_id"]] = Child(
        data["child_thread_id"], data["call_id"], data["agent_name"], data["mode"],
        data.get("budget"),
    )


def _on_agent_finished(features: Features, facts: ChainFacts, event: Event) -> None:
    data = data_of(event, "agent_finished")
    child = features.children.get(data["child_thread_id"])
    if child is None:
        raise _fail(event, "agent_finished for a child thread no agent_spawned created")
    if child.status != CHILD_RUNNING:
        raise _fail(event, "agent_finished appears exactly once per spawned child")
    child.status = data["status"]
    child.usage = data["usage"]


def _on_todos_updated(features: Features, facts: ChainFacts, event: Event) -> None:
    todos = data_of(event, "todos_updated")["todos"]
    ids = [item["id"] for item in todos]
    if len(set(ids)) != len(ids):
        raise _fail(event, "todos_updated lists two items with the same id")
    features.todos = list(todos)


def check_tools_hash(event: Event) -> None:
    """``tools_changed.tools_hash`` is the hash of the canonical bytes of its ``tools``."""
    data = data_of(event, "tools_changed")
    if data["tools_hash"] != value_hash(data["tools"]):
        raise _fail(event, "tools_changed tools_hash is not the hash of its tools")


def _on_handoff(features: Features, facts: ChainFacts, event: Event) -> None:
    if not facts.has_call(data_of(event, "handoff")["call_id"]):
        raise _fail(event, "handoff names a call that has no tool_call")
    if features.handoff is not None:
        raise _fail(event, "the thread was already handed off")
    features.handoff = event


def check_after_handoff(features: Features, event: Event) -> None:
    """After a handoff the thread takes no new input and no model request."""
    if features.handoff is not None:
        raise _fail(event, f"{event.type} after the thread was handed off")


def current_mode(features: Features, facts: ChainFacts) -> str:
    if features.mode is None:
        permissions = _policy(facts).get("permissions")
        return "default" if permissions is None else permissions.get("mode", "default")
    return features.mode


def _on_mode_changed(features: Features, facts: ChainFacts, event: Event) -> None:
    data = data_of(event, "mode_changed")
    mode = current_mode(features, facts)
    if data["from"] != mode:
        raise _fail(event, f"mode_changed from {data['from']!r}, but the mode is {mode!r}")
    permissions = _policy(facts).get("permissions")
    allowed = permissions is not None and permissions.get("allow_bypass", False)
    if data["to"] == "bypass" and not allowed:
        raise _fail(event, "mode_changed to bypass, but the policy does not allow bypass")
    if event.actor.get("kind") in ("model", "tool"):
        raise _fail(event, "a permission mode is never changed by the agent alone")
    features.mode = data["to"]


def _on_settings_changed(features: Features, facts: ChainFacts, event: Event) -> None:
    if facts.attempt_open():
        raise _fail(event, "settings_changed while a model attempt awaits its response")
    settings = data_of(event, "settings_changed")["settings"]
    models = _policy(facts).get("models")
    if models is not None and not any(
        m.get("name") == settings["model"]["name"]
        and m.get("provider") == settings["model"]["provider"]
        for m in models
    ):
        raise _fail(event, f"settings_changed names model {settings['model']['name']!r}, which"
                    " the policy does not list")
    features.settings = settings
    features.settings_event = event
    if settings["reasoning_carryover"] == "omit_prior":
        features.omit_reasoning_before = event.seq


def _on_output_validated(features: Features, facts: ChainFacts, event: Event) -> None:
    data = data_of(event, "output_validated")
    output = _policy(facts).get("output")
    if output is None:
        raise _fail(event, "output_validated, but the thread pins no output schema")
    if data["schema_sha256"] != output.get("schema_sha256"):
        raise _fail(event, "output_validated schema_sha256 is not the pinned output schema's")
    source = facts.event_by_id(data["source_event_id"])
    if source is None or source.type not in (
        "tool_call", "model_response", "model_response_recovered"
    ):
        raise _fail(event, "output_validated names no candidate (tool_call or model_response)")
    if data["outcome"] == "accepted":
        issues = issues_of(output.get("schema", {}), data["value"])
        if issues:  # rule 20; a schema outside the dialect accepts nothing (fails closed)
            raise _fail(event, "output_validated accepted a value its schema refuses"
                        f" (at {issues[0]['path'] or 'the root'}: {issues[0]['message']})")
        features.accepted_output = data["value"]
        features.accepted_seq = event.seq


def _on_context_edited(features: Features, facts: ChainFacts, event: Event) -> None:
    """Rule 19: edits name recorded results; a redaction's spans lie inside one text part
    (part 0 is the preview when the result has no content), on character boundaries."""
    for edit in data_of(event, "context_edited")["edits"]:
        result = facts.result_of(edit["call_id"])
        if result is None:
            raise _fail(event, f"context_edited names call {edit['call_id']!r}, which has no"
                        " recorded result")
        if edit["action"] == "redact" and not spans_fit(result, edit["part"], edit["spans"]):
            raise _fail(event, f"context_edited redacts spans outside text part {edit['part']}"
                        f" of call {edit['call_id']!r} or off its character boundaries")


def spans_fit(result: Mapping[str, Any], part: int, spans: Sequence[Span]) -> bool:
    """Rule 19's test of a redaction: text part ``part`` of ``result`` holds every span, each on
    character boundaries."""
    parts = result.get("content") or [{"type": "text", "text": result["preview"]}]
    if part >= len(parts) or parts[part].get("type") != "text":
        return False
    raw = parts[part]["text"].encode("utf-8")

    def boundary(at: int) -> bool:  # not inside a multi-byte character
        return at == len(raw) or (0 <= at < len(raw) and raw[at] & 0xC0 != 0x80)

    return all(
        s["start"] <= s["end"] <= len(raw) and boundary(s["start"]) and boundary(s["end"])
        for s in spans
    )


def _on_injected(features: Features, facts: ChainFacts, event: Event) -> None:
    """Rule 29: an output style is trusted, inline, the text the policy pins under its name;
    a user sets it between turns, and the host only restores the latest one, as the event
    right after the ``compacted`` whose range held it. The model, a tool or anyone else never
    sets one."""
    data = data_of(event, "injected")
    if data["source"] != "output_style":
        return
    name = data["origin"]["id"]
    pinned = (_policy(facts).get("output_styles") or {}).get(name)
    if pinned is None:
        raise _fail(event, f"injected output_style {name!r} is not pinned")
    if data["trust"] != "trusted_instruction" or "ref" in data or data.get("text") != pinned:
        raise _fail(event, "injected output_style is the trusted inline text the policy pins")
    kind = event.actor.get("kind")
    if kind == "user" and "principal" in event.actor:
        if facts.turn_open():
            raise _fail(event, "an output style is set only between turns")
    elif kind == "host":
        style = features.style
        if (
            event.seq != features.restyle_at
            or style is None
            or data_of(style, "injected")["origin"]["id"] != name
        ):
            raise _fail(event, "the host injects an output style only to restore the latest one"
                        " right after the compacted range that held it")
    else:
        raise _fail(event, f"an output style is set by a user or restored by the host, not"
                    f" by {kind!r}")
    features.style = event
    features.restyle_at = None


def _on_compacted(features: Features, facts: ChainFacts, event: Event) -> None:
    style = features.style
    data = data_of(event, "compacted")
    held = style is not None and data["from_seq"] <= style.seq <= data["to_seq"]
    features.restyle_at = event.seq + 1 if held else None


Handler = Callable[[Features, ChainFacts, Event], None]

HANDLERS: dict[str, Handler] = {
    "agent_spawned": _on_agent_spawned,
    "agent_finished": _on_agent_finished,
    "todos_updated": _on_todos_updated,
    "handoff": _on_handoff,
    "mode_changed": _on_mode_changed,
    "settings_changed": _on_settings_changed,
    "output_validated": _on_output_validated,
    "context_edited": _on_context_edited,
    "injected": _on_injected,
    "compacted": _on_compacted,
}
