"""Hostile bundles, crafted by hand, on both stores: whatever shape a tar takes, an import
refuses everything but the bundle layout with a code, stores nothing, and never holds more in
memory than its bound; a good bundle stores only the artifacts its log references.

Members are built with ``tarfile.TarInfo`` (links, devices, FIFOs, directories, pax headers,
path tricks, names with a newline) or as raw header bytes (GNU and pax sparse members whose
declared size is far larger than the bytes the file holds).
"""

from __future__ import annotations

import io
import os
import sqlite3
import tarfile
import tracemalloc
from pathlib import Path

import pytest

from postgres_support import fetch_all
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store import bundle
from threads.store.bundle import BUNDLE_LOG, write_bundle
from threads.store.postgres import PostgresStore
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore
from threads.store.transfer import import_from_path, import_log
from threads.testing.sample_log import SampleLog

TENANT = "acme"
EXTRA = b"an artifact no log references"
EXTRA_SHA = sha256_hex(EXTRA)


def _log(clock: FakeClock) -> SampleLog:
    log = SampleLog(clock)
    log.started()
    log.turn(text="one", reply="two")
    return log


def _info(
    name: str, type_: bytes = tarfile.REGTYPE, size: int = 0, **attrs: object
) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = type_
    info.size = size
    for key, value in attrs.items():
        setattr(info, key, value)
    return info


def _tar(
    log: SampleLog,
    extra: list[tuple[tarfile.TarInfo, bytes]],
    *,
    fmt: int = tarfile.USTAR_FORMAT,
) -> bytes:
    """A good bundle of ``log`` (its export and artifacts), then the ``extra`` members."""
    out = io.BytesIO(write_bundle(log.export(), log.artifacts))
    with tarfile.open(fileobj=out, mode="r:") as good:
        members = [(m, good.extractfile(m).read()) for m in good]  # type: ignore[union-attr]
    final = io.BytesIO()
    with tarfile.open(fileobj=final, mode="w", format=fmt) as tar:
        for info, data in [*members, *extra]:
            tar.addfile(info, io.BytesIO(data) if info.isreg() else None)
    return final.getvalue()


def _checksum(header: bytearray) -> None:
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)


def _gnu_sparse(name: str, realsize: int, stored: bytes) -> bytes:
    """An old-GNU sparse member (type ``S``): ``stored`` holds the only data, placed at the
    end of a file whose declared size is ``realsize``; the rest is a hole tar fills with
    zeros on reading."""
    header = bytearray(_info(name, size=len(stored)).tobuf(tarfile.GNU_FORMAT))
    header[156:157] = tarfile.GNUTYPE_SPARSE
    header[386:398] = b"%011o\0" % (realsize - len(stored))  # sparse map: offset ...
    header[398:410] = b"%011o\0" % len(stored)  # ... and its length
    header[482:483] = b"\0"  # no extended sparse headers
    header[483:495] = b"%011o\0" % realsize
    _checksum(header)
    padding = b"\0" * (-len(stored) % 512)
    return bytes(header) + stored + padding


def _pax_sparse(name: str, realsize: int) -> tuple[tarfile.TarInfo, bytes]:
    """A pax 1.0 sparse member: a regular type, its map at the start of its data."""
    data_map = f"1\n{realsize - 1}\n1\n".encode().ljust(512, b"\0") + b"x"
    info = _info(f"GNUSparseFile.0/{name}", size=len(data_map))
    info.pax_headers = {
        "GNU.sparse.major": "1",
        "GNU.sparse.minor": "0",
        "GNU.sparse.name": name,
        "GNU.sparse.realsize": str(realsize),
    }
    return info, data_map


def _with_raw_member(good: bytes, raw: bytes) -> bytes:
    """``good`` with a raw member appended before its end-of-archive blocks."""
    end = len(good)
    while good[end - 512 : end] == b"\0" * 512:
        end -= 512
    return good[:end] + raw + b"\0" * 1024


def stored_artifacts(store: Store) -> set[str]:
    """Every artifact the store holds, however it holds it (files, rows, request deltas)."""
    if isinstance(store, SQLiteStore):
        assert store.root is not None
        files = {p.name for p in (store.root / "artifacts").rglob("*") if p.is_file()}
        conn = sqlite3.connect(store.root / "threads.db")
        try:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
            deltas = (
                {r[0] for r in conn.execute("SELECT sha256 FROM request_deltas")}
                if "request_deltas" in tables
                else set()
            )
        finally:
            conn.close()
        return {f for f in files if not f.startswith(".")} | deltas
    assert isinstance(store, PostgresStore)
    rows = fetch_all(store.schema, "SELECT sha256 FROM artifacts")
    tables = fetch_all(
        store.schema,
        "SELECT 1 FROM information_schema.tables WHERE table_schema = current_schema()"
        " AND table_name = 'request_deltas'",
    )
    deltas = fetch_all(store.schema, "SELECT sha256 FROM request_deltas") if tables else []
    return {r[0] for r in rows} | {r[0] for r in deltas}


async def _refused(store: Store, data: bytes, code: str, **kwargs: int) -> StoreError:
    with pytest.raises(StoreError) as caught:
        await import_log(store, data, tenant_id=TENANT, **kwargs)
    assert caught.value.code == code, caught.value
    assert await store.list_threads() == []
    assert stored_artifacts(store) == set()
    return caught.value


SHA = "ab" * 32


@pytest.mark.parametrize(
    ("member", "named"),
    [
        (_info(f"artifacts/{SHA}", tarfile.LNKTYPE, linkname=BUNDLE_LOG), "a hard link"),
        (_info(f"artifacts/{SHA}", tarfile.SYMTYPE, linkname="/etc/passwd"), "a symlink"),
        (_info(f"artifacts/{SHA}", tarfile.CHRTYPE, devmajor=1, devminor=5), "a character"),
        (_info(f"artifacts/{SHA}", tarfile.BLKTYPE, devmajor=7, devminor=0), "a block"),
        (_info(f"artifacts/{SHA}", tarfile.FIFOTYPE), "a FIFO"),
        (_info(f"artifacts/{SHA}", tarfile.DIRTYPE), "a directory"),
        (_info(f"artifacts/{SHA}", tarfile.CONTTYPE), "a contiguous"),
        (_info("/etc/cron.d/evil"), "'/etc/cron.d/evil'"),
        (_info("../evil"), "'../evil'"),
        (_info(f"artifacts/../{BUNDLE_LOG}"), "'artifacts/../log.jsonl'"),
        (_info(f"artifacts/{EXTRA_SHA}\n", size=len(EXTRA)), f"'artifacts/{EXTRA_SHA}\\n'"),
        (_info(f"artifacts/{EXTRA_SHA.upper()}", size=len(EXTRA)), EXTRA_SHA.upper()),
        (_info(f"artifacts/sha256/{EXTRA_SHA[:2]}/{EXTRA_SHA}", size=len(EXTRA)), "sha256/"),
        (_info(BUNDLE_LOG, size=len(EXTRA)), "log.jsonl twice"),
    ],
    ids=[
        "hard_link", "symlink", "char_device", "block_device", "fifo", "directory",
        "contiguous", "absolute", "dotdot", "dotdot_inside", "newline", "uppercase",
        "store_layout", "second_log",
    ],
)
async def test_a_member_that_is_not_a_plain_bundle_file_is_refused(
    store: Store, clock: FakeClock, member: tarfile.TarInfo, named: str
) -> None:
    error = await _refused(store, _tar(_log(clock), [(member, EXTRA)]), "invalid_argument")
    assert named in error.message


async def test_an_artifact_member_twice_is_refused(store: Store, clock: FakeClock) -> None:
    log = _log(clock)
    sha, data = next(iter(log.artifacts.items()))
    again = (_info(f"artifacts/{sha}", size=len(data)), data)
    error = await _refused(store, _tar(log, [again]), "invalid_argument")
    assert "twice" in error.message


async def test_a_pax_header_is_refused(store: Store, clock: FakeClock) -> None:
    member = _info(f"artifacts/{EXTRA_SHA}", size=len(EXTRA))
    member.pax_headers = {"comment": "anything"}
    data = _tar(_log(clock), [(member, EXTRA)], fmt=tarfile.PAX_FORMAT)
    assert "pax" in (await _refused(store, data, "invalid_argument")).message


async def test_a_pax_global_header_is_refused(store: Store, clock: FakeClock) -> None:
    log = _log(clock)
    final = io.BytesIO()
    with tarfile.open(fileobj=final, mode="w", format=tarfile.PAX_FORMAT,
                      pax_headers={"path": BUNDLE_LOG}) as tar:
        for name, data in [(BUNDLE_LOG, log.export()), *log.artifacts.items()]:
            member = _info(name if name == BUNDLE_LOG else f"artifacts/{name}", size=len(data))
            tar.addfile(member, io.BytesIO(data))
    assert "global" in (await _refused(store, final.getvalue(), "invalid_argument")).message


async def test_a_pax_sparse_member_is_refused(store: Store, clock: FakeClock) -> None:
    member, data_map = _pax_sparse(f"artifacts/{EXTRA_SHA}", 3 << 30)
    data = _tar(_log(clock), [(member, data_map)], fmt=tarfile.PAX_FORMAT)
    assert "sparse" in (await _refused(store, data, "invalid_argument")).message


async def test_a_member_declaring_more_bytes_than_the_file_holds_is_refused(
    store: Store, clock: FakeClock
) -> None:
    data = _tar(_log(clock), [(_info(f"artifacts/{EXTRA_SHA}", size=len(EXTRA)), EXTRA)])
    header_at = data.index(f"artifacts/{EXTRA_SHA}".encode())
    header = bytearray(data[header_at : header_at + 512])
    header[124:136] = b"%011o\0" % (1 << 30)  # claims 1 GiB; the archive ends long before
    _checksum(header)
    cut = data[:header_at] + bytes(header) + EXTRA
    await _refused(store, cut, "invalid_argument")


async def test_an_artifact_that_does_not_match_its_name_is_refused(
    store: Store, clock: FakeClock
) -> None:
    member = _info(f"artifacts/{SHA}", size=len(EXTRA))
    await _refused(store, _tar(_log(clock), [(member, EXTRA)]), "artifact_corrupt")


async def test_a_7_kib_bundle_with_a_sparse_3_gib_member_is_refused_before_any_is_read(
    store: Store, clock: FakeClock, tmp_path: Path
) -> None:
    """The first report's file: a small tar whose sparse member expands to 3 GiB of zeros
    when read. Refused from its header (``invalid_argument``): nothing near its size is ever
    allocated (nor the 512 MiB bound the file is read under), and nothing is stored."""
    good = _tar(_log(clock), [])
    sparse = _with_raw_member(good, _gnu_sparse(f"artifacts/{EXTRA_SHA}", 3 << 30, b"x"))
    path = tmp_path / "sparse.bundle"
    path.write_bytes(sparse)
    assert len(sparse) < 16 * 1024
    with tarfile.open(path) as tar:  # what the file claims: a 3 GiB sparse member
        claimed = tar.getmember(f"artifacts/{EXTRA_SHA}")
        assert claimed.issparse()
        assert claimed.size == 3 << 30
    tracemalloc.start()
    try:
        with pytest.raises(StoreError) as caught:
            await import_from_path(store, path, tenant_id=TENANT)  # the default bound
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.code == "invalid_argument"
    assert "a sparse file" in caught.value.message
    assert peak < 8 << 20, peak
    assert await store.list_threads() == []
    assert stored_artifacts(store) == set()


async def test_what_a_bundle_expands_to_is_bounded_per_member_and_in_total(
    store: Store, clock: FakeClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Bytes are counted as they are read: past a member's bound, or the bundle's total
    (``max_bytes``, the same bound the file itself has), the import stops with
    ``import_too_large`` and stores nothing."""
    log = _log(clock)
    big = os.urandom(64 * 1024)
    data = _tar(log, [(_info(f"artifacts/{sha256_hex(big)}", size=len(big)), big)])
    monkeypatch.setattr(bundle, "MAX_ARTIFACT_BYTES", len(big) - 1)
    error = await _refused(store, data, "import_too_large")
    assert f"member 'artifacts/{sha256_hex(big)}' expands past" in error.message
    monkeypatch.undo()
    total = len(log.export()) + 1000  # the log fits; the members together do not
    error = await _refused(store, data, "import_too_large", max_bytes=total)
    assert f"past {total} bytes in all" in error.message


async def test_only_artifacts_the_log_references_are_stored_and_a_reimport_adds_none(
    store: Store, clock: FakeClock
) -> None:
    """50 stray members (well formed, each matching its name) beside the log's own: the
    import stores only what the log references, and so does a re-import."""
    log = _log(clock)
    strays = {sha256_hex(b"stray %d" % i): b"stray %d" % i for i in range(50)}
    data = write_bundle(log.export(), {**log.artifacts, **strays})
    first = await import_log(store, data, tenant_id=TENANT)
    assert first.stored
    assert first.unreferenced_members == 50
    assert stored_artifacts(store) == set(log.artifacts)
    again = await import_log(store, data, tenant_id=TENANT)
    assert not again.stored
    assert stored_artifacts(store) == set(log.artifacts)


async def test_an_import_refused_for_conflicting_lines_stores_none_of_its_artifacts(
    store: Store, clock: FakeClock
) -> None:
    log = _log(clock)
    await import_log(store, log.export(), tenant_id=TENANT)  # no artifacts: a plain export
    rival = SampleLog(clock)
    rival.header = log.header  # the same branch, other lines
    rival.started()
    rival.turn(text="other", reply="lines")
    with pytest.raises(StoreError) as caught:
        await import_log(store, write_bundle(rival.export(), rival.artifacts), tenant_id=TENANT)
    assert caught.value.code == "seq_conflict"
    assert stored_artifacts(store) == set()
