"""What a command in the local sandbox can't do: each escape is tried for real."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path

import pytest

from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxError
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.local_session import LocalSession


def _exists(path: str) -> bool:
    return Path(path).exists()


async def _run(session: LocalSession, script: str) -> tuple[int, str, str]:
    result = await (await session.exec(["sh", "-c", script], CTX)).collect()
    return result.exit_code, result.stdout.decode(), result.stderr.decode()


async def test_no_network_even_to_host_loopback(provider: LocalSandbox) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    try:
        session = await provider.create("net", CTX)
        probe = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {port}), timeout=2)\n"
            "    print('CONNECTED')\n"
            "except OSError as e:\n"
            "    print('refused', e)\n"
            "try:\n"
            "    socket.getaddrinfo('pypi.org', 443)\n"
            "    print('RESOLVED')\n"
            "except OSError as e:\n"
            "    print('no dns', e)\n"
        )
        await session.write_file("/workspace/probe.py", probe.encode(), CTX)
        code, out, err = await _run(session, "python3 probe.py; cat /proc/net/dev")
        assert code == 0, err
        assert "CONNECTED" not in out
        assert "refused" in out
        assert "RESOLVED" not in out
        interfaces = [line.split(":")[0].strip() for line in out.splitlines() if ":" in line]
        assert [i for i in interfaces if i and i != "lo" and not i.startswith("Inter")] == []
        server.settimeout(0.2)
        with pytest.raises(TimeoutError):
            server.accept()  # nothing arrived on the host side
    finally:
        server.close()


async def test_host_environment_never_reaches_the_command(
    provider: LocalSandbox, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret-should-not-leak")
    session = await provider.create("env", CTX)
    code, out, _ = await _run(session, "env; cat /proc/1/environ | tr '\\0' '\\n'")
    assert code == 0
    assert "sk-test-secret" not in out
    assert "OPENAI_API_KEY" not in out
    names = {line.split("=", 1)[0] for line in out.splitlines() if "=" in line}
    assert names <= {"PATH", "HOME", "PWD", "SHLVL", "_"}
    # What the caller passes explicitly is all it gets.
    result = await (await session.exec(["env"], CTX, env={"ONLY": "this"})).collect()
    assert b"ONLY=this" in result.stdout
    assert b"sk-test" not in result.stdout


async def test_cannot_write_outside_the_workspace(provider: LocalSandbox, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    session = await provider.create("fs", CTX)
    script = (
        f"echo x > {outside}/escaped; "
        "echo x > /usr/escaped; "
        "echo x > /workspace/../escaped; "
        "touch /etc/escaped; "
        f"ls {tmp_path}; "
        "echo inside > /workspace/ok"
    )
    _code, out, err = await _run(session, script)
    assert list(outside.iterdir()) == []
    assert not _exists("/usr/escaped")
    assert not (session.folder / "escaped").exists()
    assert not (session.folder.parent / "escaped").exists()
    assert not _exists("/etc/escaped")
    assert "outside" not in out  # the host's directories are not even visible
    assert (session.workspace / "ok").read_text() == "inside\n"
    assert "Read-only file system" in err or "Permission denied" in err or "No such file" in err


async def test_file_calls_refuse_paths_and_links_leaving_the_workspace(
    provider: LocalSandbox,
) -> None:
    session = await provider.create("paths", CTX)
    for bad in ("relative.txt", "/workspace/../etc/passwd", "/etc/passwd", "/workspace//x",
                "/workspace/./x"):
        with pytest.raises(SandboxError) as err:
            await session.read_file(bad, CTX)
        assert err.value.code == "invalid_path", bad
    await _run(session, "ln -s /etc/passwd /workspace/link; ln -s / /workspace/root")
    with pytest.raises(SandboxError) as err:
        await session.read_file("/workspace/link", CTX)
    assert err.value.code == "permission_denied"
    with pytest.raises(SandboxError) as err:
        await session.write_file("/workspace/root/tmp/escaped", b"x", CTX)
    assert err.value.code == "permission_denied"
    assert not _exists("/tmp/escaped")
    with pytest.raises(SandboxError) as err:
        await session.read_file("/workspace", CTX)
    assert err.value.code == "is_directory"


async def test_limits_bind_memory_cpu_and_processes(provider: LocalSandbox) -> None:
    session = await provider.create("limits", CTX)
    _, out, _ = await _run(
        session,
        "python3 -c 'b = bytearray(900 * 1024 * 1024); print(\"ALLOCATED\")' 2>&1; echo rc=$?",
    )
    assert "ALLOCATED" not in out
    assert "MemoryError" in out
    from threads.sandbox.limits import pids_enforceable

    if pids_enforceable():
        _code, out, _ = await _run(
            session, "n=0; for i in $(seq 100); do (sleep 3 &) 2>/dev/null && n=$((n+1)); done;"
            " echo started=$n",
        )
        started = int(out.strip().rsplit("=", 1)[1])
        assert started < 100
    tight = LocalSandbox(provider.root, type(provider.limits)(cpu_seconds=1))
    busy = await tight.create("cpu", CTX)
    result = await (await busy.exec(["sh", "-c", "while :; do :; done"], CTX)).collect()
    assert result.exit_code != 0  # killed by SIGXCPU/SIGKILL after one second of CPU


async def test_a_refused_fence_sends_nothing(provider: LocalSandbox) -> None:
    from threads.errors import StoreError
    from threads.sandbox import SandboxContext

    session = await provider.create("fence", CTX)

    async def refuse() -> None:
        raise StoreError("stale_epoch", "lost the lease")

    lost = SandboxContext(refuse)
    with pytest.raises(StoreError):
        await session.exec(["sh", "-c", "echo ran > /workspace/ran"], lost, process_key="k")
    with pytest.raises(StoreError):
        await session.write_file("/workspace/w", b"x", lost)
    await asyncio.sleep(0)
    assert not (session.workspace / "ran").exists()
    assert not (session.workspace / "w").exists()
    assert session.records.read("k") is None
    assert os.listdir(session.workspace) == []
