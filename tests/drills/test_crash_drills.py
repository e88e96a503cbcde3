"""Crash drills: a worker process is SIGKILLed at each named durable boundary, for each effect
class, then the thread is run again in a fresh worker (an operator settles anything parked).

Each case first pins where the kill landed: read from the store right after the SIGKILL (before
any rerun), the last durable event is the boundary's own (and inside ``execute`` the service has
already applied the effect, with no ``effect_commit`` yet). Then it asserts: the old log is a
byte prefix of the new one, seqs stay contiguous, the service applied every effect exactly once,
an in-doubt unguarded (or nonfinal reconcilable) effect parked instead of being re-sent, each
tool message matches what the service applied, the final transcript equals an uncrashed run's,
and one more restart after the recovery appends nothing.

"After ``tool_result``" is a real boundary: a tool result is held and written with the next
append, so each case's reply pairs the tool's call with a read-only look-up, whose fence check
makes the result durable on its own; the kill lands there, with that result the last event.
An idempotent call's ``effect_commit`` is held the same way, so "after ``effect_commit``" lands
after the append that carries it with the call's result and the next ``model_request``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    ASSUMED_DONE,
    Drill,
    call_keys,
    duplicates,
    human_decisions,
    log_events,
    tool_message_problems,
    transcript,
)

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

INPUTS = ["go", "thanks"]
TOOLS = {"read_only": "look_up", "idempotent": "charge_card", "reconcilable": "refund",
         "reconcilable_nonfinal": "transfer", "unguarded": "send_email"}
ORDER = ["look_up", "charge_card", "refund", "transfer", "send_email"]  # the every_class script
EFFECTFUL = ("idempotent", "reconcilable", "reconcilable_nonfinal", "unguarded")
RECEIPTS = {"charge_card": "charged 5", "refund": "refunded 2", "transfer": "transferred 3",
            "send_email": "emailed c@example.com"}


def kill_point(boundary: str, name: str) -> dict[str, Any]:
    if boundary == "after_model_request":
        return {"type": "model_request", "nth": ORDER.index(name) + 1}
    if boundary == "in_execute":
        return {"in_execute": name, "nth": 1}
    if boundary == "after_turn_completed":
        return {"type": "turn_completed", "nth": 1}
    if boundary == "after_tool_result":
        return {"type": "tool_result", "tool": name, "nth": 1, "last": True}
    event = boundary.removeprefix("after_")
    return {"type": event, "tool": name, "nth": 1}


def profile(boundary: str, name: str) -> dict[str, Any]:
    if boundary == "after_tool_result":
        return {"profile": "result_last", "tool": name}
    return {"profile": "every_class"}


def last_at_kill(boundary: str, effect_class: str) -> str:
    """The type of the last durable event when the worker dies at ``boundary``."""
    if boundary == "in_execute":
        # a read-only call has no effect_begin: its reply's batch (ending with the call's
        # permission decision) is the last thing written before it runs
        return "permission_decision" if effect_class == "read_only" else "effect_begin"
    if boundary == "after_effect_commit" and effect_class == "idempotent":
        # an idempotent call's commit is held: written with its result and the next request
        return "model_request"
    return boundary.removeprefix("after_")


MATRIX = [
    *[("after_model_request", c) for c in TOOLS],
    *[("after_effect_begin", c) for c in EFFECTFUL],
    *[("in_execute", c) for c in TOOLS],
    *[("after_effect_commit", c) for c in EFFECTFUL],
    *[("after_tool_result", c) for c in TOOLS],
    ("after_turn_completed", "none"),
]


def in_doubt_park(boundary: str, effect_class: str) -> bool:
    """Cases whose rerun can't prove what happened and parks for the operator."""
    if effect_class == "unguarded":
        return boundary in ("after_effect_begin", "in_execute")
    # a nonfinal lookup that finds nothing proves nothing (in_execute: it finds the receipt)
    return effect_class == "reconcilable_nonfinal" and boundary == "after_effect_begin"


@pytest.fixture(scope="module")
def baselines(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, list[tuple[str, str]]]:
    """Uncrashed transcripts, per script (``every_class``, and ``result_last`` per tool)."""
    out: dict[str, list[tuple[str, str]]] = {}
    for key, fields in [("every_class", {"profile": "every_class"}),
                        *[(f"result_last:{n}", {"profile": "result_last", "tool": n})
                          for n in ORDER]]:
        drill = Drill(tmp_path_factory.mktemp("baseline"), service)
        assert drill.drive(INPUTS, [], **fields)["status"] == "completed"
        assert drill.kills == 0
        out[key] = transcript(log_events(drill.store_dir))
    return out


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


def check_stop_point(drill: Drill, boundary: str, effect_class: str, name: str) -> None:
    """Where the kill landed, as the store and the service saw it right after the SIGKILL."""
    [state] = drill.at_kill
    assert state.last_type == last_at_kill(boundary, effect_class), state.last
    assert state.last is not None
    events = log_events(drill.store_dir)
    keys = call_keys(events)
    if boundary in ("after_effect_begin", "in_execute", "after_effect_commit", "after_tool_result"):
        marker = state.last if "call_id" in state.last["data"] else next(
            e for e in reversed(events) if e["type"] == "effect_commit"
        )
        call_id = marker["data"]["call_id"]
        key = next(k for k, (c, _) in keys.items() if c == call_id)
        assert keys[key][1] == name, (keys[key], name)
        applied = state.counts.get(key, 0)
        if name != "look_up":
            # nothing is sent before effect_begin is durable; once execute returns it has been
            assert applied == (0 if boundary == "after_effect_begin" else 1), applied
        if boundary == "after_tool_result":
            assert state.last["data"]["origin"] == "executed"
            assert state.last["data"]["preview"] == RECEIPTS.get(name, "account a1 is open")


@pytest.mark.parametrize(("boundary", "effect_class"), MATRIX, ids=[f"{b}-{c}" for b, c in MATRIX])
def test_crash_at_boundary(
    boundary: str, effect_class: str, service: FakeService,
    baselines: dict[str, list[tuple[str, str]]], tmp_path: Path,
) -> None:
    name = TOOLS.get(effect_class, "send_email")
    drill = Drill(tmp_path, service)
    fields = profile(boundary, name)
    kill = kill_point(boundary, name)
    assert drill.run(input=INPUTS[0], kill=kill, **fields)["status"] == "killed"
    check_stop_point(drill, boundary, effect_class, name)
    assert drill.drive(INPUTS[:1], [], **fields)["status"] == "completed"  # the recovery
    assert drill.rerun_adds_nothing(**fields), "a restart after the recovery appended events"
    assert drill.drive(INPUTS, [], **fields)["status"] == "completed"
    assert drill.kills == 1
    events = check_log(drill)
    applied_once(drill)
    assert duplicates(drill) == {}
    assert tool_message_problems(events, service.client().snapshot()) == []
    in_doubt = in_doubt_park(boundary, effect_class)
    keys = call_keys(events)
    parked_tools = [keys[k][1] for k in drill.parked_keys]
    assert parked_tools == ([name] if in_doubt else [])
    expected = list(baselines[f"result_last:{name}" if "tool" in fields else "every_class"])
    if in_doubt:
        [(_call_id, outcome)] = human_decisions(events)
        parked_key = drill.parked_keys[0]
        assert service.client().snapshot()["requests"][parked_key] == 1, "re-sent silently"
        if boundary == "in_execute":
            assert outcome == "assume_done"
            index = expected.index(("tool", RECEIPTS[name]))
            expected[index] = ("tool", ASSUMED_DONE)
        else:
            assert outcome == "assume_not_done"
    assert transcript(events) == expected


def test_assume_not_done_after_applied_effect_sends_again(
    service: FakeService, baselines: dict[str, list[tuple[str, str]]], tmp_path: Path
) -> None:
    """An operator who wrongly says 'not done' accepts a duplicate, and the log records it."""
    drill = Drill(tmp_path, service)
    result = drill.drive(INPUTS, [kill_point("in_execute", "send_email")],
                         decide=lambda key: "assume_not_done", profile="every_class")
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
    assert tool_message_problems(events, service.client().snapshot()) == []
    assert transcript(events) == baselines["every_class"]
