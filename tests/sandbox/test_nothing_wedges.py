"""Nothing in a sandbox tool wedges a run: a FIFO, a socket or a device in the workspace is
refused by every file call with a coded error (never opened blocking), and a run whose command
blocks forever ends ``cancelled`` once another process cancels it, its command proven gone.

Each call that would block on the old code is bounded here (``BOUND_S``), and a FIFO a refused
call might still be blocked on is opened for writing afterwards, so the test ends either way.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
import threading
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from sandbox_support import first_writes

from threads import open_thread
from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxError, local_session, snapshot_store
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.procs import is_alive
from threads.sandbox.supervisor import Records
from threads.store.sqlite import sqlite
from threads.testing.scripted import call, say, use

BOUND_S = 20.0  # far past what a refusal takes; only a wedged call reaches it
T = TypeVar("T")


async def bounded(call: Awaitable[T]) -> T:
    try:
        return await asyncio.wait_for(call, BOUND_S)
    except TimeoutError:
        raise AssertionError("the call blocked (it waited on a non-regular file)") from None


@contextlib.contextmanager
def specials(workspace: Path) -> Iterator[dict[str, Path]]:
    """A FIFO, a listening unix socket and a character device (/dev/null's) in the workspace;
    afterwards the FIFO is opened for writing, releasing any reader stuck on it."""
    made = {"fifo": workspace / "pipe", "socket": workspace / "sock",
            "device": workspace / "null"}
    os.mkfifo(made["fifo"])
    listener = socket.socket(socket.AF_UNIX)
    with contextlib.chdir(workspace):  # the full path is longer than a socket address holds
        listener.bind(made["socket"].name)
    listener.listen()
    os.mknod(made["device"], stat.S_IFCHR | 0o666, os.makedev(1, 3))
    try:
        yield made
    finally:
        with contextlib.suppress(OSError):
            os.close(os.open(made["fifo"], os.O_RDWR | os.O_NONBLOCK))
        listener.close()


async def test_every_file_call_refuses_what_is_not_a_regular_file(
    provider: LocalSandbox,
) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    session = await provider.create("specials", CTX)
    await session.write_file("/workspace/ok.txt", b"fine", CTX)
    with specials(session.workspace) as made:
        for kind, path in made.items():
            inner = f"/workspace/{path.name}"
            with pytest.raises(SandboxError) as read:
                await bounded(session.read_file(inner, CTX))
            assert read.value.code == "permission_denied", kind
            assert "regular files only" in read.value.message
            with pytest.raises(SandboxError) as written:
                await bounded(session.write_file(inner, b"x", CTX))
            assert written.value.code == "permission_denied", kind
            assert not stat.S_ISREG(path.lstat().st_mode)  # left as it was
        listed = await bounded(session.list_files("/workspace", CTX))
        assert [e.path for e in listed] == ["/workspace/ok.txt"]
        before = await bounded(session.manifest_hash(CTX))
        snapshot = await bounded(session.snapshot("with-specials", CTX))
        assert snapshot.manifest_hash == before
        # a link to one of them is refused the same way
        (session.workspace / "link").symlink_to("pipe")
        with pytest.raises(SandboxError) as linked:
            await bounded(session.read_file("/workspace/link", CTX))
        assert linked.value.code == "permission_denied"


async def test_the_read_file_tool_answers_a_fifo_with_a_coded_error(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/a.txt", "a",
                       use(call("read_file", path="/workspace/pipe")), say("refused"))
    first = await bot.run("make the sandbox", store=store)
    (sandbox_id,) = provider.sandbox_ids()
    workspace = provider.root / "sandboxes" / sandbox_id / "workspace"
    with specials(workspace):
        second = await bounded(bot.run("read the pipe", thread=first.thread.id, store=store))
    assert second.status == "completed", second
    events = await (await open_thread(store, first.thread.id)).timeline()
    preview = [e.data for e in events if e.type == "tool_result"][-1]
    assert preview["is_error"] is True
    assert "permission_denied" in preview["preview"]
    assert "FIFO" in preview["preview"]
    await store.close()


def _cancel(store: Path, thread: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "threads.cli", "cancel", thread, "--store", str(store)],
        capture_output=True, text=True, timeout=60, check=False,
    )


@pytest.mark.parametrize("command", [
    "touch /workspace/started; sleep infinity",
    "touch /workspace/started; cat /workspace/pipe",  # a FIFO no one writes
])
async def test_a_cancel_from_another_process_stops_a_blocked_command(
    tmp_path: Path, provider: LocalSandbox, command: str
) -> None:
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/a.txt", "a",
                       use(call("bash", command=command, timeout_ms=3_600_000)), say("never"))
    first = await bot.run("make the sandbox", store=store)
    (sandbox_id,) = provider.sandbox_ids()
    workspace = provider.root / "sandboxes" / sandbox_id / "workspace"
    os.mkfifo(workspace / "pipe")
    running = asyncio.create_task(bot.run("block", thread=first.thread.id, store=store))
    deadline = time.monotonic() + BOUND_S
    while not await asyncio.to_thread((workspace / "started").exists):
        assert not running.done(), running.result()
        assert time.monotonic() < deadline, "the command never started"
        await asyncio.sleep(0.02)
    (record,) = [r for r in Records(workspace.parent / "supervisor").all()
                 if r.state == "running"]

    queued = await asyncio.to_thread(_cancel, tmp_path / "store", first.thread.id)
    assert queued.returncode == 0, queued.stderr
    assert "queued" in queued.stdout  # the run holds the thread: another process can't append
    result: Any = await bounded(running)
    assert result.status == "cancelled", result
    assert record.init is not None
    assert not is_alive(record.init)  # the command was stopped, not left running
    events = await (await open_thread(store, first.thread.id)).timeline()
    stopped = [e.data for e in events if e.type == "tool_result"][-1]
    assert stopped["is_error"] is True
    assert "may have partly run" in stopped["preview"]
    assert [e.type for e in events][-2:] == ["cancelled", "turn_completed"]
    await store.close()


@pytest.mark.timed
async def test_a_file_call_that_hangs_ends_at_its_deadline(
    provider: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker thread can't be interrupted, so a file call's deadline is what keeps a run
    from waiting on a host filesystem that stopped answering: past it, ``timeout`` (which the
    tools record as in doubt, settled by proof)."""
    session = await provider.create("hangs", CTX)
    released = threading.Event()
    monkeypatch.setattr(local_session, "FILE_OP_S", 0.05)
    monkeypatch.setattr(session, "_read", lambda path: released.wait(BOUND_S))
    try:
        with pytest.raises(SandboxError) as hung:
            await bounded(session.read_file("/workspace/x", CTX))
        assert hung.value.code == "timeout"
    finally:
        released.set()


async def test_a_snapshot_store_locked_by_a_frozen_holder_wedges_no_snapshot(
    provider: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process froze while it held the snapshot store's lock (mid-keep): a snapshot
    and a release wait for it at most ``LOCK_S``, then answer ``unavailable``."""
    monkeypatch.setattr(snapshot_store, "LOCK_S", 0.2)
    session = await provider.create("locked", CTX)
    await session.write_file("/workspace/a", b"a", CTX)
    taken = await session.snapshot("first", CTX)
    lock = provider.root / "snapshots" / ".lock"
    holder = (  # holds the lock until killed, like a keeper SIGSTOPped mid-keep
        "import fcntl, time\n"
        f"f = open({str(lock)!r}, 'a'); fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('held', flush=True); time.sleep(600)"
    )
    frozen = await asyncio.create_subprocess_exec(
        sys.executable, "-c", holder, stdout=asyncio.subprocess.PIPE
    )
    try:
        assert frozen.stdout is not None
        assert await frozen.stdout.readline() == b"held\n"
        for attempt in (session.snapshot("second", CTX),
                        provider.release("snapshot", taken.snapshot_id, CTX)):
            with pytest.raises(SandboxError) as waited:
                await bounded(attempt)
            assert waited.value.code == "unavailable"
    finally:
        frozen.kill()
        await frozen.wait()
    assert await provider.release("snapshot", taken.snapshot_id, CTX) == "released"
