"""A sandbox ref read back from stored bytes (a ledger row, a log imported from elsewhere) is
turned into a path only when the local provider minted it: a forged one is ``not_found``, and
nothing outside the provider's folder is attached to, listed or deleted. Nor does a file call
lead outside the workspace when the sandbox swaps a directory for a link in the middle of it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxError
from threads.sandbox.bubblewrap import LocalSandbox
from threads.sandbox.limits import Limits
from threads.sandbox.local_session import LocalSession


def _padded(prefix: str, tail: str) -> str:
    """``prefix + tail`` made 36 characters long (the length of a minted id) with ``./``."""
    filler = 36 - len(prefix) - len(tail)
    return prefix + "/." * (filler // 2) + "/" * (filler % 2) + tail


@pytest.fixture
def victim(tmp_path: Path) -> Path:
    """A directory beside the provider's root that looks like a sandbox."""
    folder = tmp_path / "victim"
    (folder / "workspace").mkdir(parents=True)
    (folder / "workspace" / "keep.txt").write_text("not the sandbox's")
    return folder


async def test_a_forged_sandbox_id_is_not_found_and_touches_nothing(
    tmp_path: Path, victim: Path
) -> None:
    root = tmp_path / "root"
    provider = LocalSandbox(root, Limits())
    made = await provider.create("op-1", CTX)
    (root / "sandboxes" / "lsb-").mkdir()  # a stray folder a traversal could go through
    forged = [
        _padded("lsb-", "/../../../victim"),
        made.id + "/../../../victim",
        "lsb-" + "A" * 32,
        made.id + "/",
        "../victim",
    ]
    for ref in forged:
        with pytest.raises(SandboxError) as attached:
            await provider.attach(ref, CTX)
        with pytest.raises(SandboxError) as released:
            await provider.release("sandbox", ref, CTX)
        assert attached.value.code == released.value.code == "not_found", ref
    assert (victim / "workspace" / "keep.txt").read_text() == "not the sandbox's"
    assert (await provider.attach(made.id, CTX)).id == made.id
    assert await provider.release("sandbox", made.id, CTX) == "released"


async def test_a_forged_snapshot_id_is_missing(tmp_path: Path, victim: Path) -> None:
    provider = LocalSandbox(tmp_path / "root", Limits())
    (tmp_path / "root" / "snapshots" / "refs").mkdir(parents=True)
    (tmp_path / "victim.json").write_text('{"archive": "x"}')
    with pytest.raises(SandboxError) as raised:
        await provider.release("snapshot", "../../../victim", CTX)
    assert raised.value.code == "snapshot_missing"
    assert await provider.lookup("snapshot", "op-1", CTX) is None
    assert (tmp_path / "victim.json").exists()


class _SwapAfterCheck:
    """A process inside the sandbox swaps ``workspace/d`` for a symlink to a host directory
    right after the host checked the path and before it opens the file: the race a
    ``realpath`` check alone loses."""

    def __init__(self, workspace: Path, outside: Path, last_check: str) -> None:
        self.workspace, self.outside, self.last_check = workspace, outside, last_check
        self.swapped = False

    def wrap(self, check: Any) -> Any:
        def checked_then_swapped(session: Any, path: str) -> Path:
            resolved = check(session, path)
            if not self.swapped and path == self.last_check:
                (self.workspace / "d").rename(self.workspace / "d-real")
                (self.workspace / "d").symlink_to(self.outside)
                self.swapped = True
            return Path(resolved)

        return checked_then_swapped


@pytest.mark.parametrize("act", ["read", "write"])
async def test_a_directory_swapped_for_a_link_mid_call_never_leads_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, act: str
) -> None:
    provider = LocalSandbox(tmp_path / "root", Limits())
    session = await provider.create("op-1", CTX)
    workspace = session.workspace
    (workspace / "d").mkdir()
    (workspace / "d" / "f.txt").write_text("the sandbox's")
    outside = tmp_path / "host-secrets"
    outside.mkdir()
    (outside / "f.txt").write_text("the host's")
    # the swap comes after the last check the call makes of the path: the file's for a read,
    # its directory's for a write (which checks the file first)
    last = "/workspace/d/f.txt" if act == "read" else "/workspace/d"
    swap = _SwapAfterCheck(workspace, outside, last)
    monkeypatch.setattr(LocalSession, "_host_path", swap.wrap(LocalSession._host_path))
    call = (session.read_file("/workspace/d/f.txt", CTX) if act == "read"
            else session.write_file("/workspace/d/f.txt", b"planted", CTX))
    with pytest.raises(SandboxError) as refused:
        await call
    assert swap.swapped
    assert refused.value.code == "permission_denied"
    assert (outside / "f.txt").read_text() == "the host's"


async def test_a_directory_swapped_for_a_link_makes_no_directory_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write into directories that do not exist yet makes them one at a time: the swap of
    ``d`` for a link right after the path was checked makes none of them outside."""
    provider = LocalSandbox(tmp_path / "root", Limits())
    session = await provider.create("op-1", CTX)
    workspace = session.workspace
    (workspace / "d").mkdir()
    outside = tmp_path / "host-dir"
    outside.mkdir()
    swap = _SwapAfterCheck(workspace, outside, "/workspace/d/new/deeper/f.txt")
    monkeypatch.setattr(LocalSession, "_host_path", swap.wrap(LocalSession._host_path))
    with pytest.raises(SandboxError) as refused:
        await session.write_file("/workspace/d/new/deeper/f.txt", b"planted", CTX)
    assert swap.swapped
    assert refused.value.code == "permission_denied"
    assert list(outside.iterdir()) == []


async def test_a_write_makes_its_missing_directories(tmp_path: Path) -> None:
    provider = LocalSandbox(tmp_path / "root", Limits())
    session = await provider.create("op-1", CTX)
    await session.write_file("/workspace/a/b/c.txt", b"made", CTX)
    assert await session.read_file("/workspace/a/b/c.txt", CTX) == b"made"
    assert (session.workspace / "a" / "b").is_dir()
