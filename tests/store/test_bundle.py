"""Bundles move a thread between stores with its artifacts; ``verify --store`` checks them.

A thread whose tool result (> 64 KiB) lives only in an artifact, and one that crashed between
``effect_commit`` and ``tool_result`` (its result only in the commit's artifact), continue after
export → import SQLite → Postgres → SQLite. A bundle that lacks an artifact is refused with the
missing refs; ``verify --store`` finds a deleted or altered artifact and a row whose derived
columns were edited; an import never reads more than its bound.
"""

from __future__ import annotations

import io
import sqlite3
import tarfile
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from postgres_support import POSTGRES_MARKS, drop_store, open_postgres
from threads import Completed, FakeClock, Principal, agent, open_thread, sqlite, tool
from threads.cli.main import main
from threads.errors import StoreError
from threads.log.refs import referenced_artifacts
from threads.store.bundle import BUNDLE_LOG, read_bundle, write_bundle
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore
from threads.store.transfer import export_bundle, import_from_path, import_log
from threads.testing.scripted import call, say, scripted_model, use

ALICE = Principal("api", "acme", "alice")
BIG = "0123456789abcdef" * 5000  # 80,000 bytes: stored by artifact, not inline


class Note(BaseModel):
    text: str


def _agent(replies: list[Any]) -> Any:
    async def fetch(args: Note, ctx: Any) -> str:
        return BIG

    async def send(args: Note, ctx: Any) -> str:
        return "sent:" + args.text + ":" + BIG[:70_000]

    return agent(
        name="mover",
        model=scripted_model(replies),
        tools=[
            tool(name="fetch", description="Fetch.", input=Note, execute=fetch,
                 effect="read_only"),
            tool(name="send", description="Send.", input=Note, execute=send,
                 effect="idempotent", dedup_window_ms=86_400_000),
        ],
    )


def _script() -> list[Any]:
    return [use(call("fetch", text="a")), use(call("send", text="b")), say("done"),
            say("again")]


async def _move(source: Store, target: Store, thread_id: str) -> None:
    branch = await source.root_branch(thread_id)
    bundle = await export_bundle(source, branch.branch_id)
    result = await import_log(target, bundle, tenant_id=ALICE.tenant)
    assert result.stored
    assert result.missing_artifacts == ()
    assert await export_bundle(target, branch.branch_id) == bundle  # byte-identical


def _crash_after_commit(store: SQLiteStore, thread_id: str) -> None:
    """Cut the log right after the first effect_commit: what a SIGKILL there leaves."""
    assert store.root is not None
    conn = sqlite3.connect(store.root / "threads.db")
    try:
        with conn:
            (seq,) = conn.execute(
                "SELECT min(seq) FROM events WHERE type = 'effect_commit'"
            ).fetchone()
            (line,) = conn.execute("SELECT line FROM events WHERE seq = ?", (seq,)).fetchone()
            conn.execute("DELETE FROM events WHERE seq > ?", (seq,))
            from threads.log.hashing import sha256_hex

            conn.execute(
                "UPDATE branches SET head_seq = ?, head_hash = ? WHERE thread_id = ?",
                (seq, sha256_hex(bytes(line)), thread_id),
            )
    finally:
        conn.close()


@pytest.mark.parametrize("crashed", [False, True], ids=["large_result", "crash_after_commit"])
@pytest.mark.parametrize("_pg", [pytest.param(0, marks=POSTGRES_MARKS)])
async def test_a_bundle_moves_a_thread_sqlite_postgres_sqlite_and_it_continues(
    tmp_path: Path, crashed: bool, _pg: int
) -> None:
    clock = FakeClock()
    first = sqlite(tmp_path / "a", clock=clock)
    shared = open_postgres(clock)
    last = sqlite(tmp_path / "c", clock=clock)
    try:
        bot = _agent(_script())
        result = await bot.run("go", store=first, principal=ALICE)
        assert isinstance(result, Completed)
        thread_id = result.thread.id
        timeline = await result.thread.timeline()
        big = [e for e in timeline if e.type == "tool_result" and "ref" in e.data]
        assert big, "the large results are stored by artifact"
        if crashed:
            _crash_after_commit(first, thread_id)

        await _move(first, shared, thread_id)
        moved = _agent(_script())
        again = await moved.run("more", thread=thread_id, store=shared, principal=ALICE)
        assert isinstance(again, Completed), again
        events = await again.thread.timeline()
        if crashed:
            origins = [e.data["origin"] for e in events if e.type == "tool_result"]
            assert "materialized_from_commit" in origins
        await _move(shared, last, thread_id)
        final = await (await open_thread(last, thread_id, principal=ALICE)).state()
        assert final.status == "idle"
        branch = await last.root_branch(thread_id)
        chain = await last.read_chain(branch.branch_id)
        for sha256 in referenced_artifacts(chain.events):
            await last.get_artifact(sha256)
    finally:
        await first.close()
        await last.close()
        await shared.close()
        await drop_store(shared)


async def test_a_bundle_that_lacks_an_artifact_is_refused_with_the_missing_refs(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    source = sqlite(tmp_path / "a", clock=clock)
    target = sqlite(tmp_path / "b", clock=clock)
    result = await _agent(_script()).run("go", store=source, principal=ALICE)
    branch = await source.root_branch(result.thread.id)
    log, artifacts = read_bundle(await export_bundle(source, branch.branch_id), max_bytes=1 << 30)
    dropped = next(iter(artifacts))
    del artifacts[dropped]
    with pytest.raises(StoreError) as caught:
        await import_log(target, write_bundle(log, artifacts), tenant_id=ALICE.tenant)
    assert caught.value.code == "artifact_missing"
    assert dropped in caught.value.message
    assert await target.list_threads() == []  # nothing imported

    altered = dict(artifacts)
    altered[dropped] = b"not the bytes"
    with pytest.raises(StoreError) as caught:
        read_bundle(write_bundle(log, altered), max_bytes=1 << 30)
    assert caught.value.code == "artifact_corrupt"
    await source.close()
    await target.close()


async def test_a_bundle_holds_the_export_byte_exact_and_only_its_artifacts(
    tmp_path: Path,
) -> None:
    clock = FakeClock()
    store = sqlite(tmp_path / "a", clock=clock)
    result = await _agent(_script()).run("go", store=store, principal=ALICE)
    bundle = await result.thread.export(tmp_path / "t.bundle", bundle=True)
    assert (tmp_path / "t.bundle").read_bytes() == bundle
    with tarfile.open(fileobj=io.BytesIO(bundle)) as tar:
        names = tar.getnames()
        member = tar.extractfile(BUNDLE_LOG)
        assert member is not None
        assert member.read() == await result.thread.export()
    branch = await store.root_branch(result.thread.id)
    chain = await store.read_chain(branch.branch_id)
    assert names == [BUNDLE_LOG, *(f"artifacts/{s}" for s in referenced_artifacts(chain.events))]
    await store.close()


# ---- verify --store ------------------------------------------------------------------------


@pytest.fixture
def written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    import asyncio

    monkeypatch.chdir(tmp_path)

    async def write() -> None:
        store = sqlite(tmp_path / "s", clock=FakeClock())
        await _agent(_script()).run("go", store=store, principal=ALICE)
        await store.close()

    asyncio.run(write())
    assert main(["verify", "--store", "s"]) == 0
    return tmp_path / "s"


def _sql(store_dir: Path, statement: str) -> None:
    conn = sqlite3.connect(store_dir / "threads.db")
    try:
        with conn:
            assert conn.execute(statement).rowcount >= 1
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("edit", "code"),
    [
        ("UPDATE events SET epoch = 999 WHERE seq = 3", "log_corrupt: at seq 3: "),
        ("UPDATE events SET type = 'steer' WHERE seq = 2", "log_corrupt: at seq 2: "),
        ("DELETE FROM request_deltas WHERE rowid = (SELECT min(rowid) FROM request_deltas)",
         "artifact_missing"),
        ("UPDATE request_deltas SET middle = CAST('#' || substr(middle, 2) AS BLOB)"
         " WHERE rowid = (SELECT min(rowid) FROM request_deltas)", "artifact_corrupt"),
    ],
    ids=["epoch", "type", "deleted_request_artifact", "altered_request_artifact"],
)
def test_verify_store_finds_edited_rows_and_damaged_artifacts(
    written: Path, capsys: pytest.CaptureFixture[str], edit: str, code: str
) -> None:
    capsys.readouterr()
    _sql(written, edit)
    assert main(["verify", "--store", str(written)]) == 1
    captured = capsys.readouterr()
    assert f"FAILED {code}" in captured.out
    assert "Traceback" not in captured.err


def test_export_bundle_refuses_a_branch_with_a_missing_artifact(
    written: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _sql(written, "DELETE FROM request_deltas WHERE rowid = (SELECT min(rowid) FROM request_deltas)"
         )
    conn = sqlite3.connect(written / "threads.db")
    (branch_id,) = conn.execute("SELECT branch_id FROM branches").fetchone()
    conn.close()
    capsys.readouterr()
    assert main(["export", branch_id, "--store", str(written), "--tenant", "acme", "--bundle",
                 "-o", "b"]) == 1
    assert capsys.readouterr().err.startswith("error: artifact_missing")


def test_cli_bundle_round_trip(written: Path, capsys: pytest.CaptureFixture[str]) -> None:
    conn = sqlite3.connect(written / "threads.db")
    (branch_id,) = conn.execute("SELECT branch_id FROM branches").fetchone()
    conn.close()
    assert main(["export", branch_id, "--store", str(written), "--tenant", "acme", "--bundle",
                 "-o", "b.tar"]) == 0
    assert main(["verify", "b.tar"]) == 0
    assert main(["import", "b.tar", "--store", "other", "--tenant", "acme"]) == 0
    assert main(["verify", "--store", "other"]) == 0
    out = capsys.readouterr()
    assert "warning" not in out.err
    assert main(["export", branch_id, "--store", str(written), "--tenant", "acme",
                 "-o", "plain.jsonl"]) == 0
    assert main(["import", "plain.jsonl", "--store", "third", "--tenant", "acme"]) == 0
    assert "warning: this store lacks" in capsys.readouterr().err


# ---- bounded reads -------------------------------------------------------------------------


async def test_import_of_an_endless_input_is_refused_with_a_code(tmp_path: Path) -> None:
    store = sqlite(tmp_path / "s", clock=FakeClock())
    with pytest.raises(StoreError) as caught:
        await import_from_path(store, "/dev/zero", tenant_id="t", max_bytes=1 << 20)
    assert caught.value.code == "import_too_large"
    await store.close()


def test_cli_import_of_dev_zero_is_import_too_large(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    store = tmp_path / "s"
    assert main(["import", "/dev/zero", "--store", str(store), "--max-bytes", "1000000"]) == 1
    assert capsys.readouterr().err.startswith("error: import_too_large")
