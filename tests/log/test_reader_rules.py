"""The reader's rules for events this implementation reads but does not write (subagents, todos,
deferred results, handoff, modes, settings epochs, structured output, compaction, context
edits, questions): each log that breaks one is refused at that event's seq with its code, and
the same log written correctly reads."""

from __future__ import annotations

from typing import Any

import pytest

from hand_config import started_data
from threads.clock import FakeClock
from threads.errors import LogError
from threads.log.fold import Fold
from threads.log.hashing import value_hash
from threads.log.lines import Event
from threads.log.render import render
from threads.log.verify import verify_export
from threads.testing.sample_log import HOST, MODEL, USER, SampleLog

TOOL = {
    "description": "Do a thing.",
    "effect_class": "read_only",
    "input_schema": {"additionalProperties": True, "properties": {}, "type": "object"},
    "name": "do",
}
SCHEMA = {"properties": {"answer": {"type": "integer"}}, "required": ["answer"], "type": "object"}
MODELS = [
    {"context_window": 1000, "input_billing_bound": "context_window", "max_output_tokens": 100,
     "name": name, "price": {"input": 1, "output": 1}, "provider": "scripted"}
    for name in ("scripted-1", "scripted-small")
]
SMALL = {
    "adapter": {"name": "scripted", "settings": {}, "version": "1"},
    "model": {"name": "scripted-small", "provider": "scripted"},
    "model_params": {"max_tokens": 1024},
    "reasoning_carryover": "keep",
}


class Log:
    """A thread being written by hand: every model_request is the Render v1 of the log before
    it, so only the rule a test breaks is broken."""

    def __init__(self, **policy: Any) -> None:
        self.log = SampleLog(FakeClock(1790000000000))
        self.add("thread_started", started_data(TOOL, **policy))

    def add(self, type_: str, data: dict[str, Any], actor: dict[str, Any] = HOST) -> Event:
        return self.log.add(type_, data, actor)

    @property
    def events(self) -> list[Event]:
        return self.log.events

    def user(self, text: str = "hi") -> Event:
        return self.add("user_input", {"source": "api", "text": text}, USER)

    def request(self, attempt: int = 1, **override: Any) -> Event:
        rendered = render(self.events[0].data, self.events)
        data = {
            "attempt": attempt,
            "declared_prefix": rendered.declared_prefix(),
            "request_ref": rendered.request_ref(),
        }
        return self.add("model_request", {**data, **override})

    def respond(self, request: Event, *parts: dict[str, Any]) -> Event:
        content = list(parts) or [{"type": "text", "text": "ok"}]
        return self.add("model_response", {
            "completeness": "complete", "content": content,
            "request_event_id": request.event_id,
            "stop_reason": "tool_use" if any(p["type"] == "tool_use" for p in content)
            else "end_turn",
            "usage": {"input_tokens": 1, "output_tokens": 1},
        }, MODEL)

    def called(self, call_id: str = "c1", name: str = "do", **args: Any) -> Event:
        """One model turn that calls ``name``, recorded and allowed."""
        request = self.request()
        part = {"type": "tool_use", "call_id": call_id, "name": name, "input": args}
        self.respond(request, part)
        call = self.add("tool_call", {
            "call_id": call_id, "name": name, "input": args, "request_event_id": request.event_id,
        })
        self.add("permission_decision", {
            "call_id": call_id, "decision": "allow", "source": "policy", "rule_id": "r",
        })
        return call

    def result(self, call_id: str = "c1", origin: str = "executed",
               actor: dict[str, Any] = HOST) -> Event:
        return self.add("tool_result", {
            "call_id": call_id, "completeness": "complete", "is_error": False,
            "origin": origin, "preview": "done",
        }, actor)

    def done(self) -> Event:
        return self.add("turn_completed", {"reason": "end_turn"})

    def read(self) -> Fold:
        fold = Fold()
        verify_export(self.log.export(), apply=fold.apply, on_header=fold.header)
        return fold

    def refused(self, code: str = "invalid_transition") -> LogError:
        """The log is refused at its last event's seq with ``code``."""
        with pytest.raises(LogError) as caught:
            self.read()
        assert (caught.value.code, caught.value.seq) == (code, self.events[-1].seq), (
            caught.value.message
        )
        return caught.value


# ---- subagents -------------------------------------------------------------------------------

CHILD = "0192a000-0000-7000-8000-0000000000c1"


def spawned(log: Log) -> None:
    log.user()
    log.called(name="do", agent="reviewer")
    log.add("agent_spawned", {
        "agent_name": "reviewer", "budget": {"max_model_requests": 20}, "call_id": "c1",
        "child_thread_id": CHILD, "isolation": "none", "mode": "foreground",
    })


def finished(log: Log, status: str = "completed") -> Event:
    return log.add("agent_finished", {
        "child_thread_id": CHILD, "status": status,
        "usage": {"input_tokens": 5, "output_tokens": 5},
    })


def test_children_project_their_status_and_keep_their_budget() -> None:
    log = Log()
    spawned(log)
    running = log.read()
    assert running.projections()["children"] == [{"child_thread_id": CHILD, "status": "running"}]
    finished(log, "budget_exhausted")
    fold = log.read()
    assert fold.projections()["children"] == [
        {"child_thread_id": CHILD, "status": "budget_exhausted"}
    ]
    assert fold.features.children[CHILD].budget == {"max_model_requests": 20}


def test_a_child_finishes_once() -> None:
    log = Log()
    spawned(log)
    finished(log)
    finished(log, "failed")
    log.refused()


def test_a_finish_needs_its_spawn() -> None:
    log = Log()
    log.user()
    finished(log)
    log.refused()


def test_a_spawn_names_a_recorded_call() -> None:
    log = Log()
    log.user()
    log.add("agent_spawned", {
        "agent_name": "reviewer", "call_id": "nope", "child_thread_id": CHILD,
        "isolation": "none", "mode": "background",
    })
    log.refused()


# ---- todos, tools_changed, handoff -----------------------------------------------------------


def todos(*ids: str) -> dict[str, Any]:
    items = [{"content": f"item {i}", "id": i, "status": "pending"} for i in ids]
    return {"call_id": "c1", "todos": items}


def test_todo_ids_are_unique_and_the_latest_list_projects() -> None:
    log = Log()
    log.user()
    log.called()
    log.add("todos_updated", todos("1", "2"))
    assert [t["id"] for t in log.read().projections()["todos"]] == ["1", "2"]
    log.add("todos_updated", todos("3", "3"))
    log.refused()


@pytest.mark.parametrize("honest", [True, False])
def test_tools_changed_carries_the_hash_of_its_tools(honest: bool) -> None:
    log = Log()
    tools = [TOOL, {**TOOL, "name": "other"}]
    log.add("tools_changed", {
        "tools": tools, "tools_hash": value_hash(tools if honest else [TOOL]),
    })
    if honest:
        assert [t["name"] for t in log.read().tools] == ["do", "other"]
    else:
        log.refused()


@pytest.mark.parametrize("after", ["user_input", "model_request"])
def test_nothing_new_after_a_handoff(after: str) -> None:
    log = Log()
    log.user()
    log.called()
    log.add("handoff", {
        "call_id": "c1", "forwarded": "none", "to_agent": "billing",
        "to_thread_id": "0192a000-0000-7000-8000-0000000000b1",
    })
    log.read()
    if after == "user_input":
        log.result()
        log.add("turn_completed", {"reason": "handoff"})
        log.user("more")
    else:
        log.result()
        log.request()
    log.refused()


# ---- permission mode, settings epochs --------------------------------------------------------

PERMISSIONS = {
    "allow": [], "allow_bypass": False, "ask": [], "deny": [], "mode": "default",
    "plan_exit_mode": "default", "protected_paths": [],
}


@pytest.mark.parametrize(
    ("change", "allow_bypass", "ok"),
    [
        ({"from": "default", "to": "plan"}, False, True),
        ({"from": "plan", "to": "default"}, False, False),  # not the current mode
        ({"from": "default", "to": "bypass"}, False, False),  # bypass not allowed
        ({"from": "default", "to": "bypass"}, True, True),
    ],
)
def test_mode_changes(change: dict[str, str], allow_bypass: bool, ok: bool) -> None:
    log = Log(permissions={**PERMISSIONS, "allow_bypass": allow_bypass})
    log.add("mode_changed", change, USER)
    if ok:
        assert log.read().projections()["mode"] == change["to"]
    else:
        log.refused()


def test_the_agent_never_changes_the_mode_alone() -> None:
    log = Log(permissions=PERMISSIONS)
    log.add("mode_changed", {"from": "default", "to": "plan"}, MODEL)
    with pytest.raises(LogError):  # the schema or the rule: never the model
        log.read()


def test_a_settings_epoch_changes_line_0_of_later_requests() -> None:
    log = Log(models=MODELS)
    log.add("settings_changed", {"reason": "user", "settings": SMALL}, USER)
    log.user()
    log.request()  # renders the new epoch's line 0
    assert log.read().projections()["model"]["name"] == "scripted-small"
    old = render(log.events[0].data, []).declared_prefix()
    log.respond(log.events[-1])
    log.done()
    log.user("again")
    log.request(declared_prefix=old)  # the pinned line 0 is the old epoch's
    log.refused("prefix_changed")


def test_settings_never_change_while_an_attempt_is_open() -> None:
    log = Log(models=MODELS)
    log.user()
    log.request()
    log.add("settings_changed", {"reason": "fallback", "settings": SMALL})
    log.refused()


def test_settings_name_a_model_the_policy_lists() -> None:
    log = Log(models=MODELS[:1])
    log.add("settings_changed", {"reason": "user", "settings": SMALL}, USER)
    log.refused()


def test_a_request_declares_its_own_line_0() -> None:
    log = Log()
    log.user()
    log.request(declared_prefix={"bytes": 3, "sha256": "0" * 64})
    log.refused("prefix_changed")


def test_a_resent_attempt_follows_an_abandoned_one() -> None:
    log = Log()
    log.user()
    first = log.request()
    log.add("model_attempt_abandoned", {
        "provider_outcome": "failed", "reason": "overloaded", "request_event_id": first.event_id,
    })
    log.request(attempt=2)
    log.read()
    log.respond(log.events[-1])
    log.request(attempt=3)
    log.refused()


# ---- structured output -----------------------------------------------------------------------


def output_log(value: Any, schema_sha256: str | None = None) -> Log:
    log = Log(output={
        "max_retries": 2, "mode": "native", "schema": SCHEMA,
        "schema_sha256": schema_sha256 or value_hash(SCHEMA),
    })
    log.user()
    response = log.respond(log.request())
    outcome = {"outcome": "accepted", "value": value}
    log.add("output_validated", {
        "schema_sha256": value_hash(SCHEMA), "source_event_id": response.event_id, **outcome,
    })
    return log


def test_an_accepted_output_validates_against_the_pinned_schema() -> None:
    assert output_log({"answer": 42}).read().features.accepted_output == {"answer": 42}
    output_log({"answer": "forty-two"}).refused()


def test_an_output_check_names_the_pinned_schema() -> None:
    output_log({"answer": 1}, schema_sha256="1" * 64).refused()


# ---- compaction, context edits, deferred results, questions ----------------------------------


def compaction(log: Log, start: Event, end: Event) -> Event:
    ref = {"bytes": 7, "media_type": "text/plain", "sha256": "2" * 64}
    return log.add("compacted", {
        "from_event_id": start.event_id, "from_seq": start.seq, "summary_ref": ref,
        "to_event_id": end.event_id, "to_seq": end.seq,
    })


def test_a_compaction_range_never_splits_a_step() -> None:
    log = Log()
    first = log.user()
    call = log.called()
    log.result()
    done = log.done()
    log.user("next")
    compaction(log, first, done)
    log.read()
    compaction(log, first, call)  # ends between a call and its result
    log.refused()


def test_a_context_edit_names_recorded_results() -> None:
    log = Log()
    log.user()
    log.called()
    log.add("context_edited", {"edits": [{"action": "clear", "call_id": "c1"}], "reason": "idle"})
    log.refused()


def test_late_results_follow_a_deferred_placeholder_once() -> None:
    log = Log()
    log.user()
    log.called()
    log.result(origin="deferred")
    log.add("heartbeat", {"running_call_ids": ["c1"]})
    late = {"call_id": "c1", "completeness": "complete", "is_error": False, "preview": "12 ok"}
    log.add("tool_result_late", late, {"kind": "tool"})
    fold = log.read()
    assert [role for role, _ in fold.transcript][-2:] == ["context", "tool"]
    log.add("heartbeat", {"running_call_ids": ["c1"]})  # no longer running
    log.refused()


def test_a_late_result_needs_a_placeholder() -> None:
    log = Log()
    log.user()
    log.called()
    log.result()
    log.add("tool_result_late", {
        "call_id": "c1", "completeness": "complete", "is_error": False, "preview": "again",
    }, {"kind": "tool"})
    log.refused()


@pytest.mark.parametrize("asked", [True, False])
def test_an_answer_needs_an_open_question(asked: bool) -> None:
    log = Log()
    log.user()
    log.called(name="ask_user", question="Staging or production?")
    if asked:
        log.add("parked", {"address": {"id": "c1", "kind": "input"}, "reason": "awaiting_input"})
    log.result(origin="answered", actor=USER)
    if asked:
        assert log.read().status == "in_turn"  # the answer closed the question
    else:
        log.refused()


def test_a_tool_call_records_a_part_of_its_response() -> None:
    log = Log()
    log.user()
    request = log.request()
    log.respond(request, {"type": "tool_use", "call_id": "c1", "name": "do", "input": {"a": 1}})
    log.add("tool_call", {
        "call_id": "c1", "name": "do", "input": {"a": 2}, "request_event_id": request.event_id,
    })
    log.refused()


def test_woken_opens_a_turn_only_when_none_is_open() -> None:
    log = Log()
    log.user()
    log.called()
    log.add("agent_spawned", {
        "agent_name": "reviewer", "call_id": "c1", "child_thread_id": CHILD,
        "isolation": "none", "mode": "background",
    })
    log.result(origin="deferred")
    log.respond(log.request())
    log.done()
    late = log.add("tool_result_late", {
        "call_id": "c1", "completeness": "complete", "is_error": False, "preview": "12 ok",
    }, {"kind": "tool"})
    log.add("woken", {"causes": [late.event_id]}, USER)
    assert log.read().status == "in_turn"
    log.add("woken", {"causes": [late.event_id]}, USER)
    log.refused()


def test_an_event_is_found_by_id_once_applied_even_after_earlier_lookups() -> None:
    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    log.turn()
    fold = Fold()
    fold.header(log.header)
    fold.extend(log.events[:5])
    assert fold.event_by_id(log.events[2].event_id) is log.events[2]
    assert fold.event_by_id(log.events[6].event_id) is None
    for event in log.events[5:]:
        fold.apply(event)
    assert fold.event_by_id(log.events[6].event_id) is log.events[6]
    assert fold.event_by_id(log.events[2].event_id) is log.events[2]
