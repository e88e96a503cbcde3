"""Every way an artifact at rest can be wrong, for every reader: each gets a coded error
naming the artifact, none blocks, none reads without bound, none raises a raw ``OSError``.

The store holds two threads. One was run by an agent whose tool call carried an id the provider
chose badly, so normalization minted ``pc_<sha256>`` and keeps the provider's id in an artifact
that the next run reads back when it rebuilds its request. The other was imported from a log
with an ``injected`` event whose text lives in an artifact, which a replay re-renders. Both
artifacts are then damaged the same way (missing; a directory, a FIFO, a socket, a character
device or a symlink out of the store in its place; cut short; a byte changed; grown to 100 GiB;
unreadable), and every reader runs: ``threads verify --store``, ``threads export --bundle``,
``threads export`` (which needs no artifact and still works), ``threads replay`` and a run of
the thread. Missing is ``artifact_missing``; everything else is ``artifact_corrupt``; and the
repair the errors advise (move a directory aside, import a bundle of the branch) makes the store
verify again. Wrong bytes are also damaged on Postgres (whose artifacts are
rows), through the same readers.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import stat
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from threads import Completed, Failed, FakeClock, Principal, agent, sqlite, tool
from threads.cli.cmd_verify import verify_branch
from threads.cli.main import main
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.models.normalize import minted_sha256
from threads.run.replay import replay_branch
from threads.store.bundle import write_bundle
from threads.store.protocol import Store
from threads.store.rows import artifact_ref
from threads.store.transfer import export_branch, export_bundle, import_log
from threads.testing.sample_log import SampleLog
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
NOTE = b"the customer prefers email"
NOTE_SHA = sha256_hex(NOTE)


class Query(BaseModel):
    text: str


def _agent(replies: list[Any]) -> Any:
    async def fetch(args: Query, ctx: Any) -> str:
        return "fetched " + args.text

    return agent(
        name="damaged",
        model=scripted_model(replies),
        tools=[tool(name="fetch", description="Fetch.", input=Query, execute=fetch,
                    effect="read_only")],
    )


def _script() -> list[Any]:
    return [use(call("fetch", "id the provider chose badly!", text="a")), say("done"),
            say("again")]


@dataclass(frozen=True)
class Threads:
    run_thread: str  # run by an agent: its next run reads the minted call id's artifact
    minted_sha: str
    replay_thread: str  # imported: its replay reads NOTE's artifact


async def _fill(store: Store, clock: FakeClock) -> Threads:
    result = await _agent(_script()).run("go", store=store, principal=ALICE)
    assert isinstance(result, Completed)
    timeline = await result.thread.timeline()
    minted = next(
        minted_sha256(part["call_id"]) for e in timeline if e.type == "model_response"
        for part in e.data["content"] if part["type"] == "tool_use"
    )
    assert minted is not None
    log = SampleLog(clock)
    log.started()
    log.add("injected", {"origin": {"id": "crm"}, "ref": artifact_ref(NOTE, "text/plain"),
                         "source": "memory", "trust": "untrusted_reference"})
    log.artifacts[NOTE_SHA] = NOTE
    log.turn(text="How should we reach them?", reply="By email.")
    await import_log(store, write_bundle(log.export(), log.artifacts), tenant_id=ALICE.tenant)
    return Threads(result.thread.id, minted, log.header.thread_id)


def _address(root: Path, sha256: str) -> Path:
    return root / "artifacts" / "sha256" / sha256[:2] / sha256


def _damage(kind: str, path: Path, outside: Path) -> None:
    """Put ``kind`` of damage at ``path`` (an artifact's address)."""
    data = path.read_bytes()
    if kind in ("truncated", "wrong_bytes", "oversized", "unreadable"):
        if kind == "truncated":
            path.write_bytes(data[: len(data) // 2])
        elif kind == "wrong_bytes":
            path.write_bytes(bytes([data[0] ^ 1]) + data[1:])
        elif kind == "oversized":
            os.truncate(path, 100 << 30)  # sparse: 100 GiB of size, no disk
        else:
            path.chmod(0)
        return
    path.unlink()
    if kind == "directory":
        path.mkdir()
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":  # bound by its short name: a socket path is limited to ~100 bytes
        with contextlib.chdir(path.parent), socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    elif kind == "char_device":
        os.mknod(path, stat.S_IFCHR | 0o600, os.makedev(1, 5))  # /dev/zero: endless zeros
    elif kind == "symlink_out_of_store":
        outside.write_bytes(data)  # the right bytes, but not the store's file
        path.symlink_to(outside)
    else:
        assert kind == "missing"


async def _run_again(root: Path, thread_id: str) -> Any:
    store = sqlite(root, clock=FakeClock())
    try:
        return await _agent(_script()).run("more", thread=thread_id, store=store,
                                           principal=ALICE)
    finally:
        await store.close()


@pytest.fixture
def filled(tmp_path: Path) -> tuple[Path, Threads]:
    root = tmp_path / "store"

    async def fill() -> Threads:
        clock = FakeClock()
        store = sqlite(root, clock=clock)
        try:
            return await _fill(store, clock)
        finally:
            await store.close()

    threads = asyncio.run(fill())
    for thread in (threads.run_thread, threads.replay_thread):  # taken while all is well
        assert main(["export", thread, "--store", str(root), "--tenant", ALICE.tenant,
                     "--bundle", "-o", str(tmp_path / f"{thread}.bundle")]) == 0
    return root, threads


KINDS = [
    "missing", "directory", "fifo", "socket", "char_device", "symlink_out_of_store",
    "truncated", "wrong_bytes", "oversized",
]


@pytest.mark.timeout(90)
@pytest.mark.parametrize("kind", KINDS)
def test_every_reader_gives_a_coded_error_for_a_damaged_artifact_file(
    filled: tuple[Path, Threads], kind: str, tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    if kind == "char_device" and os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    root, threads = filled
    code = "artifact_missing" if kind == "missing" else "artifact_corrupt"
    for sha256 in (threads.minted_sha, NOTE_SHA):
        _damage(kind, _address(root, sha256), tmp_path / f"outside-{sha256}")
    capsys.readouterr()

    assert main(["verify", "--store", str(root)]) == 1
    out, err = capsys.readouterr()
    assert out.count(f": FAILED {code}: ") == 2, out
    assert "Traceback" not in err

    for thread, sha256 in ((threads.run_thread, threads.minted_sha),
                           (threads.replay_thread, NOTE_SHA)):
        bundle = ["export", thread, "--store", str(root), "--tenant", ALICE.tenant, "--bundle",
                  "-o", str(tmp_path / "out.bundle")]
        assert main(bundle) == 1
        err = capsys.readouterr().err
        assert err.startswith(f"error: {code}: no bundle was written"), err
        assert sha256 in err
        if code == "artifact_corrupt":
            assert str(_address(root, sha256)) in err  # names the address
        plain = ["export", thread, "--store", str(root), "--tenant", ALICE.tenant,
                 "-o", str(tmp_path / "out.jsonl")]
        assert main(plain) == 0  # a plain export carries no artifact

    assert main(["replay", threads.replay_thread, "--store", str(root)]) == 1
    out, err = capsys.readouterr()
    assert f"then {code} at seq 2: injected references artifact {NOTE_SHA}" in out, out
    assert "Traceback" not in err

    # The repair the errors advise: move a directory aside, import a bundle that carries it.
    for sha256 in (threads.minted_sha, NOTE_SHA):
        if kind == "directory":
            _address(root, sha256).rename(tmp_path / f"aside-{sha256}")
    for thread in (threads.run_thread, threads.replay_thread):
        assert main(["import", str(tmp_path / f"{thread}.bundle"), "--store", str(root),
                     "--tenant", ALICE.tenant]) == 0
    capsys.readouterr()
    assert main(["verify", "--store", str(root)]) == 0, capsys.readouterr().out

    _damage(kind, _address(root, threads.minted_sha), tmp_path / "outside-again")
    result = asyncio.run(_run_again(root, threads.run_thread))
    assert isinstance(result, Failed), result
    assert result.error.code == code
    assert threads.minted_sha in result.error.message


@pytest.mark.timeout(90)
def test_an_unreadable_artifact_file_is_artifact_corrupt(
    filled: tuple[Path, Threads], tmp_path: Path
) -> None:
    """Permissions that forbid reading. Root reads anything, so as root the readers run in a
    child without the capabilities that override file permissions."""
    root, threads = filled
    for sha256 in (threads.minted_sha, NOTE_SHA):
        _damage("unreadable", _address(root, sha256), tmp_path / "unused")
    prefix: list[str] = []
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.skip("running as root without setpriv: permissions can't be enforced")
        dropped = "-dac_override,-dac_read_search"
        prefix = [setpriv, f"--bounding-set={dropped}", f"--inh-caps={dropped}"]

    def threads_cli(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*prefix, sys.executable, "-m", "threads.cli", *args],
                              capture_output=True, text=True, timeout=60, check=False)

    verified = threads_cli("verify", "--store", str(root))
    assert verified.returncode == 1
    assert verified.stdout.count(": FAILED artifact_corrupt: ") == 2, verified.stdout
    assert "can't be opened (Permission denied)" in verified.stdout
    bundled = threads_cli("export", threads.run_thread, "--store", str(root), "--tenant",
                          ALICE.tenant, "--bundle", "-o", str(tmp_path / "b"))
    assert bundled.returncode == 1
    assert bundled.stderr.startswith("error: artifact_corrupt: no bundle was written")
    replayed = threads_cli("replay", threads.replay_thread, "--store", str(root))
    assert replayed.returncode == 1
    assert "then artifact_corrupt at seq 2" in replayed.stdout
    assert "Traceback" not in verified.stderr + bundled.stderr + replayed.stderr


async def test_wrong_bytes_are_artifact_corrupt_for_every_reader_on_every_store(
    store: Store, clock: FakeClock, tamper: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    threads = await _fill(store, clock)
    for sha256 in (threads.minted_sha, NOTE_SHA):
        tamper.flip_artifact_byte(sha256)
    for thread in (threads.run_thread, threads.replay_thread):
        branch = await store.root_branch(thread)
        assert not await verify_branch(store, branch)
        assert "FAILED artifact_corrupt" in capsys.readouterr().out
        with pytest.raises(StoreError) as caught:
            await export_bundle(store, branch.branch_id)
        assert caught.value.code == "artifact_corrupt"
        await export_branch(store, branch.branch_id)  # needs no artifact
    replay_root = await store.root_branch(threads.replay_thread)
    replayed = await replay_branch(store, replay_root.branch_id)
    assert replayed.mismatch is not None
    assert replayed.mismatch.code == "artifact_corrupt"
    again = await _agent(_script()).run("more", thread=threads.run_thread, store=store,
                                        principal=ALICE)
    assert isinstance(again, Failed)
    assert again.error.code == "artifact_corrupt"
