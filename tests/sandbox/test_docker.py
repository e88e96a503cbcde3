"""The Docker sandbox against a real dockerd: its hardening, files, commands and termination.

The engine is the one ``DOCKER_HOST`` (unix://) or /var/run/docker.sock names; failing that, on
a machine with Debian's ``docker.io`` and root, the module starts its own dockerd in a temporary
directory (vfs storage, no iptables, no bridge) and stops it after. The image is built offline:
``docker import`` of a root filesystem made from the host's busybox-static. When no engine can
run, every test here skips and says why.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sandbox_support import as_store

from threads.docker import DockerSandbox, container_name, docker
from threads.errors import StoreError
from threads.log.ids import uuid7
from threads.log.lines import make_header
from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxContext, SandboxError
from threads.sandbox.gc import collect
from threads.sandbox.ledger import Owner
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite

IMAGE = "threads-busybox:test"
BUSYBOX = Path("/bin/busybox")


def _answers(socket: Path) -> bool:
    if not socket.exists():
        return False
    done = subprocess.run(["docker", "-H", f"unix://{socket}", "version"], capture_output=True,
                          timeout=20, check=False)
    return done.returncode == 0


def _start_dockerd(root: Path) -> tuple[subprocess.Popen[bytes], Path]:
    socket = root / "docker.sock"
    with (root / "log.txt").open("wb") as log:
        proc = _spawn_dockerd(root, socket, log)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        if _answers(socket):
            return proc, socket
        time.sleep(0.2)
    proc.terminate()
    proc.wait(timeout=60)
    tail = (root / "log.txt").read_text(errors="replace")[-400:]
    pytest.skip(f"dockerd could not start on this machine: {tail}")


def _spawn_dockerd(root: Path, socket: Path, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        ["dockerd", "--data-root", str(root / "data"), "--exec-root", str(root / "exec"),
         "--pidfile", str(root / "pid"), "-H", f"unix://{socket}", "--storage-driver", "vfs",
         "--iptables=false", "--ip6tables=false", "--bridge=none", "--ip-forward=false",
         "--ip-masq=false"],
        stdout=subprocess.DEVNULL, stderr=log,
    )


def _image(socket: Path, root: Path) -> None:
    if not BUSYBOX.exists():
        pytest.skip("no /bin/busybox to build the test image from (apt-get install busybox-static)")
    tree = root / "rootfs"
    for d in ("bin", "workspace", "tmp", "etc", "run/threads"):
        (tree / d).mkdir(parents=True, exist_ok=True)
    shutil.copy(BUSYBOX, tree / "bin" / "busybox")
    applets = subprocess.run([str(BUSYBOX), "--list"], capture_output=True, text=True,
                             check=True).stdout.split()
    for name in applets:
        link = tree / "bin" / name
        if not link.exists():
            link.symlink_to("busybox")
    (tree / "etc" / "passwd").write_text("sandbox:x:1000:1000::/workspace:/bin/sh\n")
    archive = root / "rootfs.tar"
    with tarfile.open(archive, "w") as tar:
        def owner(info: tarfile.TarInfo) -> tarfile.TarInfo:
            info.uid = info.gid = 1000 if info.name.startswith("./workspace") else 0
            return info
        tar.add(tree, arcname=".", filter=owner)
    subprocess.run(["docker", "-H", f"unix://{socket}", "import", str(archive), IMAGE],
                   capture_output=True, check=True, timeout=120)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    if shutil.which("docker") is None:
        pytest.skip("no docker client on this machine (apt-get install docker.io)")
    host = os.environ.get("DOCKER_HOST", "")
    candidates = [Path(host[len("unix://"):])] if host.startswith("unix://") else []
    candidates.append(Path("/var/run/docker.sock"))
    existing = next((c for c in candidates if _answers(c)), None)
    root = tmp_path_factory.mktemp("dockerd")
    proc = None
    if existing is None:
        if shutil.which("dockerd") is None or os.geteuid() != 0:
            pytest.skip("no dockerd answers and none can be started here (needs docker.io, root)")
        proc, existing = _start_dockerd(root)
    try:
        _image(existing, root)
        yield existing
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(timeout=60)


@pytest.fixture
async def provider(engine: Path) -> AsyncIterator[DockerSandbox]:
    sandbox = docker(IMAGE, socket=str(engine), memory_mb=128, pids=64)
    yield sandbox
    await sandbox.close()


async def test_create_is_idempotent_by_key_and_named_after_it(provider: DockerSandbox) -> None:
    first = await provider.create("op-1", CTX)
    again = await provider.create("op-1", CTX)
    try:
        assert first.id == again.id == container_name("op-1")
        assert await provider.lookup("sandbox", "op-1", CTX) == first.id
        assert await provider.lookup("sandbox", "op-2", CTX) is None
    finally:
        assert await provider.release("sandbox", first.id, CTX) == "released"
    assert await provider.release("sandbox", first.id, CTX) == "already_gone"


async def test_hardened_no_network_no_root_no_writes_outside(provider: DockerSandbox) -> None:
    session = await provider.create("hard", CTX)
    try:
        script = ("id -u; cat /proc/self/status | grep CapEff; ls /sys/class/net;"
                  " touch /escaped 2>&1; touch /bin/escaped 2>&1; echo ok > /workspace/ok;"
                  " wget -T 2 -q -O- http://1.1.1.1 2>&1 || echo no-net")
        result = await (await session.exec(["sh", "-c", script], CTX)).collect()
        out = result.stdout.decode()
        assert out.splitlines()[0] == "1000"
        assert "CapEff:\t0000000000000000" in out
        assert "eth0" not in out
        assert out.count("Read-only file system") == 2
        assert "no-net" in out
        assert await session.read_file("/workspace/ok", CTX) == b"ok\n"
    finally:
        await provider.release("sandbox", session.id, CTX)


async def test_files_commands_and_termination(provider: DockerSandbox) -> None:
    session = await provider.create("files", CTX)
    try:
        await session.write_file("/workspace/src/a.txt", b"hello", CTX)
        run = await session.exec(["sh", "-c", "cat src/a.txt; echo e >&2; exit 4"], CTX,
                                 env={"ONLY": "this"})
        result = await run.collect()
        assert (result.exit_code, result.stdout, result.stderr) == (4, b"hello", b"e\n")
        piped = await (await session.exec(["cat"], CTX, stdin=b"in\n")).collect()
        assert piped.stdout == b"in\n"
        paths = [e.path for e in await session.list_files("/workspace", CTX)]
        assert "/workspace/src/a.txt" in paths
        with pytest.raises(SandboxError) as err:
            await session.read_file("/workspace/../etc/passwd", CTX)
        assert err.value.code == "invalid_path"

        await session.exec(["sh", "-c", "sleep 300 & sleep 300"], CTX, process_key="b:c")
        assert await session.terminate("b:c", CTX) == "terminated"
        ps = await (await session.exec(["ps"], CTX)).collect()
        assert b"sleep 300" not in ps.stdout
        slow = await session.exec(["sleep", "30"], CTX, timeout_ms=300)
        with pytest.raises(SandboxError) as err:
            await slow.wait()
        assert err.value.code == "timeout"
    finally:
        await provider.release("sandbox", session.id, CTX)


async def test_a_refused_fence_sends_nothing(provider: DockerSandbox, engine: Path) -> None:
    async def lost() -> None:
        raise StoreError("stale_epoch", "lease lost")

    with pytest.raises(StoreError):
        await provider.create("fenced", SandboxContext(lost))
    assert await provider.lookup("sandbox", "fenced", CTX) is None


async def test_gc_removes_orphaned_containers_and_nothing_a_row_still_names(
    provider: DockerSandbox, engine: Path, tmp_path: Path
) -> None:
    """Four labelled containers: a live row's, a pending row's, a released row's (its release
    never reached the engine) and one with no row in this store (another store's, or this
    store's rows were lost). gc removes only the released one and lists the row-less one; the
    CLI does the same with --docker, and removes the row-less ones with
    --docker-remove-unknown."""
    store = sqlite(tmp_path / "store")  # the system clock, as the gc process reads it
    resources = resources_of(store)
    now = store.clock.now_ms()
    header = make_header(uuid7(now), uuid7(now), now)
    await store.create_branch(header, tenant_id="acme")
    lease = await store.acquire_lease(header.branch_id, "w1", 30_000)

    async def fence() -> None:
        await store.check_lease(lease)

    owner = Owner(resources, provider, store.clock, "acme", lambda: lease, SandboxContext(fence))
    live = await owner.sandbox_session()
    pending, released, rowless = (uuid7(now) for _ in range(3))
    for key in (pending, released):
        await resources.resource_pending(operation_key=key, tenant_id="acme",
                                         provider="docker", kind="sandbox", lease=lease)
    await resources.resource_move(released, "not_found", lease=lease)
    mine = await as_store(store)  # as this store's runs made them
    made = {key: (await provider.create(key, mine)).id for key in (pending, released, rowless)}
    try:
        report = await collect(resources, {"docker": provider}, store.clock)
        assert report.orphans_removed == [made[released]]
        assert made[rowless] in report.foreign_left  # (other row-less ones may be on the engine)
        names = {name for name, _, _ in await provider.labelled(CTX)}
        assert {live.id, made[pending], made[rowless]} <= names
        assert made[released] not in names

        orphan = (await provider.create(uuid7(now), mine)).id  # another row-less container
        await store.close()

        def gc(*extra: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [sys.executable, "-m", "threads.cli", "gc", "--store", str(tmp_path / "store"),
                 "--sandboxes", str(tmp_path / "local"), "--docker", str(engine), *extra],
                capture_output=True, text=True, timeout=120, check=False,
            )

        done = await asyncio.to_thread(gc)
        assert done.returncode == 0, done.stderr
        assert "orphans removed (their ledger row is released): 0" in done.stdout
        [left] = [line for line in done.stdout.splitlines() if "has no row for" in line]
        assert orphan in left
        assert made[rowless] in left
        assert {orphan, made[rowless]} <= {name for name, _, _ in await provider.labelled(CTX)}
        done = await asyncio.to_thread(gc, "--docker-remove-unknown")
        assert done.returncode == 0, done.stderr
        names = {name for name, _, _ in await provider.labelled(CTX)}
        assert not names & {orphan, made[rowless]}
        assert {live.id, made[pending]} <= names
    finally:
        for ref in (live.id, made[pending]):
            await provider.release("sandbox", ref, mine)
        await store.close()


async def test_a_ref_it_did_not_make_is_never_attached_or_removed(
    provider: DockerSandbox, engine: Path
) -> None:
    """A ledger row (or a log) naming another container on the engine, or a URL path: the
    provider refuses it as unknown, and the bystander container is still there after."""

    def docker_cli(*argv: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(["docker", "-H", f"unix://{engine}", *argv], capture_output=True,
                              text=True, timeout=120, check=False)

    bystander = f"bystander-{uuid7(0)[-12:]}"
    made = await asyncio.to_thread(docker_cli, "create", "--name", bystander, IMAGE, "true")
    assert made.returncode == 0, made.stderr
    try:
        for ref in (bystander, f"{container_name('x')}/../{bystander}", "threads-" + "A" * 32):
            with pytest.raises(SandboxError) as attached:
                await provider.attach(ref, CTX)
            with pytest.raises(SandboxError) as released:
                await provider.release("sandbox", ref, CTX)
            assert attached.value.code == released.value.code == "not_found", ref
        still = await asyncio.to_thread(docker_cli, "inspect", bystander)
        assert still.returncode == 0, still.stderr
    finally:
        await asyncio.to_thread(docker_cli, "rm", "-f", bystander)


async def test_another_stores_container_is_never_attached_found_or_removed(
    provider: DockerSandbox,
) -> None:
    """A copy of a store on the same engine holds the original's rows, so it names the
    original's containers; each carries the store that made it, and no other store attaches,
    finds, kills or removes it."""
    original, copy = (replace(CTX, owner=owner) for owner in ("a" * 64, "b" * 64))
    made = await provider.create("op-owned", original)
    try:
        for act in (provider.attach(made.id, copy), provider.release("sandbox", made.id, copy),
                    provider.create("op-owned", copy)):
            with pytest.raises(SandboxError) as refused:
                await act
            assert refused.value.code == "permission_denied"
        assert await provider.lookup("sandbox", "op-owned", copy) is None
        assert await provider.lookup("sandbox", "op-owned", original) == made.id
        result = await (await made.exec(["echo", "alive"], original)).collect()
        assert result.stdout == b"alive\n"  # never stopped
        owners = {name: owner for name, _, owner in await provider.labelled(CTX)}
        assert owners[made.id] == "a" * 64
    finally:
        assert await provider.release("sandbox", made.id, original) == "released"


async def test_a_fifo_in_the_container_wedges_no_file_call(provider: DockerSandbox) -> None:
    session = await provider.create("fifo", CTX)
    try:
        made = await (await session.exec(["mkfifo", "/workspace/pipe"], CTX)).collect()
        assert made.exit_code == 0, made.stderr
        with pytest.raises(SandboxError) as refused:
            await asyncio.wait_for(session.read_file("/workspace/pipe", CTX), 60)
        assert refused.value.code == "permission_denied"
        listed = await asyncio.wait_for(session.list_files("/workspace", CTX), 60)
        assert [e.path for e in listed] == []  # not workspace content
        # The engine replaces whatever is at the path (it never opens the FIFO).
        await asyncio.wait_for(session.write_file("/workspace/pipe", b"now a file", CTX), 60)
        assert await session.read_file("/workspace/pipe", CTX) == b"now a file"
    finally:
        await provider.release("sandbox", session.id, CTX)
