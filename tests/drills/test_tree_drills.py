"""Tree crash drills (digest §6.2), in real worker processes SIGKILLed at named boundaries, with
the fake service counting what the clerk (look-up, charge (idempotent), email (unguarded))
applied.

Cancel of an idle parent: the parent's turn is over and its background clerk dies after the
charge applied (not committed). ``Thread.cancel`` on the parent then records the parent's
barrier (``scope: thread``) and the clerk's (``scope: tree``), two appends: a cancel process is
killed after each; or the cancel completes and the parent's next run, which carries it out, is
killed after the clerk's ``cancelled``, its ``turn_completed``, or the parent's
``agent_finished``. Fresh workers then run the parent until it completes. Each case: one child;
the charge applied once, the email never; the parent records the clerk ``cancelled`` once, with
no ``woken``; each barrier once; every log only grew; exports verify; a rerun appends nothing.

A decision on a subagent continues its tree's root: the clerk waits for an approval of its
charge; the grant is recorded on the clerk's thread; a ``Worker`` process (which never runs a
subagent's thread alone) continues the root, and is killed mid-charge, after the parent's
``resumed`` for the clerk, or after its ``agent_finished``; more worker passes complete it.
Each case: the charge and the email applied once; the parent completes as an uncrashed tree;
every worker run was the root's.

A cancel queued while the parent's run waits with its turn parked: the parent's reply starts
the clerk in the background (its look-up waits at a gate) and asks for an approval of its own
email, so its turn parks while its run waits for the clerk. A cancel queued from the test's
process is applied by that run at once; the run is killed right after the barrier (before the
approval's end), after the approval's end, or after the turn's end, or not at all. Fresh runs
then finish it. Each case: one barrier on the parent (``scope: turn``, the starter its actor)
and one on the clerk; the approval ended once and its email never sent; the turn ended
``cancelled`` once and the clerk recorded ``cancelled`` once, no ``woken``; nothing applied;
every log only grew; exports verify; a rerun appends nothing. The same drill runs on Postgres
(every process on one schema, the log read from its ``events`` table), with the same
assertions.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg
import pytest
from drill_harness import KILLED, LEASE_PAST_MS, STARTER, SUMMARY, WORKER, Drill, branch_lines
from test_subagent_drills import (
    BG,
    DEADLINE_S,
    PROFILE,
    _act_on,
    of_type,
    run_gated,
    settle_child,
    threads_in,
    tree_of,
    verified,
)

from postgres_support import URL, drop_schema, fetch_all, fresh_schema, needs_postgres
from threads.run.queued_controls import QUEUED_REASON
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

RECORDED: list[str] = []
PARKED_RECORDED: list[str] = []
PG_PARKED_RECORDED: list[str] = []
# (where the cancel process dies, where the parent's next run dies)
CANCEL_CASES: dict[str, tuple[dict[str, Any] | None, dict[str, Any] | None]] = {
    "cancel_after_parent_barrier": ({"type": "cancel_requested", "nth": 1}, None),
    "cancel_after_child_barrier": ({"type": "cancel_requested", "nth": 2}, None),
    "run_after_child_cancelled": (None, {"type": "cancelled", "nth": 1}),
    "run_after_child_turn_end": (None, {"type": "turn_completed", "nth": 1}),
    "run_after_agent_finished": (None, {"type": "agent_finished", "nth": 1}),
}
ASK = {"profile": "subagent_bg_ask"}
# where the run applying the queued cancel dies (None: it does not)
PARKED_KILLS: dict[str, dict[str, Any] | None] = {
    "after_barrier": {"type": "cancel_requested", "nth": 1},
    "after_approval_ended": {"type": "resumed", "nth": 1},
    "after_turn_cancelled": {"type": "turn_completed", "nth": 1},
    "not_killed": None,
}
WORK_KILLS: dict[str, dict[str, Any]] = {
    "root_mid_child_charge": {"in_execute": "charge_card", "nth": 1},
    "root_after_resumed": {"type": "resumed", "nth": 1},
    "root_after_agent_finished": {"type": "agent_finished", "nth": 1},
}


def in_process(drill: Drill, mode: str, **fields: Any) -> dict[str, Any]:
    """One worker process in ``mode`` (``cancel``, ``work``); ``{"status": "killed"}`` when it
    died at its kill point (the clock then moves past its leases: no sleeping)."""
    before = branch_lines(drill.store_dir)
    spec = drill.spec(**fields)
    drill.runs += 1
    proc = subprocess.run([sys.executable, str(WORKER), mode, json.dumps(spec)],
                          capture_output=True, timeout=60, check=False)
    after = branch_lines(drill.store_dir)
    for branch_id, kept in before.items():  # every branch's log only grew
        assert after[branch_id][: len(kept)] == kept, f"{mode} rewrote or dropped events"
    if proc.returncode == KILLED:
        drill.kills += 1
        drill.advance(LEASE_PAST_MS)
        return {"status": "killed"}
    assert proc.returncode == 0, proc.stderr.decode()
    return dict(json.loads(proc.stdout.decode().strip().splitlines()[-1]))


def effects_of(service: FakeService, child: list[dict[str, Any]]) -> dict[str, int]:
    """What the service applied for the clerk's calls, by tool (look-ups apply nothing); an
    effect's key is the clerk's branch and the call's id."""
    branch = child[0]["branch_id"]
    names = {e["data"]["call_id"]: e["data"]["name"] for e in of_type(child, "tool_call")}
    applied: dict[str, int] = {}
    for key, count in service.client().snapshot()["counts"].items():
        if key.startswith(f"{branch}:"):
            [name] = [n for call_id, n in names.items() if call_id in key]
            applied[name] = applied.get(name, 0) + count
    return applied


@pytest.mark.parametrize("case", list(CANCEL_CASES))
def test_cancel_of_an_idle_parent_reaches_its_background_child_once(
    case: str, service: FakeService, tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    first = run_gated(drill, input="go", kill={"in_execute": "charge_card", "nth": 1})
    assert first["status"] == "killed"
    parent, child = threads_in(drill.store_dir)
    assert parent[-1]["type"] == "turn_completed"  # the parent's turn was over
    assert child[-1]["type"] == "effect_begin"  # the charge applied, not committed
    parent_id = parent[0]["thread_id"]
    cancel_kill, run_kill = CANCEL_CASES[case]

    cancelled = in_process(drill, "cancel", thread=parent_id, kill=cancel_kill, **BG)
    assert cancelled["status"] == ("killed" if cancel_kill else "cancel_recorded")
    parent, child = threads_in(drill.store_dir)
    assert parent[-1]["type"] == "cancel_requested"
    assert parent[-1]["data"] == {"scope": "thread"}
    assert len(of_type(child, "cancel_requested")) == (
        0 if case == "cancel_after_parent_barrier" else 1)
    lines_at_cancel = branch_lines(drill.store_dir)

    if run_kill is not None:
        assert drill.run(thread=parent_id, input=None, kill=run_kill, **BG)["status"] == "killed"
    settled = 0
    for _ in range(6):
        result = drill.run(thread=parent_id, input=None, **BG)
        if result["status"] != "parked":
            break
        for kind, child_id in result["pending"]:  # the clerk parked what it can't prove
            assert kind == "child", result
            settled += settle_child(drill, drill.spec(**BG), child_id)
    else:
        raise AssertionError("the parent did not settle")
    assert result["status"] == "completed", result

    parent, child = threads_in(drill.store_dir)
    assert of_type(parent, "woken") == []
    [finished] = of_type(parent, "agent_finished")
    assert finished["data"]["status"] == "cancelled"
    [late] = of_type(parent, "tool_result_late")
    assert late["data"]["preview"] == "cancelled: cancelled"
    assert [e["data"]["scope"] for e in of_type(parent, "cancel_requested")] == ["thread"]
    [barrier] = of_type(child, "cancel_requested")
    assert barrier["data"] == {"reason": "ancestor cancelled", "scope": "tree"}
    assert child[-1]["type"] == "turn_completed"
    assert child[-1]["data"] == {"reason": "cancelled"}
    assert effects_of(service, child) == {"charge_card": 1}  # charged once, never emailed
    lines = branch_lines(drill.store_dir)
    for branch_id, kept in lines_at_cancel.items():
        assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    verified(drill.spec(), parent_id)
    verified(drill.spec(), child[0]["thread_id"])
    before = branch_lines(drill.store_dir)
    assert drill.run(thread=parent_id, input=None, **BG)["status"] == "completed"
    assert branch_lines(drill.store_dir) == before, "a restart after the recovery appended"
    RECORDED.append(f"{case}: {drill.runs} runs, {drill.kills} kills, {settled} parks settled,"
                    " 1 child, charge x1, email x0, no woken")
    _summarize()


@pytest.mark.parametrize("case", list(WORK_KILLS))
def test_a_grant_on_the_child_is_carried_out_by_the_roots_run_once(
    case: str, service: FakeService, tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    asked = {"ask": ["charge_card"], **PROFILE}
    parked = drill.run(input="go", **asked)
    assert parked["status"] == "parked"
    [[kind, child_id]] = parked["pending"]
    assert kind == "child"
    parent, _child = threads_in(drill.store_dir)
    parent_id = parent[0]["thread_id"]

    async def grant(thread: Any) -> None:
        [approval] = await thread.pending_approvals()
        await thread.approve(approval.challenge_id, STARTER)

    asyncio.run(_act_on(drill.spec(), child_id, grant))
    worked = in_process(drill, "work", kill=WORK_KILLS[case], **asked)
    assert worked["status"] == "killed"
    runs: list[dict[str, Any]] = []
    for _ in range(6):
        parent, child = threads_in(drill.store_dir)
        if parent[-1]["type"] == "turn_completed":
            break
        worked = in_process(drill, "work", **asked)
        assert worked["status"] == "worked", worked
        runs.append(worked)
    else:
        raise AssertionError(f"the tree did not complete: {runs}, parent at {parent[-1]}")
    assert all(r["runs"] <= 1 for r in runs), runs  # one thread ran: the root
    assert sum(r["outcomes"].get("completed", 0) for r in runs) == 1, runs
    parent, child = threads_in(drill.store_dir)
    [finished] = of_type(parent, "agent_finished")
    assert finished["data"]["status"] == "completed"
    assert parent[-1]["data"] == {"reason": "end_turn"}
    assert effects_of(service, child) == {"charge_card": 1, "send_email": 1}
    verified(drill.spec(), parent_id)
    verified(drill.spec(), child_id)
    again = in_process(drill, "work", **asked)
    assert again["runs"] == 0, again  # nothing is left to do
    RECORDED.append(f"{case}: {drill.runs} processes, {drill.kills} kill, root runs only,"
                    " charge x1, email x1")
    _summarize()


def _until(what: str, seen: Any, proc: subprocess.Popen[bytes]) -> None:
    """Watch the store until ``seen()``; the run still going (killed when it never comes)."""
    started = time.monotonic()
    while not seen():
        assert proc.poll() is None, f"the run ended before {what}: {proc.communicate()}"
        if time.monotonic() - started > DEADLINE_S:
            proc.kill()
            proc.communicate(timeout=60)
            raise AssertionError(f"no {what} within {DEADLINE_S} s")
        time.sleep(0.05)  # watching another process's log; no lease is waited on


@pytest.mark.parametrize("case", list(PARKED_KILLS))
def test_a_cancel_queued_while_the_parked_parent_waits_is_carried_out_once(
    case: str, service: FakeService, tmp_path: Path,
) -> None:
    drill = Drill(tmp_path, service)
    _parked_cancel(case, drill, lambda: branch_lines(drill.store_dir), {}, PARKED_RECORDED)


@needs_postgres
@pytest.mark.parametrize("case", list(PARKED_KILLS))
def test_on_postgres_a_cancel_queued_while_the_parked_parent_waits_is_carried_out_once(
    case: str, service: FakeService, tmp_path: Path,
) -> None:
    schema = fresh_schema()
    try:
        _parked_cancel(case, Drill(tmp_path, service), lambda: pg_branch_lines(schema),
                       {"url": URL, "schema": schema}, PG_PARKED_RECORDED)
    finally:
        asyncio.run(drop_schema(schema))


def pg_branch_lines(schema: str) -> dict[str, list[bytes]]:
    """``branch_lines`` of a Postgres store: every stored line per branch, in seq order
    (nothing yet, the schema not even created: empty)."""
    try:
        rows = fetch_all(schema, "SELECT branch_id, line FROM events ORDER BY branch_id, seq")
    except (psycopg.errors.UndefinedTable, psycopg.errors.InvalidSchemaName):
        return {}
    out: dict[str, list[bytes]] = {}
    for branch, line in rows:
        out.setdefault(branch, []).append(bytes(line))
    return out


def _parked_cancel(
    case: str, drill: Drill, stored: Callable[[], dict[str, list[bytes]]],
    where: dict[str, Any], recorded: list[str],
) -> None:
    """The parked-cancel drill on the store ``where`` names (``{}``: the drill's SQLite
    directory; ``url`` and ``schema``: Postgres), whose lines by branch ``stored`` reads."""
    service = drill.service
    gate = f"{drill.root.name}-parked"
    kill = PARKED_KILLS[case]
    proc = drill.spawn(input="go", child_gate=gate, kill=kill, **ASK, **where)

    def parent_events() -> list[dict[str, Any]]:
        return tree_of(lines)[0] if (lines := stored()) else []

    _until("approval park", lambda: of_type(parent_events(), "parked"), proc)
    parent_id = parent_events()[0]["thread_id"]

    async def queue(thread: Any) -> str:
        return str(await thread.queue_cancel(STARTER))

    asyncio.run(_act_on(drill.spec(**where), parent_id, queue))
    _until("barrier", lambda: of_type(parent_events(), "cancel_requested"), proc)
    service.client().open_gate(gate)  # the clerk's look-up returns into a stopped run
    out, err = proc.communicate(timeout=DEADLINE_S)
    if kill is not None:
        assert proc.returncode == KILLED, err.decode()
        drill.kills += 1
        drill.advance(LEASE_PAST_MS)
        parent, _child = tree_of(stored())
        # the kill landed where it was meant to: right after the append holding that event
        assert kill["type"] in [e["type"] for e in parent[-2:]], parent[-2:]
        lines_at_kill = stored()
        result = drill.run(thread=parent_id, input=None, **ASK, **where)
        lines = stored()
        for branch_id, kept in lines_at_kill.items():
            assert lines[branch_id][: len(kept)] == kept, "a rerun rewrote or dropped events"
    else:
        assert proc.returncode == 0, err.decode()
        result = json.loads(out.decode().strip().splitlines()[-1])
    # A rerun that finds the turn already ended cancelled has nothing of it left to carry out
    # (``recorded_ending``: completed); it still records the clerk's end.
    ended = "completed" if case == "after_turn_cancelled" else "cancelled"
    assert result["status"] == ended, result

    parent, child = tree_of(stored())
    [barrier] = of_type(parent, "cancel_requested")
    assert barrier["data"] == {"reason": QUEUED_REASON, "scope": "turn"}
    assert barrier["actor"] == {"kind": "user", "principal": STARTER.to_wire()}
    [resumed] = of_type(parent, "resumed")
    assert resumed["data"]["address"]["kind"] == "approval"
    [email] = [e for e in of_type(parent, "tool_call") if e["data"]["name"] == "send_email"]
    [closed] = [e for e in of_type(parent, "tool_result")
                if e["data"]["call_id"] == email["data"]["call_id"]]
    assert closed["data"]["preview"] == "not executed: cancelled"
    assert [e["data"] for e in of_type(parent, "turn_completed")] == [{"reason": "cancelled"}]
    assert of_type(parent, "woken") == []
    [finished] = of_type(parent, "agent_finished")
    assert finished["data"]["status"] == "cancelled"
    [kid_barrier] = of_type(child, "cancel_requested")
    assert kid_barrier["data"] == {"reason": "ancestor cancelled", "scope": "tree"}
    assert child[-1]["data"] == {"reason": "cancelled"}
    counts = service.client().snapshot()["counts"]  # the module's service: every test's
    mine = (parent[0]["branch_id"], child[0]["branch_id"])
    assert [key for key in counts if key.startswith(mine)] == []  # nothing applied, by either
    verified(drill.spec(**where), parent_id)
    verified(drill.spec(**where), child[0]["thread_id"])
    before = stored()
    drill.run(thread=parent_id, input=None, **ASK, **where)  # nothing left: it was carried out
    assert stored() == before, "a restart after the cancel appended"
    recorded.append(f"{case}: {drill.runs} runs, {drill.kills} killed, nothing applied")
    if len(recorded) == len(PARKED_KILLS):
        engine = "postgres " if where else ""
        SUMMARY.append(f"{engine}parked-cancel drills: " + "; ".join(recorded))


def _summarize() -> None:
    if len(RECORDED) == len(CANCEL_CASES) + len(WORK_KILLS):
        SUMMARY.append("tree drills: " + "; ".join(RECORDED))
