"""A sandbox ref read back from stored bytes (a ledger row, a log imported from elsewhere) is
turned into a path only when the local provider minted it: a forged one is ``not_found``, and
nothing outside the provider's folder is attached to, listed or deleted."""

from __future__ import annotations

from pathlib import Path

import pytest

from threads.sandbox import OPEN_CONTEXT as CTX
from threads.sandbox import SandboxError
from threads.sandbox.limits import Limits
from threads.sandbox.local import LocalSandbox


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
    assert await provider.lookup("snapshot", "op-1") is None
    assert (tmp_path / "victim.json").exists()
