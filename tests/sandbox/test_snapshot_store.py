"""The local sandbox's snapshot store (``threads.sandbox.snapshot_store``) after writers killed
mid-write: what they left (a temporary file, an archive without its ref) is gone once the store
is used again, and nothing a ref names is touched."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

import threads.sandbox.durable as durable
from threads.log.hashing import sha256_hex
from threads.sandbox.protocol import SandboxError
from threads.sandbox.snapshot_store import SnapshotStore, snapshot_id


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
    store.keep(snapshot_id("kept"), b"a workspace", "manifest-1")
    store.keep(snapshot_id("released"), b"another workspace", "manifest-2")
    with monkeypatch.context() as patch:
        _killed_before_rename(patch, nth)
        with pytest.raises(Killed):
            store.keep(snapshot_id("torn"), b"a third workspace", "manifest-3")
    assert any(name.endswith(".tmp") for name in _files(store))
    assert not store.exists(snapshot_id("torn"))

    assert store.release(snapshot_id("released")) == "released"
    assert store.archive_of(snapshot_id("kept")) == b"a workspace"
    assert _files(store) == sorted([
        f"refs/{snapshot_id('kept')}.json", f"archives/{sha256_hex(b'a workspace')}.tar",
    ])


def test_a_temporary_file_is_swept_by_the_next_keep_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = SnapshotStore(tmp_path / "snapshots")
    with monkeypatch.context() as patch:
        _killed_before_rename(patch, 2)
        with pytest.raises(Killed):
            store.keep(snapshot_id("torn"), b"a workspace", "manifest-1")
    store.keep(snapshot_id("whole"), b"a workspace", "manifest-1")
    assert not any(name.endswith(".tmp") for name in _files(store))
    assert store.archive_of(snapshot_id("whole")) == b"a workspace"



def test_an_unreadable_ref_keeps_every_archive(tmp_path: Path) -> None:
    """A ref that can't be read might name any archive: a release then deletes only its own
    ref, never an archive."""
    store = SnapshotStore(tmp_path / "snapshots")
    store.keep(snapshot_id("damaged"), b"a workspace", "manifest-1")
    store.keep(snapshot_id("released"), b"another workspace", "manifest-2")
    (store.folder / "refs" / f"{snapshot_id('damaged')}.json").write_bytes(b"{not json")
    assert store.release(snapshot_id("released")) == "released"
    assert sorted(p.name for p in (store.folder / "archives").iterdir()) == sorted(
        f"{sha256_hex(data)}.tar" for data in (b"a workspace", b"another workspace")
    )
    assert not store.exists(snapshot_id("released"))


# A snapshot id reaches the store from stored bytes: the ``snapshot`` event of a log that may
# have been imported from elsewhere, or a ledger row. Each of these would lead outside ``refs``.
_NOT_MINTED = [
    "../../victim",
    "lss-../../../../victim",
    "lss-" + "A" * 32,  # the shape, in upper case
    "lss-" + "0" * 31 + "/",
    snapshot_id("x") + ".json",
    "",
]


@pytest.mark.parametrize("forged", _NOT_MINTED)
def test_an_id_the_store_did_not_mint_never_becomes_a_path(tmp_path: Path, forged: str) -> None:
    store = SnapshotStore(tmp_path / "a" / "snapshots")
    store.keep(snapshot_id("kept"), b"a workspace", "manifest-1")
    victim = tmp_path / "victim.json"  # what "../../victim" would name from refs/
    victim.write_text(json.dumps({"archive": sha256_hex(b"a workspace")}))
    before = _files(store)

    assert not store.exists(forged)
    for act in (store.archive_of, store.release):
        with pytest.raises(SandboxError) as raised:
            act(forged)
        assert raised.value.code == "snapshot_missing"
    with pytest.raises(SandboxError):
        store.keep(forged, b"planted", "manifest-2")
    assert victim.exists()
    assert _files(store) == before
    assert store.archive_of(snapshot_id("kept")) == b"a workspace"


@pytest.mark.parametrize("ref", [
    b"[]", b'"an archive"', b"7", b"{}", b'{"archive": 5}', b'{"archive": "../../victim"}',
    b'{"archive": "' + b"A" * 64 + b'"}',
])
def test_a_ref_that_names_no_archive_is_a_missing_snapshot(tmp_path: Path, ref: bytes) -> None:
    """Whatever a damaged ref holds, reading the snapshot is ``snapshot_missing`` (never a
    ``TypeError``, never a file outside ``archives``), and releasing another snapshot keeps
    every archive (the ref might have named any)."""
    store = SnapshotStore(tmp_path / "snapshots")
    store.keep(snapshot_id("damaged"), b"a workspace", "manifest-1")
    store.keep(snapshot_id("released"), b"another workspace", "manifest-2")
    (store.folder / "refs" / f"{snapshot_id('damaged')}.json").write_bytes(ref)
    (tmp_path / "victim.tar").write_bytes(b"outside")

    with pytest.raises(SandboxError) as raised:
        store.archive_of(snapshot_id("damaged"))
    assert raised.value.code == "snapshot_missing"
    assert store.release(snapshot_id("released")) == "released"
    assert len(list((store.folder / "archives").iterdir())) == 2
    assert (tmp_path / "victim.tar").exists()
