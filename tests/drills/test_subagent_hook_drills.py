"""Crash drills for the ``subagent_start`` and ``subagent_stop`` hooks: a worker runs the
``subagent_hooks`` profile (the parent allows the spawn; its stop hook sends the clerk back once
to email d too) and is SIGKILLed at each boundary of the hooks' path; the parent is then run
again in fresh workers until it completes (an operator settles what the child parked).

Each case pins where the kill landed, then asserts: one child thread; each hook was asked once
per decision the log holds (start once, stop twice: a recorded decision is read back, never
asked again); the child got the continue reason exactly once, as its second input; the fake
service applied each of the child's effects exactly once (charge, email c, email d); both
transcripts equal an uncrashed run's; each branch's log only grew; one more run appends
nothing.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    ASSUMED_DONE,
    LEASE_PAST_MS,
    Drill,
    branch_lines,
    transcript,
    write_atomic,
)
from test_subagent_drills import (
    _branches,
    _lines,
    _tree,
    finish,
    of_type,
    run_gated,
    run_worker,
    threads_in,
    verified,
)
from worker import CONTINUE_REASON

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

KILLS: dict[str, dict[str, Any]] = {
    # the append holding the start decision and agent_spawned
    "after_start_decision": {"type": "hook_decision", "nth": 1},
    # the stop round that sends the child back, appended alone
    "after_stop_continue": {"type": "hook_decision", "nth": 2},
    # the child's second input (the reason), in the branch this process created second
    "after_continue_input": {"type": "user_input", "nth": 1, "in_created": 2},
    # the continued child's email applied, not recorded (unguarded: parked for an operator)
    "mid_continued_child": {"in_execute": "send_email", "nth": 2},
    # the last stop round, appended with agent_finished
    "after_stop_decision": {"type": "hook_decision", "nth": 3},
}
# (the parent's last event, the child's last event or None) at the kill
AT_KILL: dict[str, tuple[str, str | None]] = {
    "after_start_decision": ("agent_spawned", None),
    "after_stop_continue": ("hook_decision", "turn_completed"),
    "after_continue_input": ("hook_decision", "user_input"),
    "mid_continued_child": ("hook_decision", "effect_begin"),
    "after_stop_decision": ("tool_result", "turn_completed"),
}
PROFILE = {"profile": "subagent_hooks"}


def asked(hook_log: Path) -> list[str]:
    return [line.split()[0] for line in hook_log.read_text().splitlines()]


@pytest.fixture(scope="module")
def baseline(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    root = tmp_path_factory.mktemp("hooks_baseline")
    drill = Drill(root, service)
    hook_log = root / "hooks.log"
    assert drill.run(input="go", hook_log=str(hook_log), **PROFILE)["status"] == "completed"
    assert asked(hook_log) == ["start", "stop", "stop"]
    parent, child = threads_in(drill.store_dir)
    return transcript(parent), transcript(child)


@pytest.mark.parametrize("boundary", list(KILLS))
def test_crash_in_the_hooks_path_asks_each_hook_once_and_repeats_nothing(
    boundary: str, service: FakeService,
    baseline: tuple[list[tuple[str, str]], list[tuple[str, str]]], tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    hook_log = tmp_path / "hooks.log"
    fields = {"hook_log": str(hook_log), **PROFILE}
    assert drill.run(input="go", kill=KILLS[boundary], **fields)["status"] == "killed"
    parent, child = threads_in(drill.store_dir)
    parent_last, child_last = AT_KILL[boundary]
    assert parent[-1]["type"] == parent_last, parent[-1]
    assert (child[-1]["type"] if child else None) == child_last
    lines_at_kill = branch_lines(drill.store_dir)

    drill.spec = _with(drill.spec, fields)  # every rerun runs the same profile and hooks
    settled = finish(drill)
    assert settled == (1 if boundary == "mid_continued_child" else 0)
    parent, child = threads_in(drill.store_dir)
    assert asked(hook_log) == ["start", "stop", "stop"]
    decided = [(e["data"]["hook"], e["data"]["decision"]) for e in of_type(parent, "hook_decision")]
    assert decided == [("subagent_start", "allow"), ("subagent_stop", "continue"),
                       ("subagent_stop", "stop")]
    inputs = [(e["data"]["source"], e["data"]["text"]) for e in of_type(child, "user_input")]
    assert inputs == [("parent_agent", "charge a1 and email c"),
                      ("parent_agent", CONTINUE_REASON)]
    [spawned] = of_type(parent, "agent_spawned")
    [finished] = of_type(parent, "agent_finished")
    assert finished["data"]["status"] == "completed"
    assert child[0]["data"]["parent"]["event_id"] == spawned["event_id"]
    lines = branch_lines(drill.store_dir)
    for branch_id, kept in lines_at_kill.items():
        assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    snapshot = service.client().snapshot()
    effects = {k: n for k, n in snapshot["counts"].items()
               if k.startswith(f"{child[0]['branch_id']}:")}
    assert sorted(effects.values()) == [1, 1, 1], effects  # charge, email c, email d: once
    expected_parent, expected_child = baseline
    if boundary == "mid_continued_child":
        expected_child = [("tool", ASSUMED_DONE) if m == ("tool", "emailed d@example.com")
                          else m for m in expected_child]
    assert transcript(child) == expected_child
    assert transcript(parent) == expected_parent
    verified(drill.spec(), parent[0]["thread_id"])
    verified(drill.spec(), child[0]["thread_id"])
    assert drill.rerun_adds_nothing(**fields), "a restart after the recovery appended events"
    assert asked(hook_log) == ["start", "stop", "stop"]


def _with(spec: Any, fields: dict[str, Any]) -> Any:
    def merged(**more: Any) -> dict[str, Any]:
        return dict(spec(**{**more, **fields}))

    return merged


# In the background: the clerk's look-up waits at a gate opened once the parent's turn is
# over, so each end of the clerk is recorded at a step boundary with no turn open.
BG_KILLS: dict[str, dict[str, Any]] = {
    "bg_after_stop_continue": {"type": "hook_decision", "nth": 2},
    "bg_after_continue_input": {"type": "user_input", "nth": 1, "in_created": 2},
    "bg_after_stop_decision": {"type": "hook_decision", "nth": 3},
}
BG_AT_KILL: dict[str, tuple[str, str]] = {
    "bg_after_stop_continue": ("hook_decision", "turn_completed"),
    "bg_after_continue_input": ("hook_decision", "user_input"),
    "bg_after_stop_decision": ("woken", "turn_completed"),  # decision, end, late, woken: one
}
BG_PROFILE = {"profile": "subagent_bg_hooks"}


@pytest.fixture(scope="module")
def bg_baseline(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    root = tmp_path_factory.mktemp("bg_hooks_baseline")
    drill = Drill(root, service)
    hook_log = root / "hooks.log"
    result = run_gated(drill, input="go", hook_log=str(hook_log), **BG_PROFILE)
    assert result["status"] == "completed"
    assert asked(hook_log) == ["start", "stop", "stop"]
    parent, child = threads_in(drill.store_dir)
    return transcript(parent), transcript(child)


@pytest.mark.parametrize("boundary", list(BG_KILLS))
def test_crash_with_a_background_child_sent_back_gives_the_reason_once(
    boundary: str, service: FakeService,
    bg_baseline: tuple[list[tuple[str, str]], list[tuple[str, str]]], tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    hook_log = tmp_path / "hooks.log"
    fields = {"hook_log": str(hook_log), **BG_PROFILE}
    assert run_gated(drill, input="go", kill=BG_KILLS[boundary], **fields)["status"] == "killed"
    parent, child = threads_in(drill.store_dir)
    assert (parent[-1]["type"], child[-1]["type"]) == BG_AT_KILL[boundary]
    lines_at_kill = branch_lines(drill.store_dir)
    for _ in range(6):
        result = run_gated(drill, thread=parent[0]["thread_id"], input=None, **fields)
        if result["status"] == "completed":
            break
        assert result["status"] != "killed", result
    else:
        raise AssertionError("the parent did not complete")
    assert result["output"] == "the clerk is done"
    parent, child = threads_in(drill.store_dir)
    assert asked(hook_log) == ["start", "stop", "stop"]
    inputs = [e["data"]["text"] for e in of_type(child, "user_input")]
    assert inputs == ["charge a1 and email c", CONTINUE_REASON]
    [late] = of_type(parent, "tool_result_late")
    [woken] = of_type(parent, "woken")
    assert woken["data"]["causes"] == [late["event_id"]]
    lines = branch_lines(drill.store_dir)
    for branch_id, kept in lines_at_kill.items():
        assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    snapshot = service.client().snapshot()
    effects = {k: n for k, n in snapshot["counts"].items()
               if k.startswith(f"{child[0]['branch_id']}:")}
    assert sorted(effects.values()) == [1, 1, 1], effects
    assert (transcript(parent), transcript(child)) == bg_baseline
    verified(drill.spec(), parent[0]["thread_id"])
    verified(drill.spec(), child[0]["thread_id"])
    before = branch_lines(drill.store_dir)
    assert run_gated(drill, thread=parent[0]["thread_id"], input=None, **fields)[
        "status"] == "completed"
    assert branch_lines(drill.store_dir) == before, "a restart after the recovery appended"


@needs_postgres
def test_on_postgres_a_continue_recorded_before_a_crash_reaches_the_child_once(
    service: FakeService, tmp_path: Path
) -> None:
    """Postgres: killed right after the ``continue`` was recorded; the next worker gives the
    child the reason once, and the hooks are asked once per recorded decision."""
    schema = fresh_schema()
    clock_file = tmp_path / "clock_offset_ms"
    write_atomic(clock_file, "0")
    hook_log = tmp_path / "hooks.log"
    base = {"url": URL, "schema": schema, "port": service.port, "clock_file": str(clock_file),
            "hook_log": str(hook_log), **PROFILE}
    try:
        first = run_worker("run", {**base, "input": "go", "label": "p1",
                                   "kill": KILLS["after_stop_continue"]})
        assert first == {"status": "killed"}
        write_atomic(clock_file, str(LEASE_PAST_MS))
        parent_id, child_id = asyncio.run(_tree(base))
        done = run_worker("run", {**base, "thread": parent_id, "input": None, "label": "p2"})
        assert done["status"] == "completed", done
        assert asked(hook_log) == ["start", "stop", "stop"]
        child = asyncio.run(_lines(base, child_id))
        assert [e["data"]["text"] for e in child if e["type"] == "user_input"] == [
            "charge a1 and email c", CONTINUE_REASON
        ]
        branches = asyncio.run(_branches(base, child_id))
        counts = [n for k, n in service.client().snapshot()["counts"].items()
                  if k.split(":")[0] in branches]
        assert sorted(counts) == [1, 1, 1]
    finally:
        asyncio.run(drop_schema(schema))
