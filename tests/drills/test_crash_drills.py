"""Crash drills: a worker process is SIGKILLed at each named durable boundary, for each effect
class, then the thread is run again in a fresh worker (an operator settles anything parked).

Each case asserts: the old log is a byte prefix of the new one, seqs stay contiguous, the service
applied every effect exactly once, an in-doubt unguarded effect parked instead of being re-sent,
and the final transcript equals an uncrashed run's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from drill_harness import Drill, call_keys, duplicates, human_decisions, log_events, transcript

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

INPUTS = ["go", "thanks"]
TOOLS = {"read_only": "look_up", "idempotent": "charge_card", "reconcilable": "refund",
         "unguarded": "send_email"}
ORDER = ["look_up", "charge_card", "refund", "send_email"]
EFFECTFUL = ("idempotent", "reconcilable", "unguarded")
ASSUMED_DONE = "assumed done by an operator; not sent again"


def kill_point(boundary: str, name: str) -> dict[str, Any]:
    if boundary == "after_model_request":
        return {"type": "model_request", "nth": ORDER.index(name) + 1}
    if boundary == "in_execute":
        return {"in_execute": name, "nth": 1}
    if boundary == "after_turn_completed":
        return {"type": "turn_completed", "nth": 1}
    event = boundary.removeprefix("after_")
    return {"type": event, "tool": name, "nth": 1}


MATRIX = [
    *[("after_model_request", c) for c in TOOLS],
    *[("after_effect_begin", c) for c in EFFECTFUL],
    *[("in_execute", c) for c in TOOLS],
    *[("after_effect_commit", c) for c in EFFECTFUL],
    *[("after_tool_result", c) for c in TOOLS],
    ("after_turn_completed", "none"),
]


@pytest.fixture(scope="module")
def baseline(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> list[tuple[str, str]]:
    drill = Drill(tmp_path_factory.mktemp("baseline"), service)
    assert drill.drive(INPUTS, [])["status"] == "completed"
    assert drill.kills == 0
    return transcript(log_events(drill.store_dir))


def applied_once(drill: Drill) -> None:
    events = log_events(drill.store_dir)
    counts = drill.service.client().snapshot()["counts"]
    for key, (_, name) in call_keys(events).items():
        if name != "look_up":
            assert counts.get(key) == 1, f"{name} applied {counts.get(key, 0)} times"


def check_log(drill: Drill) -> list[dict[str, Any]]:
    events = log_events(drill.store_dir)
    assert drill.prefix_breaks == 0, "a rerun rewrote or dropped recorded events"
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    return events


@pytest.mark.parametrize(("boundary", "effect_class"), MATRIX, ids=[f"{b}-{c}" for b, c in MATRIX])
def test_crash_at_boundary(
    boundary: str, effect_class: str, service: FakeService, baseline: list[tuple[str, str]],
    tmp_path: Path,
) -> None:
    name = TOOLS.get(effect_class, "send_email")
    drill = Drill(tmp_path, service)
    assert drill.drive(INPUTS, [kill_point(boundary, name)])["status"] == "completed"
    assert drill.kills == 1
    events = check_log(drill)
    applied_once(drill)
    assert duplicates(drill) == {}
    in_doubt = effect_class == "unguarded" and boundary in ("after_effect_begin", "in_execute")
    keys = call_keys(events)
    parked_tools = [keys[k][1] for k in drill.parked_keys]
    assert parked_tools == (["send_email"] if in_doubt else [])
    expected = list(baseline)
    if in_doubt:
        [(_call_id, outcome)] = human_decisions(events)
        email_key = drill.parked_keys[0]
        assert service.client().snapshot()["requests"][email_key] == 1, "re-sent silently"
        if boundary == "in_execute":
            assert outcome == "assume_done"
            index = expected.index(("tool", "emailed c@example.com"))
            expected[index] = ("tool", ASSUMED_DONE)
        else:
            assert outcome == "assume_not_done"
    assert transcript(events) == expected


def test_assume_not_done_after_applied_effect_sends_again(
    service: FakeService, baseline: list[tuple[str, str]], tmp_path: Path
) -> None:
    """An operator who wrongly says 'not done' accepts a duplicate, and the log records it."""
    drill = Drill(tmp_path, service)
    result = drill.drive(INPUTS, [kill_point("in_execute", "send_email")],
                         decide=lambda key: "assume_not_done")
    assert result["status"] == "completed"
    events = check_log(drill)
    [key] = drill.parked_keys
    call_id = call_keys(events)[key][0]
    assert human_decisions(events) == [(call_id, "assume_not_done")]
    assert service.client().count(key) == 2
    begins = [e["data"]["attempt"] for e in events
              if e["type"] == "effect_begin" and e["data"]["call_id"] == call_id]
    assert begins == [1, 2]
    assert duplicates(drill) == {}
    assert transcript(events) == baseline
