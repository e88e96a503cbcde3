"""Handoff crash drills (issue 34 item 4): a worker running ``triage`` (which hands off to
``drill`` mid-reply) is SIGKILLed at each boundary of a handoff: right after the ``handoff``
append (before the target's header), right after the target's branch is created (before its
first request), after the target's first ``model_request``, inside the target's effect (the
service applied the charge, nothing recorded yet) and after the target's turn ended. Then the
SOURCE thread is run again in a fresh process.

Each case pins where the kill landed, then asserts: one target thread, never two; the target's
first turn ran once (one input, one ``turn_completed``, the charge applied once at the service,
the email asked for after the handoff call never sent); each old log is a byte prefix of its new
one; both conversations equal an uncrashed run's; one more run appends nothing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from drill_harness import SUMMARY, Drill, branch_lines, log_events

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

WORKER = Path(__file__).with_name("handoff_worker.py")
MINTED = re.compile(r"call_[0-9a-f]{12}")
KILLS: dict[str, tuple[dict[str, Any], str]] = {  # kill point, the last durable event then
    "after_handoff": ({"type": "handoff", "nth": 1}, "turn_completed"),
    "after_target_header": ({"created_target": True}, "user_input"),
    "after_target_request": ({"type": "model_request", "nth": 3}, "model_request"),
    "in_target_effect": ({"in_execute": "charge_card", "nth": 1}, "effect_begin"),
    "after_target_turn": ({"type": "turn_completed", "nth": 2}, "turn_completed"),
}


def threads_of(drill: Drill) -> dict[str, list[dict[str, Any]]]:
    """Each thread's events, keyed by its agent's name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for lines in branch_lines(drill.store_dir).values():
        events = [json.loads(line) for line in lines]
        out.setdefault(events[0]["data"]["agent_name"], []).extend(events)
    return out


def conversation(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    keep = ("user_input", "injected", "model_response", "tool_call", "tool_result", "handoff",
            "turn_completed")
    out: list[tuple[str, str]] = []
    for e in events:
        if e["type"] not in keep:
            continue
        # ids are chosen anew by each run (event and thread ids, the target's minted call ids)
        data = {k: v for k, v in e["data"].items()
                if k not in ("request_event_id", "to_thread_id", "usage")}
        if e["type"] == "injected":
            data["origin"] = "the source thread"
        out.append((e["type"], MINTED.sub("call_minted", json.dumps(data, sort_keys=True))))
    return out


def baseline(root: Path, service: FakeService) -> dict[str, list[tuple[str, str]]]:
    drill = Drill(root, service, worker=WORKER)
    result = drill.run(input="I need a charge")
    assert (result["status"], result["target"]) == ("handed_off", "completed"), result
    return {name: conversation(events) for name, events in threads_of(drill).items()}


@pytest.mark.parametrize("boundary", list(KILLS))
def test_a_killed_handoff_makes_one_target_whose_first_turn_runs_once(
    tmp_path: Path, service: FakeService, boundary: str
) -> None:
    expected = baseline(tmp_path / "baseline", service)
    kill, last_type = KILLS[boundary]
    drill = Drill(tmp_path / "drill", service, worker=WORKER)
    first = drill.run(input="I need a charge", kill=kill)
    assert first["status"] == "killed"
    assert drill.at_kill[0].last is not None
    assert drill.at_kill[0].last["type"] == last_type  # the kill landed at its boundary

    source_id = next(e["thread_id"] for e in log_events(drill.store_dir)
                     if e["type"] == "thread_started" and "parent" not in e["data"])
    again = drill.run(thread=source_id, input=None)
    assert (again["status"], again["target"]) == ("handed_off", "completed"), again

    threads = threads_of(drill)
    assert sorted(threads) == ["drill", "triage"]  # one target, never two
    assert len(branch_lines(drill.store_dir)) == 2
    target = threads["drill"]
    assert target[0]["thread_id"] == again["to_thread"]
    assert sum(e["type"] == "user_input" for e in target) == 1
    assert [e["data"]["reason"] for e in target if e["type"] == "turn_completed"] == ["end_turn"]
    counts = service.client().snapshot()["counts"]
    charge_key = f"{target[0]['branch_id']}:" + next(
        e["data"]["call_id"] for e in target if e["type"] == "tool_call"
    )
    assert counts.get(charge_key) == 1  # the target's effect applied once
    email_key = f"{threads['triage'][0]['branch_id']}:c3"
    assert email_key not in counts  # the call after the handoff never ran
    assert drill.prefix_breaks == 0
    assert {name: conversation(events) for name, events in threads.items()} == expected

    before = branch_lines(drill.store_dir)
    once_more = drill.run(thread=source_id, input=None)
    assert once_more["status"] == "handed_off"
    assert branch_lines(drill.store_dir) == before
    SUMMARY.append(f"handoff drill {boundary}: {drill.runs} runs, {drill.kills} kill,"
                   " 1 target, charge applied 1x")
