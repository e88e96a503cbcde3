"""``threads approvals|approve|deny|resolve|cancel``: the operator principal is recorded, refusals
are coded (exit 1, two stderr lines, no traceback), bad usage exits 2."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from pydantic import BaseModel

from threads import Parked, Permissions, Principal, agent, open_thread, sqlite, tool
from threads.cli.main import main
from threads.testing.scripted import call, say, scripted_model, use

OPERATOR = Principal("cli", "acme", "ops")


class Path_(BaseModel):
    path: str


async def _write(args: Path_, ctx: object) -> str:
    return "written"


def parked_thread(store_dir: Path) -> str:
    """A thread of tenant acme started by the operator, parked on one approval."""

    async def go() -> str:
        store = sqlite(store_dir)
        try:
            bot = agent(
                name="t",
                model=scripted_model([use(call("write_file", path="a")), say("ok")]),
                tools=[tool(name="write_file", description="Write.", input=Path_, execute=_write)],
                permissions=Permissions(ask=("write_file",)),
            )
            result = await bot.run("go", store=store, principal=OPERATOR)
            assert isinstance(result, Parked)
            return result.thread.id
        finally:
            await store.close()

    return asyncio.run(go())


def last_event(store_dir: Path, thread_id: str, type_: str) -> dict[str, object]:
    async def read() -> dict[str, object]:
        store = sqlite(store_dir)
        try:
            timeline = await (await open_thread(store, thread_id)).timeline()
        finally:
            await store.close()
        event = [e for e in timeline if e.type == type_][-1]
        return {"actor": event.actor, "data": event.data}

    return asyncio.run(read())


@pytest.fixture
def parked(tmp_path: Path) -> tuple[Path, str]:
    store_dir = tmp_path / "store"
    return store_dir, parked_thread(store_dir)


def who(store_dir: Path, subject: str = "ops", tenant: str = "acme") -> list[str]:
    return ["--store", str(store_dir), "--tenant", tenant, "--subject", subject]


def challenge_of(capsys: pytest.CaptureFixture[str], store_dir: Path, thread: str) -> str:
    assert main(["approvals", thread, *who(store_dir)]) == 0
    line = capsys.readouterr().out.strip()
    assert "tool=write_file" in line
    return line.split()[0]


def test_approve_records_the_operator(
    parked: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir, thread = parked
    challenge = challenge_of(capsys, store_dir, thread)
    assert main(["approve", thread, challenge, *who(store_dir)]) == 0
    assert "approved" in capsys.readouterr().out
    granted = last_event(store_dir, thread, "approval_granted")
    assert granted["actor"] == {"kind": "approver", "principal": OPERATOR.to_wire()}
    assert main(["approve", thread, challenge, *who(store_dir)]) == 1
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2
    assert err[0].startswith("error: approval_duplicate")


def test_deny_with_reason_and_refusals(
    parked: tuple[Path, str], capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir, thread = parked
    challenge = challenge_of(capsys, store_dir, thread)
    assert main(["deny", thread, challenge, *who(store_dir, subject="eve")]) == 1
    assert capsys.readouterr().err.startswith("error: forbidden")
    assert main(["approve", thread, challenge, "--args-hash", "0" * 64, *who(store_dir)]) == 1
    assert capsys.readouterr().err.startswith("error: approval_mismatch")
    assert main(["deny", thread, challenge, "--reason", "no", *who(store_dir)]) == 0
    assert last_event(store_dir, thread, "approval_denied")["data"]["reason"] == "no"  # type: ignore[index]


def test_cancel_and_resolve(parked: tuple[Path, str], capsys: pytest.CaptureFixture[str]) -> None:
    store_dir, thread = parked
    assert main(["resolve", thread, "x:y", "--assume-done", *who(store_dir)]) == 1
    assert capsys.readouterr().err.startswith("error: not_parked")
    assert main(["cancel", thread, *who(store_dir, tenant="other")]) == 1
    assert capsys.readouterr().err.startswith("error: not_found")  # another tenant's thread
    assert main(["cancel", thread, *who(store_dir)]) == 0
    cancel = last_event(store_dir, thread, "cancel_requested")
    assert cancel["actor"] == {"kind": "user", "principal": OPERATOR.to_wire()}


def test_usage_errors_exit_2(parked: tuple[Path, str]) -> None:
    store_dir, thread = parked
    assert main(["resolve", thread, "x:y", *who(store_dir)]) == 2  # neither flag
    assert main(["resolve", thread, "k", "--assume-done", "--assume-not-done"]) == 2
    assert main(["approve", thread]) == 2
