"""``threads verify`` audits every permission decision against the thread's pinned policy
(``threads.run.decision_audit``): a decision that lets a call through which the pinned policy
holds back (``allow, source default`` for a tool the policy says ``ask``; an allow a pinned
``deny`` rule matches) fails ``decision_contradicts_policy`` at that decision's seq, for an
export (``verify FILE``) and for a stored branch on both stores; so does an allow by a mode the
thread is not in. Logs real runs wrote (asks approved with a remembered rule, bypass mode)
pass.

The contradicting logs are what main let a run write by running a thread with a looser policy
than it pinned; they are forged here from a real run by re-chaining its lines with a stricter
pinned policy (the pin check now refuses the run itself)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from postgres_support import POSTGRES_MARKS, drop_store, open_postgres
from threads import Completed, FakeClock, Parked, Permissions, Principal, agent, sqlite, tool
from threads.cli.cmd_verify import verify_branch
from threads.cli.main import main
from threads.log.hashing import sha256_hex
from threads.log.lines import Head, encode_event
from threads.log.refs import referenced_artifacts
from threads.run.agent import Agent
from threads.run.config import config_hash
from threads.store.bundle import write_bundle
from threads.store.postgres import PostgresStore
from threads.store.protocol import Store
from threads.store.transfer import export_branch, import_log
from threads.testing.scripted import call, say, scripted_model, use

ENGINES = [pytest.param("sqlite"), pytest.param("postgres", marks=POSTGRES_MARKS)]
ALICE = Principal("api", "acme", "alice")


class Refund(BaseModel):
    order: str


def support(permissions: Permissions, script: list[Any]) -> Agent:
    async def refund(args: Refund, _ctx: Any) -> str:
        return f"refunded {args.order}"

    return agent(
        name="support", instructions="Help.", permissions=permissions,
        model=scripted_model(script),
        tools=[tool(name="refund", description="Refund an order.", input=Refund,
                    execute=refund)],
    )


async def refund_run(store: Store, permissions: Permissions) -> tuple[str, bytes]:
    """A completed run that refunded o-1 under ``permissions``: its branch and export."""
    bot = support(permissions, [use(call("refund", order="o-1")), say("done")])
    result = await bot.run("refund o-1", store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    root = await store.root_branch(result.thread.id)
    return root.branch_id, await export_branch(store, root.branch_id)


def repinned(export: bytes, **rules: list[str] | str) -> tuple[bytes, int]:
    """``export`` with ``rules`` written into its pinned permissions (the chain re-linked, so
    every line still admits and chains); and the seq of its permission_decision."""
    header, *events, _head = export.splitlines()
    prev, out, decision_seq = sha256_hex(header), [header], 0
    for line in events:
        fields = json.loads(line)
        if fields["type"] == "thread_started":
            data = fields["data"]
            data["policy"]["permissions"].update(rules)
            data["config_hash"] = config_hash(data)
        if fields["type"] == "permission_decision":
            decision_seq = fields["seq"]
        kept = {k: fields[k] for k in ("seq", "event_id", "thread_id", "branch_id", "epoch",
                                         "type", "time", "actor", "data")}
        event = encode_event(**kept, prev_hash=prev)
        out.append(event.line)
        prev = event.hash
    head = Head(json.loads(header)["branch_id"], json.loads(events[-1])["seq"], prev)
    return b"".join(line + b"\n" for line in (*out, head.line())), decision_seq


def verify_file(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["verify", str(path)])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_an_allow_by_default_for_a_tool_the_pinned_policy_asks_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def written() -> bytes:
        store = sqlite(tmp_path / "store", clock=FakeClock())
        try:
            return (await refund_run(store, Permissions()))[1]
        finally:
            await store.close()

    export = asyncio.run(written())
    honest = tmp_path / "honest.jsonl"
    honest.write_bytes(export)
    assert verify_file(honest, capsys)[0] == 0  # the same run under the policy it pinned

    forged, seq = repinned(export, ask=["refund"])
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forged)
    code, said = verify_file(path, capsys)
    assert code == 1
    assert f"error: decision_contradicts_policy: at seq {seq}: allow (default) for refund" in said
    assert "the pinned ask rule 'refund' matches it" in said
    assert "review that call's effect" in said
    assert "Traceback" not in said


def test_an_allow_by_a_mode_the_thread_is_not_in_fails_verify(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    async def written() -> bytes:
        store = sqlite(tmp_path / "store", clock=FakeClock())
        try:
            permissions = Permissions(mode="bypass", allow_bypass=True, ask=["refund"])
            return (await refund_run(store, permissions))[1]
        finally:
            await store.close()

    forged, seq = repinned(asyncio.run(written()), mode="default")
    path = tmp_path / "forged.jsonl"
    path.write_bytes(forged)
    code, said = verify_file(path, capsys)
    assert code == 1
    assert f"decision_contradicts_policy: at seq {seq}: allow (mode)" in said
    assert "names mode 'bypass', but the mode in force is 'default'" in said


@pytest.fixture(params=ENGINES)
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[list[Store]]:
    """Two fresh stores of one engine: where a run wrote, and where its forgery is imported."""
    opened: list[Store] = [
        sqlite(tmp_path / f"store-{n}", clock=FakeClock()) if request.param == "sqlite"
        else open_postgres(FakeClock())
        for n in range(2)
    ]
    yield opened
    for one in opened:
        await one.close()
        if isinstance(one, PostgresStore):
            await drop_store(one)


async def test_a_stored_allow_a_pinned_deny_rule_matches_fails_verify_store(
    stores: list[Store], capsys: pytest.CaptureFixture[str]
) -> None:
    store, elsewhere = stores
    branch_id, export = await refund_run(store, Permissions(allow=["refund"]))
    forged, seq = repinned(export, deny=["refund(order:o-*)"])
    chain = await store.read_chain(branch_id)
    artifacts = {sha: await store.get_artifact(sha) for sha in referenced_artifacts(chain.events)}
    await import_log(elsewhere, write_bundle(forged, artifacts), tenant_id="acme")
    capsys.readouterr()
    assert await verify_branch(store, await store.get_branch(branch_id))  # the honest one
    assert not await verify_branch(elsewhere, await elsewhere.get_branch(branch_id))
    said = capsys.readouterr().out
    assert f"FAILED decision_contradicts_policy: at seq {seq}: allow (policy)" in said
    assert "the pinned deny rule 'refund(order:o-*)' matches it" in said


async def test_decisions_real_runs_record_pass_the_audit(stores: list[Store]) -> None:
    store = stores[0]
    # an ask approved with a remembered rule: the next call is allowed by that thread rule
    asking = support(Permissions(ask=["refund"]), [
        use(call("refund", order="o-1")), use(call("refund", order="o-2")), say("done")])
    parked = await asking.run("refund both", store=store, principal=ALICE)
    assert isinstance(parked, Parked), parked
    [pending] = parked.pending
    await parked.thread.approve(pending.id, ALICE, remember_rule="refund")
    done = await asking.run(None, thread=parked.thread.id, store=store, principal=ALICE)
    assert isinstance(done, Completed), done
    decisions = [(e.data["decision"], e.data["source"])
                 for e in await done.thread.timeline() if e.type == "permission_decision"]
    assert decisions == [("ask", "policy"), ("allow", "thread_rule")]
    # bypass mode: the asked tool is allowed by the mode
    bypass = support(Permissions(mode="bypass", allow_bypass=True, ask=["refund"]), [
        use(call("refund", order="o-3")), say("done")])
    bypassed = await bypass.run("refund o-3", store=store, principal=ALICE)
    assert isinstance(bypassed, Completed), bypassed
    for thread in (done.thread, bypassed.thread):
        root = await store.root_branch(thread.id)
        assert await verify_branch(store, root), thread.id
