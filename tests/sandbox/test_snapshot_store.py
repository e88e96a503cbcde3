"""The local sandbox's snapshot store (``threads.sandbox.snapshot_store``) after writers killed
mid-write: what they left (a temporary file, an archive without its ref) is gone once the store
is used again, and nothing a ref names is touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import threads.sandbox.durable as durable
from threads.log.hashing import sha256_hex
from threads.sandbox.snapshot_store import SnapshotStore


class Killed(BaseException):
    """Stands in for SIGKILL: nothing after it runs."""


def _killed_before_rename(monkeypatch: pytest.MonkeyPatch, nth: int) -> None:
    """The ``nth`` ``write_durably`` of what follows dies after writing its temporary file."""
    calls = [0]
    real = os.replace

    def replace(src: str | Path, dst: str | Path) -> None:
        calls[0] += 1
        if calls[0] == nth:
            raise Killed
        real(src, dst)

    monkeypatch.setattr(durable.os, "replace", replace)


def _files(store: SnapshotStore) -> list[str]:
    return sorted(str(p.relative_to(store.folder)) for p in store.folder.rglob("*")
                  if p.is_file() and p.name != ".lock")


@pytest.mark.parametrize("nth", [1, 2])  # killed writing the archive, or writing its ref
def test_what_a_killed_keep_left_is_gone_after_the_next_release(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, nth: int
) -> None:
    store = SnapshotStore(tmp_path / "snapshots")
    store.keep("kept", b"a workspace", "manifest-1")
    store.keep("released", b"another workspace", "manifest-2")
    with monkeypatch.context() as patch:
        _killed_before_rename(patch, nth)
        with pytest.raises(Killed):
            store.keep("torn", b"a third workspace", "manifest-3")
    assert any(name.endswith(".tmp") for name in _files(store))
    assert not store.exists("torn")

    assert store.release("released") == "released"
    assert store.archive_of("kept") == b"a workspace"
    assert _files(store) == sorted([
        "refs/kept.json", f"archives/{sha256_hex(b'a workspace')}.tar",
    ])


def test_a_temporary_file_is_swept_by_the_next_keep_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SnapshotStore(tmp_path / "snapshots")
    with monkeypatch.context() as patch:
        _killed_before_rename(patch, 2)
        with pytest.raises(Killed):
            store.keep("torn", b"a workspace", "manifest-1")
    store.keep("whole", b"a workspace", "manifest-1")
    assert not any(name.endswith(".tmp") for name in _files(store))
    assert store.archive_of("whole") == b"a workspace"



def test_an_unreadable_ref_keeps_every_archive(tmp_path: Path) -> None:
    """A ref that can't be read might name any archive: a release then deletes only its own
    ref, never an archive."""
    store = SnapshotStore(tmp_path / "snapshots")
    store.keep("damaged", b"a workspace", "manifest-1")
    store.keep("released", b"another workspace", "manifest-2")
    (store.folder / "refs" / "damaged.json").write_bytes(b"{not json")
    assert store.release("released") == "released"
    assert sorted(p.name for p in (store.folder / "archives").iterdir()) == sorted(
        f"{sha256_hex(data)}.tar" for data in (b"a workspace", b"another workspace")
    )
    assert not store.exists("released")
