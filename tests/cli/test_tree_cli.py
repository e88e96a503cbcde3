"""The tree in the CLI: ``threads timeline`` shows a handoff, a spawn and a child's end on one
line each naming the other thread, and a target's ``thread_started`` names its source;
``threads ls --tree`` indents each thread under the thread it was started from."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from threads import HandedOff, Principal, agent, sqlite
from threads.cli.cmd_timeline import summary
from threads.cli.main import main
from threads.log.lines import Event
from threads.testing import call, say, scripted_model, use

ALICE = Principal("api", "local", "alice")


def hand_off_twice(store_dir: Path) -> HandedOff:
    """triage hands off to billing, which hands off to refunds: a chain of three threads."""
    refunds = agent(name="refunds", model=scripted_model([say("Refunded.")]))
    billing = agent(name="billing", handoffs=[refunds], model=scripted_model(
        [use(call("handoff", "h2", agent="refunds"))]))
    triage = agent(name="triage", handoffs=[billing], model=scripted_model(
        [use(call("handoff", "h1", agent="billing"))]))

    async def go() -> HandedOff:
        store = sqlite(store_dir)
        try:
            result = await triage.run("refund please", store=store, principal=ALICE)
        finally:
            await store.close()
        assert isinstance(result, HandedOff)
        return result

    return asyncio.run(go())


def test_timeline_names_the_target_and_the_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = hand_off_twice(tmp_path / "store")
    assert isinstance(result.target, HandedOff)
    source, target = result.thread.id, result.to_thread.id
    assert main(["timeline", source, "--store", str(tmp_path / "store")]) == 0
    [line] = [x for x in capsys.readouterr().out.splitlines() if " handoff " in x]
    assert line.split()[4] == "handoff"
    assert line.endswith(f"call_id=h1 handed off to billing thread {target}")
    assert main(["timeline", target, "--store", str(tmp_path / "store")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert f"handoff of thread {source}" in lines[1]  # its thread_started
    assert "source=handoff" in lines[2]  # the forwarded transcript, injected
    assert "source=handoff" in lines[3]  # the user_input
    assert '"refund please"' in lines[3]


def test_ls_tree_indents_each_thread_under_its_source(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = hand_off_twice(tmp_path / "store")
    assert isinstance(result.target, HandedOff)
    ids = [result.thread.id, result.to_thread.id, result.target.to_thread.id]
    assert main(["ls", "--tree", "--store", str(tmp_path / "store")]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    assert header.split()[0] == "THREAD"
    width = len(f"  └ {ids[2]} (handoff)")  # the THREAD column, as wide as its widest cell
    assert [row[:width].rstrip() for row in rows] == [
        ids[0], f"└ {ids[1]} (handoff)", f"  └ {ids[2]} (handoff)",
    ]
    assert [row[width:].split()[:2] for row in rows] == [
        ["triage", "local"], ["billing", "local"], ["refunds", "local"],
    ]
    assert main(["ls", "--store", str(tmp_path / "store")]) == 0  # flat: newest first
    _, *flat = capsys.readouterr().out.splitlines()
    assert sorted(row.split()[0] for row in flat) == sorted(ids)


def _event(type_: str, data: dict[str, object]) -> Event:
    return Event(seq=5, event_id="e", thread_id="t", branch_id="b", epoch=1, type=type_,
                 type_version=1, time=0, actor={"kind": "host"}, prev_hash="", critical=True,
                 data=data, line=b"", hash="")


def test_a_spawn_and_a_childs_end_name_the_child_thread() -> None:
    spawned = _event("agent_spawned", {
        "call_id": "c1", "child_thread_id": "0190-child", "agent_name": "researcher",
        "mode": "background", "isolation": "none",
    })
    assert summary(spawned) == (
        "call_id=c1 spawned researcher (background) child thread 0190-child"
    )
    finished = _event("agent_finished", {
        "child_thread_id": "0190-child", "status": "completed",
        "usage": {"input_tokens": 1, "output_tokens": 2},
    })
    assert summary(finished) == "child completed child thread 0190-child"
