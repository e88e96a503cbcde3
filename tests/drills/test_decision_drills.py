"""Crash drills for the loop's decisions on resume (issue 30 item 6), each step a real process
(``decisions_worker.py``) SIGKILLed at a named durable boundary, then run again:

- A recorded ``before_model_switch`` deny keyed to the turn's input is honoured: a turn-scoped
  fallback is not reverted (no ``settings_changed{revert}``, now or on any resume), and every
  request of the turn goes to the fallback model.
- Another provider's signed reasoning (``continuation_unsupported``) and content the model
  can't take (``content_unsupported``) are refused before dispatch the first time and on every
  resume: no ``model_request`` is recorded after the turn's input, no model is sent anything,
  and a rerun returns the recorded code (never ``Completed``) and appends nothing.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from drill_harness import Drill, log_events, log_lines

from threads.log.render import prefix_digest, prefix_line
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

WORKER = Path(__file__).with_name("decisions_worker.py")
SMALL = {"name": "scripted-small", "provider": "scripted"}


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


def after_last_input(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    start = max(e["seq"] for e in events if e["type"] == "user_input")
    return [e for e in events if e["seq"] > start]


@pytest.mark.parametrize("second_kill", [None, "model_request", "model_response"])
def test_a_recorded_switch_deny_is_honoured_on_resume(
    service: FakeService, tmp_path: Path, second_kill: str | None
) -> None:
    drill = Drill(tmp_path, service, worker=WORKER)
    first = drill.run(scenario="switch", input="hi")
    assert (first["status"], first["output"]) == ("completed", "from the fallback")
    thread = drill.thread_id()
    # The writer that ran the hook dies right after its deny is durable.
    killed = drill.run(scenario="switch", step="deny", thread=thread, input="and again?",
                       kill={"type": "hook_decision", "nth": 1})
    assert killed["status"] == "killed"
    assert drill.at_kill[-1].last_type == "hook_decision"
    if second_kill is not None:  # our run dies too, once its request (or reply) is durable
        again = drill.run(scenario="switch", thread=thread, input=None,
                          kill={"type": second_kill, "nth": 1})
        assert again["status"] == "killed"
        assert drill.at_kill[-1].last_type == second_kill
    result = drill.run(scenario="switch", thread=thread, input=None)
    assert (result["status"], result["output"]) == ("completed", "from the fallback")
    assert result["sent"][0] == 0  # the primary model was never asked in this turn

    events = log_events(drill.store_dir)
    assert len(of_type(events, "hook_decision")) == 1
    switches = [e["data"]["reason"] for e in of_type(events, "settings_changed")]
    assert switches == ["fallback"]  # the deny held: no revert was ever appended
    [fallback] = of_type(events, "settings_changed")
    assert fallback["data"]["settings"]["model"] == SMALL
    on_fallback = prefix_digest(prefix_line(events[0]["data"], fallback["data"]["settings"]))
    requests = of_type(after_last_input(events), "model_request")
    assert requests, "the turn sent no request"
    assert all(r["data"]["declared_prefix"] == on_fallback for r in requests)
    assert drill.prefix_breaks == 0
    assert drill.rerun_adds_nothing(scenario="switch")


REFUSALS = {
    # scenario: (the code, the kill points of the refusing run: None runs it unkilled)
    "foreign": ("continuation_unsupported", [None, "user_input", "turn_completed"]),
    "content": ("content_unsupported", [None, "turn_completed"]),
}
CASES = [(scenario, kill) for scenario, (_, kills) in REFUSALS.items() for kill in kills]


@pytest.mark.parametrize(("scenario", "kill"), CASES)
def test_a_refusal_before_dispatch_holds_on_resume(
    service: FakeService, tmp_path: Path, scenario: str, kill: str | None
) -> None:
    code = REFUSALS[scenario][0]
    drill = Drill(tmp_path, service, worker=WORKER)
    first = drill.run(scenario=scenario, input="hi")
    assert (first["status"], first["output"]) == ("completed", "hello")
    thread = drill.thread_id()
    assert drill.run(scenario=scenario, step="prepare", thread=thread)["status"] == "recorded"
    # foreign: our run opens the next turn itself; content: the other writer's turn is open
    text = "go on" if scenario == "foreign" else None
    if kill is not None:
        killed = drill.run(scenario=scenario, thread=thread, input=text,
                           kill={"type": kill, "nth": 1})
        assert killed["status"] == "killed"
        assert drill.at_kill[-1].last_type == kill
        text = None  # the input (if any) is durable: the resume carries the turn on
    refused = drill.run(scenario=scenario, thread=thread, input=text)
    assert (refused["status"], refused["error"], refused["sent"]) == ("failed", code, [0])

    events = log_events(drill.store_dir)
    turn = after_last_input(events)
    assert [e["type"] for e in turn] == ["turn_completed"]  # nothing was ever dispatched
    assert turn[0]["data"] == {"code": code, "reason": "error"}
    before = log_lines(drill.store_dir)
    again = drill.run(scenario=scenario, thread=thread, input=None)
    assert (again["status"], again["error"], again["sent"]) == ("failed", code, [0])
    assert log_lines(drill.store_dir) == before  # the recorded ending, read back
    assert drill.prefix_breaks == 0
