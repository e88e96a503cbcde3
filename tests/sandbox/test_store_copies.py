"""A copy of a store (a backup, a staging copy) shares the original's sandbox root, since the
default root is one per user. Nothing the copy does frees, kills or uses what the original made:
``threads gc`` on the copy leaves the original's live sandbox, its running command and its
workspace alone, and a run of the copy says its sandbox is lost instead of working in the
original's. A run whose sandbox was deleted underneath it says so too, instead of starting on
an empty one.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from sandbox_support import first_writes

from postgres_support import drop_store, fresh_schema, needs_postgres, open_postgres
from threads import agent, open_thread
from threads.clock import FakeClock
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.ledger import DEFAULT_LIFETIME_MS
from threads.sandbox.procs import is_alive
from threads.sandbox.supervisor import Records
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite
from threads.testing.scripted import call, say, scripted_model, use


def _gc(store: Path, sandboxes: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "threads.cli", "gc", "--store", str(store),
         "--sandboxes", str(sandboxes)],
        capture_output=True, text=True, timeout=120, check=False,
    )


def _previews(events: list[Any]) -> list[str]:
    return [e.data["preview"] for e in events if e.type == "tool_result"]


async def _appears(path: Path, task: asyncio.Task[Any]) -> None:
    """Wait (bounded) until the command wrote ``path``; the run must still be going."""
    deadline = time.monotonic() + 60
    while not await asyncio.to_thread(path.exists):
        assert not task.done(), task.result()
        assert time.monotonic() < deadline, f"{path.name} never appeared"
        await asyncio.sleep(0.02)


async def test_gc_of_a_copy_leaves_the_originals_live_sandbox_and_command(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    # The original runs two days ago (its own clock), so a gc reading the system clock finds
    # its sandbox long expired: what a copy's gc sees when its clock is past the expiry.
    then = time.time_ns() // 1_000_000 - 2 * DEFAULT_LIFETIME_MS
    store = sqlite(tmp_path / "store", clock=FakeClock(then))
    model = scripted_model([
        use(call("write_file", path="/workspace/notes.txt", content="kept")), say("noted"),
        use(call("bash", command="echo up > started; read line < go; echo \"$line\" > out")),
        say("done"),
        use(call("read_file", path="/workspace/notes.txt")), say("read"),
    ])
    bot = agent(name="coder", model=model, sandbox=provider)
    first = await bot.run("take notes", store=store)
    assert first.status == "completed", first
    (sandbox_id,) = provider.sandbox_ids()
    workspace = provider.root / "sandboxes" / sandbox_id / "workspace"
    os.mkfifo(workspace / "go")

    running = asyncio.create_task(bot.run("wait for go", thread=first.thread.id, store=store))
    await _appears(workspace / "started", running)
    (record,) = [r for r in Records(workspace.parent / "supervisor").all()
                 if r.state == "running"]
    assert record.init is not None

    shutil.copytree(tmp_path / "store", tmp_path / "copy")  # a backup taken while it runs
    done = await asyncio.to_thread(_gc, tmp_path / "copy", provider.root)
    assert done.returncode == 0, done.stderr
    assert "released 0" in done.stdout, done.stdout
    assert "another store made" in done.stdout, done.stdout
    assert sandbox_id in done.stdout

    assert is_alive(record.init), "the copy's gc killed the original's command"
    assert (workspace / "notes.txt").read_text() == "kept"
    await asyncio.to_thread((workspace / "go").write_text, "hello\n")
    second = await running
    assert second.status == "completed", second
    events = await (await open_thread(store, first.thread.id)).timeline()
    assert _previews(events)[-1] == "exit code 0"  # not "exit code -9": it was never killed
    assert (workspace / "out").read_text() == "hello\n"

    third = await bot.run("read them back", thread=first.thread.id, store=store)
    assert third.status == "completed", third
    events = await (await open_thread(store, first.thread.id)).timeline()
    assert _previews(events)[-1] == "kept"  # the same sandbox, not an empty one
    assert provider.sandbox_ids() == [sandbox_id]
    assert [r.state for r in await resources_of(store).resources()] == ["live"]

    copy = sqlite(tmp_path / "copy")  # the copy's own row is left for an operator
    assert [r.state for r in await resources_of(copy).resources()] == ["unknown"]
    await copy.close()
    await store.close()


async def test_a_run_of_the_copy_never_works_in_the_originals_sandbox(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/notes.txt", "original",  # on either store
                       use(call("write_file", path="/workspace/notes.txt", content="copy's")),
                       use(call("read_file", path="/workspace/notes.txt")), say("ok"))
    first = await bot.run("take notes", store=store)
    await store.close()
    shutil.copytree(tmp_path / "store", tmp_path / "copy")
    (original,) = provider.sandbox_ids()

    copy = sqlite(tmp_path / "copy")
    result = await bot.run("overwrite", thread=first.thread.id, store=copy)
    assert result.status == "completed", result
    lost, after = _previews(await (await open_thread(copy, first.thread.id)).timeline())[-2:]
    assert "permission_denied" in lost
    assert "another store made it" in lost
    assert "does not exist" in after  # the next call runs in a new, empty sandbox of its own
    workspace = provider.root / "sandboxes" / original / "workspace"
    assert (workspace / "notes.txt").read_text() == "original"
    assert len(provider.sandbox_ids()) == 2
    await copy.close()


async def test_a_run_whose_sandbox_was_deleted_says_so(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/notes.txt", "v1",
                       use(call("read_file", path="/workspace/notes.txt")),
                       use(call("read_file", path="/workspace/notes.txt")), say("ok"))
    first = await bot.run("take notes", store=store)
    (gone,) = provider.sandbox_ids()
    shutil.rmtree(provider.root / "sandboxes" / gone)  # deleted outside threads

    second = await bot.run("read", thread=first.thread.id, store=store)
    assert second.status == "completed", second
    lost, after = _previews(await (await open_thread(store, first.thread.id)).timeline())[-2:]
    assert "not_found" in lost
    assert "is lost" in lost
    assert "deleted outside threads" in lost
    assert "does not exist" in after  # the next call runs in a new, empty sandbox
    rows = {r.ref: (r.state, r.release_outcome) for r in await resources_of(store).resources()}
    assert rows[gone] == ("released", "not_found")
    await store.close()


async def test_a_store_is_the_same_owner_where_it_lives_and_another_anywhere_else(
    tmp_path: Path,
) -> None:
    """The identity follows the store's place, not its bytes: reopened (by any path that leads
    there) it is the same; a byte copy, a Postgres schema beside it, another database, are
    others."""
    async def identity(store: Any) -> str:
        try:
            await store.list_threads()  # the directory exists once the store is opened
            return await resources_of(store).owner_identity()
        finally:
            await store.close()

    original = await identity(sqlite(tmp_path / "store"))
    (tmp_path / "link").symlink_to(tmp_path / "store")
    assert await identity(sqlite(tmp_path / "link")) == original
    assert await identity(sqlite(tmp_path / "store" / ".." / "store")) == original
    shutil.copytree(tmp_path / "store", tmp_path / "copy")
    assert await identity(sqlite(tmp_path / "copy")) != original
    memory = sqlite(":memory:")
    assert await resources_of(memory).owner_identity() == await resources_of(
        memory).owner_identity()
    assert await identity(memory) != await identity(sqlite(":memory:"))


@needs_postgres
async def test_a_postgres_store_is_its_cluster_database_and_schema() -> None:
    schema = fresh_schema()
    first = open_postgres(None, schema)
    same = open_postgres(None, schema)
    other = open_postgres(None)
    try:
        mine = await resources_of(first).owner_identity()
        assert await resources_of(same).owner_identity() == mine
        assert await resources_of(other).owner_identity() != mine
    finally:
        for store in (first, same, other):
            await store.close()
        await drop_store(first)
        await drop_store(other)
