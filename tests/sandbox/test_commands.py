"""Commands, termination proofs and snapshots of the local sandbox, with real processes."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from namespaces import live_members

from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxError
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.procs import is_alive


async def test_output_streams_and_stdin(provider: LocalSandbox) -> None:
    session = await provider.create("stream", CTX)
    run = await session.exec(
        ["sh", "-c", "cat; for i in 1 2 3; do echo line$i; done; echo oops >&2; exit 3"],
        CTX, stdin=b"from stdin\n",
    )
    chunks = [chunk async for chunk in run.stdout()]
    result = await run.collect()
    assert b"".join(chunks) == result.stdout == b"from stdin\nline1\nline2\nline3\n"
    assert result.stderr == b"oops\n"
    assert result.exit_code == 3


async def test_terminate_from_the_record_alone_proves_every_process_gone(
    provider: LocalSandbox,
) -> None:
    session = await provider.create("term", CTX)
    # A background child that escapes the shell's session and process group.
    run = await session.exec(
        ["sh", "-c", "setsid sleep 300 & (sleep 300 &) ; sleep 300"], CTX, process_key="b:c1"
    )
    await asyncio.sleep(0.3)
    record = session.records.read("b:c1")
    assert record is not None
    assert record.state == "running"
    assert record.pid_namespace
    members = live_members(record.pid_namespace)
    assert len(members) >= 4  # init, sh, and the sleeps

    # Recovery in another process knows only the directory: a fresh provider object.
    fresh = await LocalSandbox(provider.root, provider.limits).attach(session.id, CTX)
    assert await fresh.terminate("b:c1", CTX) == "terminated"
    assert live_members(record.pid_namespace) == []
    assert record.init is not None
    assert not is_alive(record.init)
    assert await run.wait() == -9
    assert await fresh.terminate("b:c1", CTX) == "already_exited"
    assert await fresh.terminate("never-started", CTX) == "already_exited"


async def test_a_timeout_stops_the_command(provider: LocalSandbox) -> None:
    session = await provider.create("timeout", CTX)
    run = await session.exec(["sleep", "30"], CTX, process_key="b:t", timeout_ms=200)
    with pytest.raises(SandboxError) as err:
        await run.wait()
    assert err.value.code == "timeout"
    record = session.records.read("b:t")
    assert record is not None
    assert record.init is not None
    assert not is_alive(record.init)


async def test_snapshot_restores_exactly_and_forks_are_independent(
    provider: LocalSandbox,
) -> None:
    parent = await provider.create("parent", CTX)
    await parent.write_file("/workspace/src/main.py", b"print('v1')\n", CTX)
    await (await parent.exec(["sh", "-c", "chmod +x src/main.py; ln -s src/main.py run"],
                             CTX)).collect()
    snap = await parent.snapshot("snap-1", CTX)
    assert snap.manifest_hash == await parent.manifest_hash(CTX)

    child = await provider.restore(snap, "child", CTX)
    assert child.id != parent.id
    assert await child.manifest_hash(CTX) == snap.manifest_hash
    assert await child.read_file("/workspace/run", CTX) == b"print('v1')\n"
    await child.write_file("/workspace/src/main.py", b"print('child')\n", CTX)
    await (await child.exec(["rm", "run"], CTX)).collect()
    assert await parent.manifest_hash(CTX) == snap.manifest_hash
    assert await parent.read_file("/workspace/src/main.py", CTX) == b"print('v1')\n"

    # Same content, same archive: a second snapshot of an unchanged tree shares its bytes.
    again = await parent.snapshot("snap-2", CTX)
    assert again.manifest_hash == snap.manifest_hash
    archives = list((provider.root / "snapshots" / "archives").glob("*.tar"))
    assert len(archives) == 1
    assert await provider.release("snapshot", snap.snapshot_id, CTX) == "released"
    assert len(list((provider.root / "snapshots" / "archives").glob("*.tar"))) == 1
    assert await provider.release("snapshot", again.snapshot_id, CTX) == "released"
    assert list((provider.root / "snapshots" / "archives").glob("*.tar")) == []
    assert await provider.release("snapshot", again.snapshot_id, CTX) == "already_gone"
    with pytest.raises(SandboxError) as err:
        await provider.restore(snap, "late", CTX)
    assert err.value.code == "snapshot_missing"


async def test_a_tampered_archive_is_refused_and_its_sandbox_released(
    provider: LocalSandbox,
) -> None:
    session = await provider.create("tamper", CTX)
    await session.write_file("/workspace/a", b"original", CTX)
    snap = await session.snapshot("s", CTX)
    # Same archive name, other bytes that still hash right: re-point the ref at a new archive.
    import json

    other = await provider.create("other", CTX)
    await other.write_file("/workspace/a", b"tampered", CTX)
    forged = await other.snapshot("forged", CTX)
    ref = provider.root / "snapshots" / "refs" / f"{snap.snapshot_id}.json"
    forged_ref = json.loads((ref.parent / f"{forged.snapshot_id}.json").read_text())
    ref.write_text(json.dumps({**json.loads(ref.read_text()), "archive": forged_ref["archive"]}))
    before = set(provider.sandbox_ids())
    with pytest.raises(SandboxError) as err:
        await provider.restore(snap, "restore", CTX)
    assert err.value.code == "snapshot_manifest_mismatch"
    assert set(provider.sandbox_ids()) == before  # the scratch sandbox was released


async def test_snapshot_refuses_while_a_command_runs(provider: LocalSandbox) -> None:
    session = await provider.create("busy", CTX)
    run = await session.exec(["sleep", "30"], CTX, process_key="b:busy")
    with pytest.raises(SandboxError) as err:
        await session.snapshot("s", CTX)
    assert err.value.code == "not_quiescent"
    await session.terminate("b:busy", CTX)
    await run.wait()
    await session.snapshot("s", CTX)


async def test_release_stops_commands_and_removes_the_sandbox(
    provider: LocalSandbox, tmp_path: Path
) -> None:
    session = await provider.create("rel", CTX)
    await session.exec(["sleep", "30"], CTX, process_key="b:r")
    record = session.records.read("b:r")
    assert await provider.release("sandbox", session.id, CTX) == "released"
    assert record is not None
    assert record.init is not None
    assert not is_alive(record.init)
    assert provider.sandbox_ids() == []
    assert await provider.release("sandbox", session.id, CTX) == "already_gone"
    with pytest.raises(SandboxError) as err:
        await provider.attach(session.id, CTX)
    assert err.value.code == "not_found"
    assert await provider.lookup("sandbox", "rel", CTX) is None
