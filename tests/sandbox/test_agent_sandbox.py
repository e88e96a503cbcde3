"""Agents with a sandbox: the built-in tools, ``runs="sandbox"`` tools, timeouts settled by
proof, snapshots at turn ends and forks that restore them, and memory, all on real runs, on a
SQLite store and on a Postgres one (when its server answers on 127.0.0.1:5432)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from sandbox_support import as_store

from threads import ConfigError, Principal, agent, open_thread, tool
from threads.clock import SystemClock
from threads.log.ids import uuid7
from threads.memory import local_memory
from threads.sandbox import SandboxInfo
from threads.sandbox.bubblewrap import LocalSandbox
from threads.store.capabilities import resources_of
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal(issuer="api", tenant="acme", subject="alice")
BOB = Principal(issuer="api", tenant="acme", subject="bob")


@pytest.fixture
def clock() -> SystemClock:
    """These runs keep the machine's time (the shared ``store`` fixture reads this fixture)."""
    return SystemClock()


def results(events: list[Any]) -> list[dict[str, Any]]:
    return [e.data for e in events if e.type == "tool_result"]


async def test_built_in_tools_work_in_the_sandbox(
    store: Store, provider: LocalSandbox
) -> None:
    model = scripted_model([
        use(call("write_file", path="/workspace/notes/a.txt", content="hello")),
        use(call("bash", command="cat notes/a.txt | tr a-z A-Z > upper.txt; echo done")),
        use(call("read_file", path="/workspace/upper.txt")),
        use(call("list_files", path="/workspace")),
        say("ok"),
    ])
    bot = agent(name="coder", model=model, sandbox=provider)
    assert [t.name for t in bot.tools] == ["bash", "read_file", "write_file", "list_files"]
    assert {t.effect for t in bot.tools} == {"sandbox_local"}
    result = await bot.run("go", store=store, principal=ALICE)
    assert result.status == "completed", result
    thread = await open_thread(store, result.thread.id, principal=ALICE)
    events = await thread.timeline()
    previews = [r["preview"] for r in results(events)]
    assert previews[1].startswith("exit code 0")
    assert previews[2] == "HELLO"
    assert "/workspace/notes/a.txt (5 bytes)" in previews[3]
    started = next(e for e in events if e.type == "thread_started")
    assert started.data["sandbox_provider"] == "local"
    assert len(provider.sandbox_ids()) == 1


class Label(BaseModel):
    name: str


async def test_a_sandbox_tool_gets_the_run_sandbox(
    store: Store, provider: LocalSandbox
) -> None:
    async def stamp(args: Label, ctx: Any) -> str:
        await ctx.sandbox.write_file(f"/workspace/{args.name}", ctx.effect_key.encode())
        run = await ctx.sandbox.exec(["cat", f"/workspace/{args.name}"])
        return (await run.collect()).stdout.decode()

    stamper = tool(name="stamp", description="stamp", input=Label, execute=stamp,
                   runs="sandbox", effect="sandbox_local")
    bot = agent(name="s", model=scripted_model([use(call("stamp", name="x")), say("ok")]),
                tools=[stamper], sandbox=provider)
    result = await bot.run("go", store=store)
    events = await (await open_thread(store, result.thread.id)).timeline()
    (data,) = results(events)
    assert data["preview"].endswith(":" + next(
        e.data["call_id"] for e in events if e.type == "tool_call"))


async def test_a_timed_out_command_is_interrupted_by_proof_never_rerun(
    store: Store, provider: LocalSandbox
) -> None:
    model = scripted_model([
        use(call("bash", command="echo once >> /workspace/runs; sleep 30", timeout_ms=300)),
        say("noted"),
    ])
    bot = agent(name="t", model=model, sandbox=provider)
    result = await bot.run("go", store=store)
    assert result.status == "completed", result
    events = await (await open_thread(store, result.thread.id)).timeline()
    kinds = [e.type for e in events]
    assert "effect_unknown" in kinds
    resolved = next(e for e in events if e.type == "effect_resolved")
    assert (resolved.data["outcome"], resolved.data["by"]) == ("interrupted", "sandbox_terminated")
    (data,) = results(events)
    assert data["origin"] == "interrupted"
    assert data["is_error"] is True
    assert "timed out" in data["preview"]
    (sandbox_id,) = provider.sandbox_ids()
    runs = provider.root / "sandboxes" / sandbox_id / "workspace" / "runs"
    assert runs.read_text() == "once\n"


async def test_snapshots_fork_and_the_child_runs_on_its_own_copy(
    store: Store, provider: LocalSandbox
) -> None:
    parent_model = scripted_model([
        use(call("write_file", path="/workspace/plan.txt", content="v1")),
        say("saved v1"),
        use(call("write_file", path="/workspace/plan.txt", content="parent v2")),
        say("saved v2"),
    ])
    bot = agent(name="p", model=parent_model, sandbox=provider, snapshots=True)
    first = await bot.run("write v1", store=store)
    thread = await open_thread(store, first.thread.id)
    (point,) = await thread.fork_points()
    snapshot = next(e for e in await thread.timeline() if e.type == "snapshot")
    assert snapshot.event_id == point.snapshot_event_id
    assert snapshot.data["provider"] == "local"
    assert snapshot.data["capture_class"] == "filesystem"

    child_id = await thread.fork(snapshot.event_id, provider)
    assert len(provider.sandbox_ids()) == 2
    child_chain = await store.read_chain(child_id)
    fork = child_chain.segments[-1].events[0]
    assert fork.type == "fork"
    mine = await as_store(store)
    restored = await provider.attach(fork.data["sandbox_id"], mine)
    assert await restored.manifest_hash(mine) == snapshot.data["manifest_hash"]

    # The child continues the conversation from the snapshot (the script is played by position).
    child_model = scripted_model([
        use(call("write_file", path="/workspace/plan.txt", content="v1")),
        say("saved v1"),
        use(call("write_file", path="/workspace/plan.txt", content="child")),
        say("child saved"),
    ])
    child_bot = agent(name="p", model=child_model, sandbox=provider, snapshots=True)
    done = await child_bot.run("child edit", store=store, thread=child_id)
    assert done.status == "completed", done
    assert await restored.read_file("/workspace/plan.txt", mine) == b"child"

    parent_sandbox = next(i for i in provider.sandbox_ids() if i != fork.data["sandbox_id"])
    parent_ws = provider.root / "sandboxes" / parent_sandbox / "workspace"
    assert (parent_ws / "plan.txt").read_text() == "v1"  # the child never touched it
    second = await bot.run("write v2", store=store, thread=first.thread.id)
    assert second.status == "completed"
    assert (parent_ws / "plan.txt").read_text() == "parent v2"
    assert await restored.read_file("/workspace/plan.txt", mine) == b"child"
    assert len(await (await open_thread(store, first.thread.id)).fork_points()) == 2


async def test_memory_is_saved_by_one_run_and_found_by_the_next_for_that_user_only(
    store: Store,
) -> None:
    saver = agent(name="helper", memory=local_memory(), model=scripted_model([
        use(call("save_memory", text="Alice drinks tea, not coffee.")), say("noted")]))
    await saver.run("remember", store=store, principal=ALICE)

    def searcher() -> Any:
        return agent(name="helper", memory=local_memory(), model=scripted_model([
            use(call("search_memory", query="tea")), say("found")]))

    found = await searcher().run("what do I drink?", store=store, principal=ALICE)
    events = await (await open_thread(store, found.thread.id, principal=ALICE)).timeline()
    (hit,) = results(events)
    assert "Alice drinks tea" in hit["preview"]
    other = await searcher().run("what do I drink?", store=store, principal=BOB)
    events = await (await open_thread(store, other.thread.id, principal=BOB)).timeline()
    (miss,) = results(events)
    assert "Alice" not in miss["preview"]
    save = next(t for t in saver.tools if t.name == "save_memory")
    assert save.effect == "idempotent"


def test_setup_refuses_what_a_run_could_not_keep(provider: LocalSandbox) -> None:
    model = scripted_model([say("hi")])
    inside = tool(name="inside", description="d", input=Label, execute=_noop, runs="sandbox")
    with pytest.raises(ConfigError) as err:
        agent(name="a", model=model, tools=[inside])
    assert err.value.code == "invalid_config"
    bash = tool(name="bash", description="mine", input=Label, execute=_noop)
    with pytest.raises(ConfigError) as err:
        agent(name="a", model=model, tools=[bash], sandbox=provider)
    assert err.value.code == "duplicate_name"
    assert [t.name for t in agent(name="a", model=model, sandbox=object()).tools] == []

    class Open(LocalSandbox):
        @property
        def info(self) -> SandboxInfo:
            return SandboxInfo("open", "unenforced", (), "confirmed", "final", "final")

    open_net = Open(provider.root, provider.limits)
    local_tool = tool(name="mine", description="d", input=Label, execute=_noop,
                      runs="sandbox", effect="sandbox_local")
    with pytest.raises(ConfigError) as err:
        agent(name="a", model=model, tools=[local_tool], sandbox=open_net)
    assert err.value.code == "egress_policy_unsupported"
    assert {t.effect for t in agent(name="a", model=model, sandbox=open_net).tools} == {
        "unguarded"}


async def _noop(args: Label, ctx: Any) -> str:
    return "ok"


async def test_in_doubt_calls_park_when_no_sandbox_can_answer(
    store: Store, provider: LocalSandbox
) -> None:
    """No ledger row for the branch (the call never reached a sandbox, or the thread came from
    another store), or a sandbox that vanished: nothing can prove the command gone, so park."""
    import shutil

    from threads import EffectUnknown

    async def before_any_sandbox(args: Label, ctx: Any) -> str:
        raise EffectUnknown("lost before the sandbox was even made")

    async def sandbox_vanishes(args: Label, ctx: Any) -> str:
        await (await ctx.sandbox.exec(["true"])).wait()
        shutil.rmtree(provider.root / "sandboxes")
        raise EffectUnknown("lost, and its sandbox with it")

    for execute in (before_any_sandbox, sandbox_vanishes):
        doubtful = tool(name="doubtful", description="d", input=Label, execute=execute,
                        runs="sandbox", effect="sandbox_local")
        bot = agent(name="d", model=scripted_model([use(call("doubtful", name="x"))]),
                    tools=[doubtful], sandbox=provider)
        result = await bot.run("go", store=store)
        assert result.status == "parked", (execute.__name__, result)
        assert result.reason == "effect_unknown"


async def test_a_snapshot_a_kill_left_pending_is_settled_by_the_next_run(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    """A kill right after the provider made a turn-end snapshot, before its ledger row went
    live, leaves the row ``pending``; gc never touches one. The next run of the branch settles
    it at recovery even though that run never uses the sandbox: found, so released (it was
    never recorded in the log), and nothing of it is left on disk."""
    store = sqlite(tmp_path / "store")
    model = scripted_model([
        use(call("write_file", path="/workspace/a.txt", content="x")), say("one"), say("two"),
    ])
    bot = agent(name="coder", model=model, sandbox=provider)
    first = await bot.run("go", store=store, principal=ALICE)
    assert first.status == "completed"
    root = await store.root_branch(first.thread.id)
    resources = resources_of(store)
    (working,) = [r for r in await resources.resources(owner_branch_id=root.branch_id)
                  if r.kind == "sandbox" and r.state == "live"]
    assert working.ref is not None
    killed = await store.acquire_lease(root.branch_id, "killed-mid-snapshot", 60_000)
    key = uuid7(store.clock.now_ms())
    await resources.resource_pending(operation_key=key, tenant_id=ALICE.tenant,
                                     provider="local", kind="snapshot", lease=killed)
    mine = await as_store(store)
    session = await provider.attach(working.ref, mine)
    await session.snapshot(key, mine)  # made; the process dies before recording it
    await store.release_lease(killed)
    assert await provider.lookup("snapshot", key, mine) is not None

    # the next run of the thread answers without the sandbox
    second = await bot.run("again", thread=first.thread.id, store=store, principal=ALICE)
    assert second.status == "completed"
    (row,) = [r for r in await resources.resources(owner_branch_id=root.branch_id)
              if r.operation_key == key]
    assert row.state == "released"  # the old code left it pending for good
    assert await provider.lookup("snapshot", key, mine) is None
    await store.close()
