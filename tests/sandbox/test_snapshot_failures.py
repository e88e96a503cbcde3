"""Snapshots that fail: on a full disk, and from an archive someone else wrote.

A turn-end snapshot on a full sandbox filesystem (a real 1 MiB tmpfs) leaves the turn its
outcome: no ``snapshot`` event, nothing raised out of ``run()``, its ledger row settled, nothing
it wrote left on disk. A fork from an archive holding a member that would leave its tree (``../``,
an absolute path, a link, a hard link, a device, a sparse file) is ``snapshot_restore_failed``:
nothing is written outside, the restore's ledger row is settled, and no sandbox is left.
"""

from __future__ import annotations

import io
import json
import logging
import subprocess
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sandbox_support import first_writes

from threads import agent, open_thread
from threads.log.hashing import sha256_hex
from threads.sandbox import OPEN_CONTEXT, SandboxError
from threads.sandbox.bubblewrap import LocalSandbox, local
from threads.sandbox.ledger import Owner
from threads.store.capabilities import resources_of
from threads.store.sqlite import sqlite
from threads.testing.scripted import call, say, scripted_model, use

TINY = "1M"


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A real filesystem of ``TINY`` bytes (a tmpfs), unmounted after the test."""
    mount = tmp_path / "small"
    mount.mkdir()
    made = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TINY}", "tmpfs", str(mount)],
                          capture_output=True, text=True, check=False)
    if made.returncode != 0:
        pytest.skip(f"can't mount a {TINY} tmpfs here (needs root): {made.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True, check=False)


def _leftovers(root: Path) -> list[str]:
    """Files under the provider's root that no live sandbox or snapshot accounts for."""
    found = []
    for path in root.rglob("*"):
        rel = path.relative_to(root).as_posix()
        if path.name.startswith(".") and path.name != ".lock":
            found.append(rel)  # a temporary file or a half-made sandbox
        elif rel.startswith(("snapshots/refs/", "snapshots/archives/")):
            found.append(rel)
    return found


async def test_a_full_disk_at_a_turn_end_snapshot_leaves_the_turn_its_outcome(
    tmp_path: Path, small_disk: Path, caplog: pytest.LogCaptureFixture
) -> None:
    provider = local(small_disk / "sandboxes")
    store = sqlite(tmp_path / "store")
    big = "x" * 600_000  # fits the disk once, not again as the snapshot's archive
    bot = agent(name="filler", model=scripted_model([
        use(call("write_file", path="/workspace/big.txt", content=big)), say("written"),
    ]), sandbox=provider, snapshots=True)
    with caplog.at_level(logging.WARNING, logger="threads"):
        result = await bot.run("fill the disk", store=store)
    assert result.status == "completed", result
    assert result.output == "written"
    events = await (await open_thread(store, result.thread.id)).timeline()
    assert "snapshot" not in [e.type for e in events]
    assert "no_space" in caplog.text
    rows = [(r.kind, r.state) for r in await resources_of(store).resources()]
    assert ("snapshot", "released") in rows
    assert all(state in ("live", "released") for _, state in rows), rows
    assert _leftovers(provider.root) == []
    await store.close()


def _tar(members: list[tuple[tarfile.TarInfo, bytes | None]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for info, data in members:
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return buffer.getvalue()


def _file(name: str, data: bytes = b"planted") -> tuple[tarfile.TarInfo, bytes]:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _special(name: str, kind: bytes, target: str = "") -> tuple[tarfile.TarInfo, None]:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    if kind == tarfile.CHRTYPE:
        info.devmajor, info.devminor = 1, 3
    return info, None


def _sparse() -> bytes:
    """A GNU sparse member claiming 1 GiB from a few bytes."""
    info = tarfile.TarInfo("sparse.bin")
    info.type = tarfile.GNUTYPE_SPARSE
    info.size = 4
    header = bytearray(info.tobuf(tarfile.GNU_FORMAT))
    # offset 0, numbytes 4 in the first sparse slot; realsize 1 GiB
    header[386:398] = b"%011o\0" % 0
    header[398:410] = b"%011o\0" % 4
    header[483:495] = b"%011o\0" % (1 << 30)
    header[148:156] = b"        "
    header[148:156] = b"%06o\0 " % sum(header)
    body = bytes(header) + b"data".ljust(512, b"\0")
    return body + b"\0" * 1024


def _escaped(tmp_path: Path) -> list[Path]:
    """A planted file wherever the hostile members aimed."""
    planted = [*tmp_path.rglob("*escaped.txt"), Path("/tmp/threads-escaped.txt")]
    return [p for p in planted if p.exists()]


HOSTILE: dict[str, Callable[[], bytes]] = {
    "dot-dot": lambda: _tar([_file("../../escaped.txt")]),
    "absolute": lambda: _tar([_file("/tmp/threads-escaped.txt")]),
    "through a symlink": lambda: _tar([_special("out", tarfile.SYMTYPE, "/tmp"),
                                       _file("out/threads-escaped.txt")]),
    "through a link that looks inside": lambda: _tar([
        _special("here", tarfile.SYMTYPE, "."), _special("up", tarfile.SYMTYPE, "here/../.."),
        _file("up/escaped.txt")]),
    "hard link out": lambda: _tar([_special("passwd", tarfile.LNKTYPE, "../../../etc/passwd")]),
    "device": lambda: _tar([_special("null", tarfile.CHRTYPE)]),
    "fifo": lambda: _tar([_special("pipe", tarfile.FIFOTYPE)]),
    "sparse": _sparse,
    "not a tar": lambda: b"\x1f\x8b this is no archive" * 40,
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
async def test_a_hostile_snapshot_archive_fails_the_fork_and_leaves_nothing(
    tmp_path: Path, provider: LocalSandbox, case: str
) -> None:
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/plan.txt", "v1", snapshots=True)
    first = await bot.run("save", store=store)
    thread = await open_thread(store, first.thread.id)
    (point,) = await thread.fork_points()
    snapshot = next(e for e in await thread.timeline() if e.type == "snapshot")

    # Someone with access to the host's snapshot directory swaps the archive.
    hostile = HOSTILE[case]()
    sha = sha256_hex(hostile)
    snapshots = provider.root / "snapshots"
    (snapshots / "archives" / f"{sha}.tar").write_bytes(hostile)
    ref = snapshots / "refs" / f"{snapshot.data['snapshot_id']}.json"
    ref.write_text(json.dumps({**json.loads(ref.read_text()), "archive": sha}))
    before = provider.sandbox_ids()

    with pytest.raises(SandboxError) as failed:
        await thread.fork(point.snapshot_event_id, provider)
    assert failed.value.code == "snapshot_restore_failed", failed.value
    assert provider.sandbox_ids() == before  # the sandbox it restored into is gone
    assert not [p for p in (provider.root / "sandboxes").iterdir() if p.name.startswith(".")]
    assert _escaped(tmp_path) == []
    rows = await resources_of(store).resources()
    assert [r.state for r in rows if r.state not in ("live", "released")] == []
    await store.close()


async def test_a_snapshot_a_crash_took_but_never_recorded_is_released_by_the_next_run(
    tmp_path: Path, provider: LocalSandbox
) -> None:
    """A snapshot row lives as long as its snapshot (a fork point outlives an idle sandbox),
    so one whose ``snapshot`` event a crash cut off would be kept for good: the branch's next
    run releases it, and keeps the recorded one."""
    store = sqlite(tmp_path / "store")
    bot = first_writes(provider, "/workspace/plan.txt", "v1", say("again"), snapshots=True)
    first = await bot.run("save", store=store)
    root = await store.root_branch(first.thread.id)
    resources = resources_of(store)
    (recorded,) = [r.ref for r in await resources.resources() if r.kind == "snapshot"
                   and r.state == "live"]

    # A run that took a snapshot and died before its event: its row went live.
    crashed = await store.acquire_lease(root.branch_id, "crashed", 60_000)
    owner = Owner(resources, provider, store.clock, "local", lambda: crashed, OPEN_CONTEXT)
    session = await owner.sandbox_session()
    await session.write_file("/workspace/plan.txt", b"v2", await owner.owned())
    taken = await owner.snapshot(session)
    await store.release_lease(crashed)

    second = await bot.run("again", thread=first.thread.id, store=store)
    assert second.status == "completed", second
    states = {r.ref: r.state for r in await resources.resources() if r.kind == "snapshot"}
    assert states == {recorded: "live", taken.snapshot_id: "released"}
    refs = provider.root / "snapshots" / "refs"
    assert sorted(p.stem for p in refs.iterdir()) == [recorded]
    await store.close()
