"""``threads approvals|approve|deny|resolve|cancel``: the CLI acts as the API's default operator
(``api/local/operator``) unless ``--issuer/--tenant/--subject`` say otherwise, and is held to the
thread's authority rule; refusals are coded (exit 1, one stderr line, no traceback); an
approver sees the tool, its arguments, effect class, args hash, who asked and the expiry."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

import pytest
from pydantic import BaseModel

from threads import LOCAL_OPERATOR, Parked, Permissions, Principal, agent, open_thread, sqlite, tool
from threads.cli.main import main
from threads.testing.scripted import call, say, scripted_model, use

OPS = Principal("cli", "acme", "ops")
LONG = "x" * 500


class Write(BaseModel):
    path: str
    body: str = ""


async def _write(args: Write, ctx: object) -> str:
    return "written"


def parked_thread(store_dir: Path, principal: Principal | None = None) -> str:
    """A thread parked on one approval of ``write_file``, started by ``principal`` (the run's
    default, the local operator, when None)."""

    async def go() -> str:
        store = sqlite(store_dir)
        try:
            bot = agent(
                name="t",
                model=scripted_model(
                    [use(call("write_file", path="a", body=LONG)), say("ok")]
                ),
                tools=[tool(name="write_file", description="Write.", input=Write, execute=_write)],
                permissions=Permissions(ask=["write_file"]),
            )
            result = await bot.run("go", store=store, principal=principal)
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


def refused(capsys: pytest.CaptureFixture[str], code: str) -> None:
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1, err
    assert err.startswith(f"error: {code}: "), err
    assert "Traceback" not in err


def store_of(store_dir: Path) -> list[str]:
    return ["--store", str(store_dir)]


def as_ops(store_dir: Path, **overrides: str) -> list[str]:
    who = {"issuer": OPS.issuer, "tenant": OPS.tenant, "subject": OPS.subject, **overrides}
    return [*store_of(store_dir), *(f"--{k}={v}" for k, v in who.items())]


def challenge_of(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(["approvals", *argv]) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first.startswith("challenge ")
    return first.split()[1]


def test_the_default_operator_decides_a_thread_started_the_default_way(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    assert main(["approvals", thread, *store_of(store_dir)]) == 0
    shown = capsys.readouterr().out
    assert "tool        write_file (effect unguarded, call " in shown
    assert '    "path": "a"' in shown  # pretty JSON, indented under "arguments"
    assert f'"body": "{"x" * 200}…(+300 chars)"' in shown  # a long value is cut, and says so
    assert re.search(r"args hash   [0-9a-f]{64}", shown)
    assert "asked by    api/local/operator" in shown
    assert re.search(r"expires     \d{4}-\d\d-\d\dT[\d:.]+Z \(in (\d+ h )?\d+ min\)", shown)
    challenge = challenge_of(capsys, [thread, *store_of(store_dir)])
    assert main(["approve", thread, challenge, *store_of(store_dir)]) == 0
    assert "approved" in capsys.readouterr().out
    granted = last_event(store_dir, thread, "approval_granted")
    assert granted["actor"] == {"kind": "approver", "principal": LOCAL_OPERATOR.to_wire()}
    assert main(["approve", thread, challenge, *store_of(store_dir)]) == 1
    refused(capsys, "approval_duplicate")
    assert main(["approvals", thread, *store_of(store_dir)]) == 0
    assert capsys.readouterr().out == "no approvals pending and no effects parked on this thread\n"


def test_another_identity_is_given_with_issuer_tenant_subject(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir, OPS)
    assert main(["approvals", thread, *store_of(store_dir)]) == 1  # the local tenant's view
    refused(capsys, "not_found")
    challenge = challenge_of(capsys, [thread, *as_ops(store_dir)])
    for stranger in ({"issuer": "api"}, {"subject": "eve"}):  # same tenant, not the starter
        assert main(["approve", thread, challenge, *as_ops(store_dir, **stranger)]) == 1
        refused(capsys, "forbidden")
    assert main(["approve", thread, challenge, *as_ops(store_dir)]) == 0
    granted = last_event(store_dir, thread, "approval_granted")
    assert granted["actor"] == {"kind": "approver", "principal": OPS.to_wire()}


def test_deny_with_reason_and_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    challenge = challenge_of(capsys, [thread, *store_of(store_dir)])
    argv = [thread, challenge, *store_of(store_dir)]
    assert main(["approve", *argv, "--args-hash", "0" * 64]) == 1
    refused(capsys, "approval_mismatch")
    assert main(["deny", *argv, "--reason", "no"]) == 0
    assert last_event(store_dir, thread, "approval_denied")["data"]["reason"] == "no"  # type: ignore[index]


def test_cancel_and_resolve(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    assert main(["resolve", thread, "x:y", "--assume-done", *store_of(store_dir)]) == 1
    refused(capsys, "not_parked")
    assert main(["cancel", thread, *store_of(store_dir), "--tenant", "other"]) == 1
    refused(capsys, "not_found")  # another tenant's thread does not exist for it
    assert main(["cancel", thread, *store_of(store_dir)]) == 0
    cancel = last_event(store_dir, thread, "cancel_requested")
    assert cancel["actor"] == {"kind": "user", "principal": LOCAL_OPERATOR.to_wire()}


def test_a_second_cancel_records_nothing_and_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The cancel is in force already: exit 0, no second ``cancel_requested``."""
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    assert main(["cancel", thread, *store_of(store_dir)]) == 0
    assert "cancel recorded" in capsys.readouterr().out
    assert main(["cancel", thread, *store_of(store_dir)]) == 0
    assert "a cancel is in force already" in capsys.readouterr().out

    async def barriers() -> int:
        store = sqlite(store_dir)
        try:
            timeline = await (await open_thread(store, thread)).timeline()
        finally:
            await store.close()
        return sum(e.type == "cancel_requested" for e in timeline)

    assert asyncio.run(barriers()) == 1


def test_usage_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    assert main(["resolve", thread, "x:y", *store_of(store_dir)]) == 2  # neither flag
    assert main(["resolve", thread, "k", "--assume-done", "--assume-not-done"]) == 2
    assert main(["approve", thread]) == 2
    err = capsys.readouterr().err
    assert "error: usage: " in err
    assert "Traceback" not in err
    assert main(["approve", thread, "c", "--subject", "", *store_of(store_dir)]) == 1
    refused(capsys, "invalid_config")


def test_compact(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``threads compact``: refused while the turn is open (parked), recorded once idle, and
    the next run summarizes before anything else."""
    store_dir = tmp_path / "store"
    thread = parked_thread(store_dir)
    assert main(["compact", thread, *store_of(store_dir)]) == 1
    refused(capsys, "invalid_transition")  # the turn is still open, parked on its approval
    assert main(["cancel", thread, *store_of(store_dir)]) == 0

    async def finish() -> None:
        store = sqlite(store_dir)
        try:
            bot = agent(
                name="t", model=scripted_model([say("ok")]),
                tools=[tool(name="write_file", description="Write.", input=Write, execute=_write)],
                permissions=Permissions(ask=["write_file"]),
            )
            await bot.run(None, store=store, thread=thread)  # carries out the cancel
        finally:
            await store.close()

    asyncio.run(finish())
    argv = ["compact", thread, *store_of(store_dir), "--instructions", "Keep the path."]
    assert main(argv) == 0
    assert "compaction requested" in capsys.readouterr().out
    requested = last_event(store_dir, thread, "compaction_requested")
    assert requested["data"] == {"instructions": "Keep the path."}
    assert requested["actor"] == {"kind": "user", "principal": LOCAL_OPERATOR.to_wire()}
    assert main(["compact", thread, *store_of(store_dir)]) == 1
    refused(capsys, "invalid_transition")  # one at a time
