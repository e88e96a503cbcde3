"""Subagent crash drills: a worker running a parent that spawns a clerk (which looks up, charges
(idempotent) and emails (unguarded) in its own thread) is SIGKILLed at each boundary of the
spawn path, then the parent is run again in fresh workers until it completes (an operator
settles what the child parked, on the child's thread).

Each case first pins where the kill landed (read from the store right after the SIGKILL), then
asserts: exactly one child thread, naming the parent's one ``agent_spawned`` as its parent; the
service applied each of the child's effects exactly once; each tool message of the child is
the service's receipt; both transcripts equal an uncrashed run's; both threads' exports verify
and their logs fold (rule 22: one ``agent_finished`` per spawn); each branch's log at the kill
is a prefix of its final log; and one more run appends nothing.

On Postgres the child is also run by another worker process: while that process holds the
child's lease, the parent's run halts ``branch_busy`` and writes nothing; once it finished the
child, the parent records the child's end and completes.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    ASSUMED_DONE,
    KILLED,
    LEASE_PAST_MS,
    STARTER,
    SUMMARY,
    WORKER,
    Drill,
    branch_lines,
    tool_message_problems,
    transcript,
    write_atomic,
)
from worker import open_store

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres
from threads import open_thread
from threads.log.verify import verify_export
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

PROFILE = {"profile": "subagent"}
KILLS: dict[str, dict[str, Any]] = {
    "after_spawn_call": {"type": "tool_call", "tool": "spawn_agent", "nth": 1},
    "after_agent_spawned": {"type": "agent_spawned", "nth": 1},
    "after_child_header": {"created": 2},
    "mid_child_idempotent": {"in_execute": "charge_card", "nth": 1},
    "mid_child_unguarded": {"in_execute": "send_email", "nth": 1},
    "after_child_finished": {"type": "turn_completed", "nth": 1},
    "after_agent_finished": {"type": "agent_finished", "nth": 1},
}
# (the parent's last event, the child's last event or None: no child thread yet) at the kill
AT_KILL: dict[str, tuple[str, str | None]] = {
    "after_spawn_call": ("permission_decision", None),
    "after_agent_spawned": ("agent_spawned", None),
    "after_child_header": ("agent_spawned", "user_input"),
    "mid_child_idempotent": ("agent_spawned", "effect_begin"),
    "mid_child_unguarded": ("agent_spawned", "effect_begin"),
    "after_child_finished": ("agent_spawned", "turn_completed"),
    "after_agent_finished": ("tool_result", "turn_completed"),
}
RECORDED: list[str] = []


def threads_in(store_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the parent's events, the child's events or []) as stored; asserts at most one child."""
    return tree_of(branch_lines(store_dir))


def tree_of(
    stored: dict[str, list[bytes]],
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(the parent's events, the child's events or []) of a store's lines by branch
    (``branch_lines``); asserts at most one child."""
    by_thread = [[json.loads(line) for line in lines] for lines in stored.values()]
    parents = [t for t in by_thread if "parent" not in t[0]["data"]]
    children = [t for t in by_thread if "parent" in t[0]["data"]]
    assert len(parents) == 1, f"{len(parents)} parent threads"
    assert len(children) <= 1, f"{len(children)} child threads: a child was started twice"
    return parents[0], children[0] if children else []


def of_type(events: list[dict[str, Any]], type_: str) -> list[dict[str, Any]]:
    return [e for e in events if e["type"] == type_]


async def _act_on(spec: dict[str, Any], thread_id: str, action: Any) -> Any:
    store = open_store(spec)
    try:
        return await action(await open_thread(store, thread_id, principal=STARTER))
    finally:
        await store.close()


def settle_child(drill: Drill, spec: dict[str, Any], child_id: str) -> int:
    """The operator settles the child's parked effects on the child's thread, after checking
    the service; returns how many."""

    async def settle(thread: Any) -> int:
        parked = await thread.parked_effects()
        for effect in parked:
            decision = drill.operator_decision(effect.effect_key)
            await thread.resolve_parked(effect.effect_key, decision, STARTER)
        return len(parked)

    return int(asyncio.run(_act_on(spec, child_id, settle)))


def finish(drill: Drill) -> int:
    """Run the parent with no input until it completes; returns the child parks settled."""
    settled = 0
    for _ in range(8):
        parent, _child = threads_in(drill.store_dir)
        result = drill.run(thread=parent[0]["thread_id"], input=None, **PROFILE)
        if result["status"] == "completed":
            return settled
        assert result["status"] == "parked", result
        for kind, child_id in result["pending"]:
            assert kind == "child", result
            settled += settle_child(drill, drill.spec(), child_id)
    raise AssertionError("the parent did not complete")


def verified(spec: dict[str, Any], thread_id: str) -> None:
    """The thread's export verifies (chain, head) and its log folds (the reader's rules)."""

    async def check(thread: Any) -> None:
        verify_export(await thread.export())
        await thread.state()

    asyncio.run(_act_on(spec, thread_id, check))


@pytest.fixture(scope="module")
def baseline(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    drill = Drill(tmp_path_factory.mktemp("baseline"), service)
    assert drill.run(input="go", **PROFILE)["status"] == "completed"
    parent, child = threads_in(drill.store_dir)
    return transcript(parent), transcript(child)


@pytest.mark.parametrize("boundary", list(KILLS))
def test_crash_in_the_spawn_path_resumes_the_same_child(
    boundary: str, service: FakeService,
    baseline: tuple[list[tuple[str, str]], list[tuple[str, str]]], tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    assert drill.run(input="go", kill=KILLS[boundary], **PROFILE)["status"] == "killed"
    parent, child = threads_in(drill.store_dir)
    parent_last, child_last = AT_KILL[boundary]
    assert parent[-1]["type"] == parent_last, parent[-1]
    assert (child[-1]["type"] if child else None) == child_last
    lines_at_kill = branch_lines(drill.store_dir)
    counts_at_kill = dict(drill.at_kill[0].counts)
    if boundary.startswith("mid_child"):
        # the service applied it; the child's log has no commit for it
        mine = [n for k, n in counts_at_kill.items() if k.startswith(child[0]["branch_id"])]
        assert sum(mine) == (1 if boundary.endswith("idempotent") else 2)

    settled = finish(drill)
    assert settled == (1 if boundary == "mid_child_unguarded" else 0)
    parent, child = threads_in(drill.store_dir)
    [spawned] = of_type(parent, "agent_spawned")
    [finished] = of_type(parent, "agent_finished")
    assert finished["data"]["status"] == "completed"
    assert child[0]["data"]["parent"]["event_id"] == spawned["event_id"]
    assert child[0]["thread_id"] == spawned["data"]["child_thread_id"]
    lines = branch_lines(drill.store_dir)
    for branch_id, kept in lines_at_kill.items():  # each branch's log only grew
        assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    for events in (parent, child):
        assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    snapshot = service.client().snapshot()
    branch = child[0]["branch_id"]
    effects = {k: n for k, n in snapshot["counts"].items() if k.startswith(f"{branch}:")}
    assert sorted(effects.values()) == [1, 1], effects  # charged once, emailed once
    assert tool_message_problems(child, snapshot) == []
    expected_parent, expected_child = baseline
    if boundary == "mid_child_unguarded":
        expected_child = [("tool", ASSUMED_DONE) if m == ("tool", "emailed c@example.com")
                          else m for m in expected_child]
        expected_parent = list(expected_parent)
    assert transcript(child) == expected_child
    assert transcript(parent) == expected_parent
    verified(drill.spec(), parent[0]["thread_id"])
    verified(drill.spec(), child[0]["thread_id"])
    assert drill.rerun_adds_nothing(**PROFILE), "a restart after the recovery appended events"
    RECORDED.append(f"{boundary}: {drill.runs} runs, {drill.kills} kill, 1 child, effects x1")


@needs_postgres
def test_on_postgres_a_child_run_by_another_worker_halts_the_parent_busy(
    service: FakeService, tmp_path: Path
) -> None:
    """Postgres: the parent's worker dies mid-child (the charge applied, not committed);
    another worker takes the child over and holds it (stopped at a service gate after the
    email's effect_begin); a parent run meanwhile halts ``branch_busy`` and writes nothing;
    once the other worker finished the child, the parent records its end and completes."""
    schema = fresh_schema()
    clock_file = tmp_path / "clock_offset_ms"
    write_atomic(clock_file, "0")
    base = {"url": URL, "schema": schema, "port": service.port, "clock_file": str(clock_file),
            **PROFILE}
    try:
        first = run_worker("run", {**base, "input": "go", "label": "p1",
                                   "kill": KILLS["mid_child_idempotent"]})
        assert first == {"status": "killed"}
        write_atomic(clock_file, str(LEASE_PAST_MS))  # the dead holder's leases are over
        parent_id, child_id = asyncio.run(_tree(base))
        holder = subprocess.Popen(
            [sys.executable, str(WORKER), "child", json.dumps({
                **base, "thread": child_id, "label": "w2",
                "kill": {"type": "effect_begin", "tool": "send_email", "nth": 1,
                         "hold_at_gate": "child-held", "port": service.port}})],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        )
        try:
            service.client().await_waiting("child-held")
            before = asyncio.run(_lines(base, parent_id))
            busy = run_worker("run", {**base, "thread": parent_id, "input": None, "label": "p2"})
            assert busy["status"] == "failed"
            assert busy["error"] == "branch_busy"
            assert asyncio.run(_lines(base, parent_id)) == before  # nothing written
        finally:
            service.client().open_gate("child-held")
            out, err = holder.communicate(timeout=60)
        assert holder.returncode == 0, err.decode()
        assert json.loads(out.decode().splitlines()[-1])["status"] == "completed"
        done = run_worker("run", {**base, "thread": parent_id, "input": None, "label": "p3"})
        assert done["status"] == "completed"
        assert done["output"] == "all done"
        events = asyncio.run(_lines(base, parent_id))
        [finished] = [e for e in events if e["type"] == "agent_finished"]
        assert finished["data"]["child_thread_id"] == child_id
        assert finished["data"]["status"] == "completed"
        counts = service.client().snapshot()["counts"]
        child_counts = [n for k, n in counts.items() if k.split(":")[0] in asyncio.run(
            _branches(base, child_id))]
        assert sorted(child_counts) == [1, 1]
    finally:
        asyncio.run(drop_schema(schema))


def run_worker(mode: str, spec: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, str(WORKER), mode, json.dumps(spec)],
                          capture_output=True, timeout=60, check=False)
    if proc.returncode == KILLED:
        return {"status": "killed"}
    assert proc.returncode == 0, proc.stderr.decode()
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))


async def _tree(spec: dict[str, Any]) -> tuple[str, str]:
    """(the parent's id, its one child's id) on the Postgres store."""
    store = open_store(spec)
    try:
        threads = await store.list_threads(STARTER.tenant)
        ids = [t.thread_id for t in threads]
        for thread_id in ids:
            kids = await (await open_thread(store, thread_id, principal=STARTER)).children()
            if kids:
                [kid] = kids
                return thread_id, kid.thread_id
        raise AssertionError(f"no parent among {ids}")
    finally:
        await store.close()


async def _lines(spec: dict[str, Any], thread_id: str) -> list[dict[str, Any]]:
    store = open_store(spec)
    try:
        thread = await open_thread(store, thread_id, principal=STARTER)
        return [json.loads(e.line) for e in await thread.timeline()]
    finally:
        await store.close()


async def _branches(spec: dict[str, Any], thread_id: str) -> list[str]:
    store = open_store(spec)
    try:
        return [b.branch_id for b in await store.list_branches(thread_id)]
    finally:
        await store.close()




# Background: the clerk's look-up waits at a gate the test opens once the parent's turn is
# over, so its end always wakes the parent (never arrives as input during the first turn).
BG_KILLS: dict[str, dict[str, Any]] = {
    "bg_after_spawn": {"type": "agent_spawned", "nth": 1},
    "bg_mid_child": {"in_execute": "charge_card", "nth": 1},
    "bg_after_child_finished": {"type": "turn_completed", "nth": 1, "in_created": 2},
    "bg_during_wake": {"type": "woken", "nth": 1},
    "bg_in_woken_turn": {"type": "model_request", "nth": 3, "in_created": 1},
}
BG = {"profile": "subagent_bg"}
DEADLINE_S = 60.0


def parent_idle(store_dir: Path) -> bool:
    """The parent's log has a closed turn and none open."""
    if not branch_lines(store_dir):
        return False
    parent, _child = threads_in(store_dir)
    opened = len(of_type(parent, "user_input")) + len(of_type(parent, "woken"))
    closed = len(of_type(parent, "turn_completed"))
    return closed >= 1 and closed >= opened


def run_gated(drill: Drill, **fields: Any) -> dict[str, Any]:
    """One worker run whose clerk waits at a fresh gate until the parent's turn is over."""
    gate = f"{drill.root.name}-{drill.runs}"
    proc = drill.spawn(child_gate=gate, **{**BG, **fields})  # fields may name another profile
    opened = False
    started = time.monotonic()
    while proc.poll() is None:
        if not opened and parent_idle(drill.store_dir):
            drill.service.client().open_gate(gate)
            opened = True
        assert time.monotonic() - started < DEADLINE_S, "the worker did not finish"
        time.sleep(0.05)  # watching another process's log; no lease is waited on
    out, err = proc.communicate()
    if proc.returncode == KILLED:
        drill.kills += 1
        drill.at_kill.append(drill.kill_state())
        drill.advance(LEASE_PAST_MS)
        return {"status": "killed"}
    assert proc.returncode == 0, err.decode()
    return dict(json.loads(out.decode().strip().splitlines()[-1]))


@pytest.fixture(scope="module")
def bg_baseline(
    service: FakeService, tmp_path_factory: pytest.TempPathFactory
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    drill = Drill(tmp_path_factory.mktemp("bg-baseline"), service)
    result = run_gated(drill, input="go")
    assert result["status"] == "completed"
    assert result["output"] == "the clerk is done"
    parent, child = threads_in(drill.store_dir)
    assert len(of_type(parent, "woken")) == 1
    return transcript(parent), transcript(child)


@pytest.mark.parametrize("boundary", list(BG_KILLS))
def test_crash_with_a_background_child_resumes_it_and_wakes_once(
    boundary: str, service: FakeService,
    bg_baseline: tuple[list[tuple[str, str]], list[tuple[str, str]]], tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    assert run_gated(drill, input="go", kill=BG_KILLS[boundary])["status"] == "killed"
    lines_at_kill = branch_lines(drill.store_dir)
    parent, child = threads_in(drill.store_dir)
    if boundary == "bg_during_wake":
        assert parent[-1]["type"] == "woken"
    for _ in range(6):
        result = run_gated(drill, thread=parent[0]["thread_id"], input=None)
        if result["status"] == "completed":
            break
        assert result["status"] != "killed", result
    else:
        raise AssertionError("the parent did not complete")
    assert result["output"] == "the clerk is done"
    parent, child = threads_in(drill.store_dir)
    [spawned] = of_type(parent, "agent_spawned")
    [finished] = of_type(parent, "agent_finished")
    [late] = of_type(parent, "tool_result_late")
    [woken] = of_type(parent, "woken")
    assert woken["data"]["causes"] == [late["event_id"]]
    assert finished["data"]["status"] == "completed"
    assert child[0]["data"]["parent"]["event_id"] == spawned["event_id"]
    lines = branch_lines(drill.store_dir)
    for branch_id, kept in lines_at_kill.items():
        assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    snapshot = service.client().snapshot()
    branch = child[0]["branch_id"]
    effects = {k: n for k, n in snapshot["counts"].items() if k.startswith(f"{branch}:")}
    assert sorted(effects.values()) == [1, 1], effects
    assert tool_message_problems(child, snapshot) == []
    expected_parent, expected_child = bg_baseline
    assert transcript(child) == expected_child
    assert transcript(parent) == expected_parent
    verified(drill.spec(), parent[0]["thread_id"])
    verified(drill.spec(), child[0]["thread_id"])
    before = branch_lines(drill.store_dir)
    again = run_gated(drill, thread=parent[0]["thread_id"], input=None)
    assert again["status"] == "completed"
    assert branch_lines(drill.store_dir) == before, "a restart after the recovery appended"
    RECORDED.append(f"{boundary}: {drill.runs} runs, 1 kill, 1 child, 1 woken, effects x1")
    if len(RECORDED) == len(KILLS) + len(BG_KILLS):
        SUMMARY.append("subagent drills: " + "; ".join(RECORDED))
