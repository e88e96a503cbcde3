"""The declared extension over the vendored event schema (``events.ext.schema.json``): what the
reference writes today that the vendored schema predates. The merge is explicit (a widened
vendored definition must be declared, every entry names its source, an added type brings its
``ev_<type>``); the reader knows ``tools_loaded`` and ``answer_rejected``, deferred tool stubs
(``spec_ref``) and remote tools (``remote_card``), each with its rules; a type it does not know
is still refused when critical."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from test_reader_rules import TOOL, Log

from threads.clock import FakeClock
from threads.errors import LogError
from threads.log import schema
from threads.log.hashing import value_hash
from threads.log.schema import validate_event
from threads.log.schema_ext import merge_extension
from threads.testing.sample_log import HOST, SampleLog

ARTIFACT = {"bytes": 10, "media_type": "application/json", "sha256": "b" * 64}
LATER = {"defer_loading": True, "description": "Used later.", "effect_class": "read_only",
         "input_schema": {"type": "object"}, "name": "later"}
STUB = {"defer_loading": True, "description": "A stub.", "effect_class": "read_only",
        "name": "stubbed", "spec_ref": ARTIFACT}
REMOTE = {"description": "A partner agent.", "effect_class": "unguarded",
          "input_schema": {"type": "object"}, "name": "partner",
          "remote_card": {"sha256": "c" * 64, "url": "https://partner.example/card"}}


class ToolLog(Log):
    """``Log`` with a tool set of the test's choosing."""

    def __init__(self, *tools: dict[str, Any]) -> None:
        self.log = SampleLog(FakeClock(1790000000000))
        config: dict[str, Any] = {
            "adapter": {"name": "scripted", "settings": {}, "version": "1"},
            "agent_name": "demo", "instructions": "Be brief.",
            "model": {"name": "scripted-1", "provider": "scripted"},
            "model_params": {"max_tokens": 1024}, "tools": [TOOL, *tools],
        }
        self.add("thread_started", {**config, "config_hash": value_hash(config)})


def vendored() -> dict[str, Any]:
    return schema._load("events.v1.schema.json")


def extension() -> dict[str, Any]:
    return schema._load("events.ext.schema.json")


# ---- the merge ----------------------------------------------------------------------------


def test_the_vendored_copy_is_untouched_and_the_extension_is_declared() -> None:
    ext = extension()
    assert set(ext["sources"]) == set(ext["$defs"])
    merged = schema._schema()
    assert merged["$defs"]["ToolSpec"] == ext["$defs"]["ToolSpec"]
    assert "spec_ref" not in vendored()["$defs"]["ToolSpec"]["properties"]
    assert "tools_loaded" not in json.dumps(vendored())


def _broken(change: str) -> dict[str, Any]:
    ext = copy.deepcopy(extension())
    if change == "undeclared":
        ext["replaces"] = []
    elif change == "replaces_nothing":
        ext["replaces"].append("NoSuchDef")
        ext["$defs"]["NoSuchDef"] = {"type": "string"}
        ext["sources"]["NoSuchDef"] = "nowhere"
    elif change == "known_type":
        ext["event_types"].append("turn_completed")
    elif change == "no_definition":
        ext["event_types"].append("remote_call")
    elif change == "no_source":
        del ext["sources"]["ev_tools_loaded"]
    return ext


@pytest.mark.parametrize("change", [
    "undeclared", "replaces_nothing", "known_type", "no_definition", "no_source",
])
def test_an_extension_that_is_not_explicit_fails_at_load(change: str) -> None:
    with pytest.raises(ValueError, match="schema extension"):
        merge_extension(vendored(), _broken(change))


# ---- deferred tools ------------------------------------------------------------------------


def loaded(log: Log, *names: str, call_id: str = "c1") -> None:
    log.add("tools_loaded", {"call_id": call_id, "names": list(names)})


def test_a_call_loads_deferred_tools_once() -> None:
    log = ToolLog(LATER, STUB)
    log.user()
    log.called(query="later")
    loaded(log, "later", "stubbed")
    assert log.read().loaded_tools == {"later", "stubbed"}
    loaded(log, "later")
    log.refused()


@pytest.mark.parametrize(("names", "call_id"), [
    (["do"], "c1"),  # not deferred
    (["nowhere"], "c1"),  # not in the tool set
    (["later", "later"], "c1"),
    (["later"], "c9"),  # no such call
])
def test_tools_loaded_names_deferred_tools_of_a_recorded_call(
    names: list[str], call_id: str
) -> None:
    log = ToolLog(LATER)
    log.user()
    log.called(query="later")
    loaded(log, *names, call_id=call_id)
    log.refused()


def test_a_stub_is_pinned_by_reference_and_must_be_deferred() -> None:
    log = ToolLog(STUB)
    log.user()
    log.respond(log.request())
    log.done()
    assert log.read().tool_spec("stubbed") == STUB
    for broken in ({**STUB, "defer_loading": False}, {k: v for k, v in STUB.items()
                                                      if k != "defer_loading"}):
        with pytest.raises(LogError) as caught:
            ToolLog(broken).read()
        assert (caught.value.code, caught.value.seq) == ("invalid_line", 1)


def test_a_tool_that_is_no_stub_still_needs_its_input_schema() -> None:
    plain = {k: v for k, v in TOOL.items() if k != "input_schema"}
    with pytest.raises(LogError) as caught:
        ToolLog(plain).read()
    assert (caught.value.code, caught.value.seq) == ("invalid_line", 1)


# ---- remote tools ---------------------------------------------------------------------------


@pytest.mark.parametrize("effect_class", ["read_only", "sandbox_local"])
def test_a_remote_tool_always_has_an_effect(effect_class: str) -> None:
    with pytest.raises(LogError) as caught:
        ToolLog({**REMOTE, "effect_class": effect_class}).read()
    assert (caught.value.code, caught.value.seq) == ("invalid_line", 1)


@pytest.mark.parametrize("begun", [True, False])
def test_a_remote_call_result_follows_its_effect(begun: bool) -> None:
    log = ToolLog(REMOTE)
    log.user()
    log.called(name="partner", task="review")
    if begun:
        log.add("effect_begin", {"attempt": 1, "call_id": "c1"})
        log.add("effect_commit", {"call_id": "c1", "result_ref": ARTIFACT})
    log.result()
    if begun:
        assert log.read().calls["c1"].result is not None
    else:
        log.refused()


# ---- answer_rejected shape, unknown types ---------------------------------------------------

EVENT: dict[str, Any] = {
    "actor": HOST, "branch_id": "0192b000-0000-7000-8000-000000000001", "critical": True,
    "epoch": 1, "event_id": "0192e000-0000-7000-8000-00000000000a", "prev_hash": "a" * 64,
    "seq": 10, "thread_id": "0192a000-0000-7000-8000-000000000001", "time": 1,
    "type_version": 1,
}


def test_answer_rejected_has_its_shape() -> None:
    data = {"call_id": "c1", "delivery_event_id": EVENT["event_id"], "reason": "not_an_option"}
    assert validate_event({**EVENT, "type": "answer_rejected", "data": data}, seq=10) is True
    with pytest.raises(LogError) as caught:
        validate_event({**EVENT, "type": "answer_rejected",
                        "data": {**data, "reason": "too_late"}}, seq=10)
    assert (caught.value.code, caught.value.seq) == ("invalid_line", 10)


def test_a_critical_type_neither_schema_knows_is_still_refused() -> None:
    with pytest.raises(LogError) as caught:
        validate_event({**EVENT, "type": "remote_call", "data": {}}, seq=10)
    assert (caught.value.code, caught.value.seq) == ("unsupported_critical_event", 10)
