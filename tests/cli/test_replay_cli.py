"""``threads replay THREAD`` and the replay inside ``threads verify --store``, on threads a real
run wrote: every request re-renders; a request recorded with other bytes than its log renders
is the first mismatch, with its code and seq, and exit 1."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from threads import Completed, FakeClock, Principal, agent, sqlite, tool
from threads.cli.main import main
from threads.log.render import render
from threads.run.writer import BranchWriter
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")


class Path_(BaseModel):
    path: str


async def _run(store_dir: Path, *, tamper: bool) -> tuple[str, int]:
    """One run (a tool call, so two requests); with ``tamper``, a third request recorded with
    the bytes of the second. Returns the thread id and the tampered request's seq."""
    async def read(args: Path_, ctx: object) -> str:
        return "# demo"

    store = sqlite(store_dir, clock=FakeClock())
    try:
        bot = agent(
            name="t", model=scripted_model([use(call("read", path="a")), say("done")]),
            tools=[tool(name="read", description="Read.", input=Path_, execute=read,
                        effect="read_only")],
        )
        result = await bot.run("go", store=store, principal=ALICE)
        assert isinstance(result, Completed)
        if not tamper:
            return result.thread.id, 0
        branch = await store.root_branch(result.thread.id)
        lease = await store.acquire_lease(branch.branch_id, "tamper", 60_000)
        chain = await store.read_chain(branch.branch_id)
        writer = BranchWriter(store, lease, chain.fold(store.clock.now_ms()))
        events = chain.events
        second = [e for e in events if e.type == "model_request"][-1]
        started = events[0].data
        stale = render(started, events[: events.index(second)])
        user = {"kind": "user", "principal": ALICE.to_wire()}
        await writer.append([("user_input", {"source": "api", "text": "again"}, user)])
        [forged] = await writer.append([("model_request", {
            "attempt": 1, "declared_prefix": stale.declared_prefix(),
            "request_ref": stale.request_ref(),
        }, {"kind": "host"})])
        await store.release_lease(writer.lease)
        return result.thread.id, forged.seq
    finally:
        await store.close()


def test_replay_of_a_written_thread_matches(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thread_id, _ = asyncio.run(_run(tmp_path / "s", tamper=False))
    assert main(["replay", thread_id, "--store", str(tmp_path / "s")]) == 0
    assert capsys.readouterr().out == "replayed 2 requests, all match\n"
    assert main(["verify", "--store", str(tmp_path / "s")]) == 0
    assert "2 requests replayed" in capsys.readouterr().out


def test_replay_reports_the_first_mismatch_and_verify_refuses_the_store(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    thread_id, seq = asyncio.run(_run(tmp_path / "s", tamper=True))
    assert main(["replay", thread_id, "--store", str(tmp_path / "s")]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith(
        f"replayed 2 requests, then request_hash_mismatch at seq {seq}:"
    )
    assert captured.err.startswith("hint: ")
    assert main(["verify", "--store", str(tmp_path / "s")]) == 1
    captured = capsys.readouterr()
    assert f"FAILED request_hash_mismatch: at seq {seq}: " in captured.out
    assert "Traceback" not in captured.err


def test_replay_of_an_unknown_thread_is_not_found(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(_run(tmp_path / "s", tamper=False))
    assert main(["replay", "0192a000-0000-7000-8000-00000000dead", "--store",
                 str(tmp_path / "s")]) == 1
    assert capsys.readouterr().err.startswith("error: not_found")
