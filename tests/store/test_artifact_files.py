"""Artifact files: an address holds the whole artifact or nothing, across a SIGKILL at each
step of a put; a second put refreshes the file's mtime and mends damaged bytes, and puts its
bytes in place of a FIFO, a socket or a symlink at its address without opening it (a directory
there is ``artifact_corrupt``, left as it is); the temporary file a killed put leaves is swept
when the store opens, and a live writer's never is; bytes a put finds already at their address
are synced before it returns.

The kills are real: a child process puts an artifact and SIGKILLs itself at a named step
(after the temporary file is written and fsynced, after the hard link), and the parent then
opens the store directory as a fresh process would. The live writer is a child process
stopped between its write and its link while the parent sweeps.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import socket
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store.artifact_files import ABANDONED_AFTER_MS, ArtifactFiles, make_store_dirs
from threads.store.sqlite import sqlite

DATA = os.urandom(256 * 1024)
SHA = sha256_hex(DATA)

_CHILD = textwrap.dedent(
    """
    import os, signal, sys
    from pathlib import Path
    from threads.store import artifact_files

    root, step, data_path = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
    real_link = os.link

    def link(src, dst):
        if step == "before_link":
            os.kill(os.getpid(), signal.SIGKILL)
        if step == "wait":  # a writer caught mid-put: its temp file written, not yet linked
            print("written", flush=True)
            sys.stdin.readline()
        real_link(src, dst)
        if step == "after_link":
            os.kill(os.getpid(), signal.SIGKILL)

    artifact_files.os.link = link
    artifact_files.ArtifactFiles(root).put(Path(data_path).read_bytes())
    """
)


def _put_and_die(root: Path, step: str, tmp_path: Path) -> None:
    data_path = tmp_path / "data"
    data_path.write_bytes(DATA)
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(root), step, str(data_path)],
        capture_output=True, timeout=60, check=False,
    )
    assert done.returncode == -9, done.stderr


@pytest.mark.parametrize("step", ["before_link", "after_link"])
def test_a_put_killed_at_any_step_leaves_the_whole_artifact_or_none(
    tmp_path: Path, step: str
) -> None:
    root = tmp_path / "store"
    _put_and_die(root, step, tmp_path)
    files = ArtifactFiles(root)
    if step == "before_link":
        assert files.get(SHA) is None  # never a partial file at the address
    else:
        assert files.get(SHA) == DATA
    assert files.put(DATA) == SHA  # the next put completes (or finds) it
    assert files.get(SHA) == DATA
    leftovers = [p.name for p in (root / "artifacts").iterdir() if p.is_file()]
    assert all(name.startswith(f".{SHA}.") for name in leftovers)  # only the killed temp


def test_a_second_put_refreshes_mtime_and_mends_damaged_bytes(tmp_path: Path) -> None:
    files = ArtifactFiles(tmp_path / "store")
    files.put(DATA)
    path = files.path(SHA)
    os.utime(path, (1_000_000, 1_000_000))
    files.put(DATA)
    assert path.stat().st_mtime > 1_000_000  # a gc's grace counts from the last put
    damaged = bytearray(DATA)
    damaged[7] ^= 1
    path.write_bytes(bytes(damaged))
    with pytest.raises(Exception) as err:
        files.get(SHA)
    assert getattr(err.value, "code", None) == "artifact_corrupt"
    files.put(DATA)
    assert files.get(SHA) == DATA
    assert oct(path.stat().st_mode & 0o777) == "0o600"


def _occupy(path: Path, kind: str, outside: Path) -> None:
    """Something other than the artifact's file at its address."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "socket":
        with contextlib.chdir(path.parent), socket.socket(socket.AF_UNIX) as sock:
            sock.bind(path.name)
    elif kind == "symlink_out_of_store":
        outside.write_bytes(b"someone else's file")
        path.symlink_to(outside)
    else:
        assert kind == "directory"
        path.mkdir()
        (path / "inside").write_bytes(b"not ours")


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["fifo", "socket", "symlink_out_of_store"])
def test_a_put_replaces_what_is_not_a_file_at_its_address_without_opening_it(
    tmp_path: Path, kind: str
) -> None:
    """A FIFO there would block an open for good; a symlink would lead the write outside the
    store. The put lets its good bytes take the address, and leaves the outside file alone."""
    files = ArtifactFiles(tmp_path / "store")
    outside = tmp_path / "outside"
    _occupy(files.path(SHA), kind, outside)
    with pytest.raises(StoreError) as err:
        files.get(SHA)
    assert err.value.code == "artifact_corrupt"
    assert files.put(DATA) == SHA
    assert files.get(SHA) == DATA
    assert stat.S_ISREG(os.lstat(files.path(SHA)).st_mode)
    if kind == "symlink_out_of_store":
        assert outside.read_bytes() == b"someone else's file"


def test_a_put_onto_a_directory_at_its_address_is_artifact_corrupt_and_leaves_it(
    tmp_path: Path,
) -> None:
    files = ArtifactFiles(tmp_path / "store")
    _occupy(files.path(SHA), "directory", tmp_path / "unused")
    with pytest.raises(StoreError) as err:
        files.put(DATA)
    assert err.value.code == "artifact_corrupt"
    assert f"{files.path(SHA)} is a directory" in err.value.message
    assert (files.path(SHA) / "inside").read_bytes() == b"not ours"
    assert not files.holds(SHA)
    assert [p for p in (tmp_path / "store" / "artifacts").iterdir() if p.is_file()] == []


def test_a_put_that_finds_its_address_makes_it_durable_before_it_returns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer linked the bytes and has not synced its directory yet: the put that finds
    them (and whose caller then commits an event naming them) fsyncs the file and its shard
    directory itself, instead of trusting what it can only see."""
    files = ArtifactFiles(tmp_path / "store")
    path = files.path(SHA)
    path.parent.mkdir(parents=True)
    path.write_bytes(DATA)  # linked by someone else, synced by nobody
    synced: list[str] = []
    real_fsync = os.fsync

    def fsync(fd: int) -> None:
        synced.append(os.readlink(f"/proc/self/fd/{fd}"))
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    assert files.put(DATA) == SHA
    assert str(path) in synced
    assert str(path.parent) in synced


def test_names_that_are_not_addresses_are_never_paths(tmp_path: Path) -> None:
    files = ArtifactFiles(tmp_path / "store")
    files.put(DATA)
    for name in ("../" + SHA, SHA.upper(), SHA[:63], "", SHA + "/x"):
        assert files.get(name) is None


def _temps(root: Path) -> list[Path]:
    return sorted(p for p in (root / "artifacts").iterdir() if p.name.endswith(".tmp"))


async def _open_and_close(root: Path) -> None:
    store = sqlite(root, clock=FakeClock())
    await store.list_threads()
    await store.close()


@pytest.mark.parametrize("step", ["before_link", "after_link"])
def test_a_killed_puts_temp_file_is_swept_when_the_store_opens(
    tmp_path: Path, step: str
) -> None:
    root = tmp_path / "store"
    _put_and_die(root, step, tmp_path)
    assert len(_temps(root)) == 1  # the kill left it behind
    asyncio.run(_open_and_close(root))  # its writer is provably gone: no age is waited for
    assert _temps(root) == []
    assert ArtifactFiles(root).get(SHA) == (DATA if step == "after_link" else None)


def test_a_live_writers_temp_file_is_never_swept(tmp_path: Path) -> None:
    root = tmp_path / "store"
    data_path = tmp_path / "data"
    data_path.write_bytes(DATA)
    files = ArtifactFiles(root)
    with subprocess.Popen(
        [sys.executable, "-c", _CHILD, str(root), "wait", str(data_path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    ) as child:
        try:
            assert child.stdout is not None
            assert child.stdin is not None
            assert child.stdout.readline() == b"written\n"
            [temp] = _temps(root)
            assert files.sweep(now_ms=2**62) == 0  # however old: its writer runs
            asyncio.run(_open_and_close(root))
            assert temp.read_bytes() == DATA
            child.stdin.write(b"go\n")
            child.stdin.flush()
            assert child.wait(timeout=60) == 0  # its put completes
        finally:
            if child.poll() is None:
                child.kill()
    assert files.get(SHA) == DATA
    assert _temps(root) == []


def test_a_temp_file_whose_writer_cannot_be_judged_goes_only_once_old(tmp_path: Path) -> None:
    root = tmp_path / "store"
    make_store_dirs(root)
    written_ms = 1_700_000_000_000
    judged_elsewhere = [
        f".{SHA}.k3j2h1.tmp",  # an earlier release's name: no writer
        f".{SHA}.{'0' * 16}-4242-77.k3j2h1.tmp",  # a writer on another host
    ]
    never_ours = ["notes.txt", f".{SHA}.k3j2h1.partial", f".{SHA}.tmp", ".tmp"]
    for name in judged_elsewhere + never_ours:
        path = root / "artifacts" / name
        path.write_bytes(b"x")
        os.utime(path, ns=(written_ms * 1_000_000, written_ms * 1_000_000))
    files = ArtifactFiles(root)
    assert files.sweep(now_ms=written_ms + ABANDONED_AFTER_MS) == 0
    assert files.sweep(now_ms=written_ms + ABANDONED_AFTER_MS + 1) == len(judged_elsewhere)
    left = sorted(p.name for p in (root / "artifacts").iterdir() if p.is_file())
    assert left == sorted(never_ours)
