"""One store directory for both languages: a directory laid out the way threads-ts writes it
opens, inspects and forks here, and a directory written here passes the same checks.

The threads-ts directories are built with plain ``sqlite3`` and ``os`` calls, never our store:
the v6 tables (``reference_schema.REFERENCE_DDL``, written from the specs), one ``threads`` row, one
``branches`` row per segment and the exact line bytes of the conformance logs threads-ts wrote
(``log.threads-ts.jsonl``), and each case artifact as a 0600 file at
``artifacts/sha256/<ab>/<hex>`` in 0700 directories. No vendored threads-ts log has a fork
point, so the fork test uses ``fork-at-snapshot-ok``'s log with its header's writer set to
threads-ts and its chain linked again. ``check_layout`` states the layout from the digest
(tables, columns, keys, user_version, WAL, artifact paths and modes) independently of our DDL.
"""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from reference_schema import KNOWN_COLUMNS, REFERENCE_DDL, UNKNOWN_LAYOUT

from shared_data import CASES, TS_LOGS, needs, needs_ts_logs
from threads import Completed, Failed, FakeClock, Principal, agent, open_thread, sqlite, tool
from threads.cli.main import main
from threads.log.canonical import canonical
from threads.log.hashing import sha256_hex
from threads.log.verify import verify_export
from threads.run.thread import Thread
from threads.run.turn_open import refusal
from threads.testing.scripted import call, say, scripted_model, use

# The v6 tables and the columns the specs give them (``reference_schema``); the tables named
# without columns (``UNKNOWN_LAYOUT``) are the reference's to create.
V6_COLUMNS: dict[str, set[str]] = {table: set(columns) for table, columns in KNOWN_COLUMNS.items()}
PRIMARY_KEYS = {
    "events": ["branch_id", "seq"],
    "budget_ledger": ["budget_id", "limit_name", "attempt_key"],
    "run_receipts": ["tenant_id", "operation", "idempotency_key"],
    "observer_cursors": ["observer", "branch_id"],
    "questions": ["branch_id", "call_id"],
    "memory_bindings": ["namespace", "record_id"],
    "observer_losses": ["observer", "thread_id", "deleted_at"],
}
OURS_ONLY = {"request_deltas", "local_memory", "fold_snapshots"}  # a v6 reader ignores these


def check_layout(root: Path) -> None:
    """The structural checks a store directory of either language passes."""
    conn = sqlite3.connect(f"file:{root / 'threads.db'}?mode=ro", uri=True)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
        tables = {
            name for (name,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'"
                " AND name NOT LIKE 'sqlite_%' AND name NOT LIKE 'local_memory_fts%'"
            )
        }
        assert "artifacts" not in tables
        known = tables - OURS_ONLY - set(UNKNOWN_LAYOUT)
        assert known == set(V6_COLUMNS), known ^ set(V6_COLUMNS)
        for table, columns in V6_COLUMNS.items():
            info = conn.execute(f"PRAGMA table_info({table})").fetchall()
            have = {row[1] for row in info}
            assert columns <= have, (table, columns - have)
            if table in PRIMARY_KEYS:
                key = [row[1] for row in sorted(info, key=lambda r: r[5]) if row[5]]
                assert key == PRIMARY_KEYS[table], (table, key)
            strict = conn.execute(
                "SELECT sql FROM sqlite_master WHERE name = ?", (table,)
            ).fetchone()[0]
            assert strict.rstrip().endswith("STRICT"), table
        unique = [
            [c[2] for c in conn.execute(f"PRAGMA index_info({index[1]})")]
            for index in conn.execute("PRAGMA index_list(threads)") if index[2]
        ]
        assert ["thread_id", "tenant_id"] in unique
        keys = conn.execute("PRAGMA foreign_key_list(branches)").fetchall()
        composite = sorted((k[3], k[4]) for k in keys if k[2] == "threads")
        assert composite == [("tenant_id", "tenant_id"), ("thread_id", "thread_id")]
    finally:
        conn.close()
    writable = sqlite3.connect(root / "threads.db")
    try:
        for sql in ("INSERT INTO budget_ledger VALUES ('b', 'max_turns', 'k', 1, 'reserved')",
                    "INSERT INTO budget_ledger VALUES ('b', 'max_input_tokens', 'k', -1,"
                    " 'reserved')",
                    "INSERT INTO questions VALUES ('t', 'b', 'c', 1, 'closed', NULL)"):
            with pytest.raises(sqlite3.IntegrityError, match="CHECK"):
                writable.execute(sql)
    finally:
        writable.rollback()
        writable.close()
    _check_artifact_files(root / "artifacts")


def _check_artifact_files(base: Path) -> None:
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    for path in base.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        if path.is_dir():
            assert mode == 0o700, path
            continue
        assert mode == 0o600, path
        relative = path.relative_to(base).parts
        assert relative[:1] == ("sha256",), path
        assert len(relative) == 3, path
        assert relative[1] == relative[2][:2]
        assert sha256_hex(path.read_bytes()) == relative[2]


# ---- a directory the way threads-ts lays it out ----------------------------------------------


def write_ts_store(root: Path, log: bytes, artifacts: dict[str, bytes], tenant: str) -> None:
    os.mkdir(root, 0o700)
    conn = sqlite3.connect(root / "threads.db", isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.executescript(REFERENCE_DDL)
    conn.execute("BEGIN")
    verified = verify_export(log)
    dropped_ref = None
    if verified.torn is not None:
        artifacts = {**artifacts, sha256_hex(verified.torn.data): verified.torn.data}
        dropped_ref = canonical({"bytes": len(verified.torn.data),
                                 "media_type": "application/octet-stream",
                                 "sha256": sha256_hex(verified.torn.data)}).decode()
    parent = None
    for index, segment in enumerate(verified.segments):
        header = segment.header
        own = index == len(verified.segments) - 1
        if parent is None:
            conn.execute("INSERT INTO threads VALUES (?, ?)", (header.thread_id, tenant))
        last = segment.events[-1]
        repair = segment.events[0].type == "fork" and segment.events[0].data["reason"] == "repair"
        conn.execute(
            "INSERT INTO branches(branch_id, thread_id, tenant_id, parent_branch_id, fork_at_seq,"
            " header_line, state, head_seq, head_hash, head_verified, dropped_ref)"
            " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (header.branch_id, header.thread_id, tenant, parent, segment.fork_at_seq,
             header.line, "inspection_only" if repair else "ready", last.seq, last.hash,
             int(verified.head_verified or not own), dropped_ref if own else None),
        )
        conn.executemany(
            "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(header.branch_id, e.seq, e.event_id, e.type, e.type_version, int(e.critical),
              e.epoch, e.line) for e in segment.events],
        )
        parent = header.branch_id
    conn.execute("COMMIT")
    conn.close()
    os.mkdir(root / "artifacts", 0o700)
    os.mkdir(root / "artifacts" / "sha256", 0o700)
    for sha256, data in artifacts.items():
        shard = root / "artifacts" / "sha256" / sha256[:2]
        shard.mkdir(mode=0o700, exist_ok=True)
        fd = os.open(shard / sha256, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(data)


def _case_artifacts(case: Path) -> dict[str, bytes]:
    folder = case / "artifacts"
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())} if folder.is_dir() else {}


def _principal(log: bytes) -> Principal:
    for raw in log.split(b"\n"):
        try:
            actor = json.loads(raw).get("actor", {})
        except ValueError:
            continue
        if "principal" in actor:
            p = actor["principal"]
            return Principal(p["issuer"], p["tenant"], p["subject"])
    return Principal("api", "acme", "nobody")


def _expected_state(case: Path) -> dict[str, Any] | None:
    path = case / "expected.threads-ts.json"
    return json.loads(path.read_text())["state"] if path.exists() else None


class Note(BaseModel):
    text: str


def _agent(replies: list[Any]) -> Any:
    async def fetch(args: Note, ctx: Any) -> str:
        return "0123456789abcdef" * 5000  # 80,000 bytes: kept as an artifact file

    return agent(
        name="demo", model=scripted_model(replies),
        tools=[tool(name="fetch", description="Fetch.", input=Note, execute=fetch,
                    effect="read_only")],
    )


@needs_ts_logs()
@pytest.mark.parametrize("log_path", TS_LOGS, ids=[p.parent.name for p in TS_LOGS])
def test_a_store_threads_ts_wrote_opens_and_inspects_here(
    tmp_path: Path, log_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    case = log_path.parent
    log = log_path.read_bytes()
    principal = _principal(log)
    root = tmp_path / "ts"
    write_ts_store(root, log, _case_artifacts(case), principal.tenant)
    check_layout(root)
    thread_id = asyncio.run(_inspect(root, case, log, principal))
    capsys.readouterr()
    assert main(["ls", "--store", str(root), "--tenant", principal.tenant]) == 0
    assert thread_id in capsys.readouterr().out
    assert main(["timeline", thread_id, "--store", str(root), "--tenant", principal.tenant]) == 0
    assert "user_input" in capsys.readouterr().out
    check_layout(root)  # reading changed nothing a threads-ts reader relies on


async def _inspect(root: Path, case: Path, log: bytes, principal: Principal) -> str:
    now = json.loads((case / "case.json").read_text())["clock"]["now"]
    store = sqlite(root, clock=FakeClock(now))
    try:
        [thread] = await store.list_threads(principal.tenant)
        own = verify_export(log).segments[-1].header.branch_id
        state = (await store.read_chain(own)).fold(now).state()
        expected = _expected_state(case)
        if expected is not None and case.name != "tools-changed-after-call-keeps-call-spec":
            assert state == expected  # (that case's expected usage disagrees with its log)
        handle = await open_thread(store, thread.thread_id, principal=principal)
        root_state = (await store.read_chain(thread.branch_id)).fold(now).state()
        assert (await handle.state()).status == root_state["status"]
        for sha256, data in _case_artifacts(case).items():
            assert await store.get_artifact(sha256) == data  # read from the reference path
    finally:
        await store.close()
    return thread.thread_id


def _as_written_by_ts(log: bytes) -> bytes:
    """``log`` with its header's writer set to threads-ts and the chain linked again."""
    lines = [json.loads(raw) for raw in log.split(b"\n") if raw]
    out: list[bytes] = []
    previous = b""
    for line in lines:
        if line.get("format") == "threads.log":
            line["writer"] = {"impl": "threads-ts", "version": "0.9.0"}
        elif line.get("format") == "threads.head":
            line["hash"] = sha256_hex(previous)
        else:
            line["prev_hash"] = sha256_hex(previous)
        previous = canonical(line)
        out.append(previous)
    return b"\n".join(out) + b"\n"


@needs(CASES / "fork-at-snapshot-ok", "the conformance case fork-at-snapshot-ok")
async def test_a_thread_threads_ts_wrote_forks_here_and_only_the_fork_takes_appends(
    tmp_path: Path,
) -> None:
    case = CASES / "fork-at-snapshot-ok"
    spec = json.loads((case / "case.json").read_text())
    log = _as_written_by_ts((case / "log.jsonl").read_bytes())
    principal = _principal(log)
    root = tmp_path / "ts"
    write_ts_store(root, log, {}, principal.tenant)
    store = sqlite(root, clock=FakeClock(spec["clock"]["now"]))
    try:
        [root_branch] = await store.list_threads(principal.tenant)
        before = await store.stored_lines(root_branch.branch_id)

        async def restore(snapshot: dict[str, Any]) -> str:
            return "restored-" + snapshot["snapshot_id"]

        thread = Thread(store, root_branch.thread_id)
        child = await thread.fork(spec["input"]["fork_at_event_id"], restore)
        chain = await store.read_chain(child)
        header = json.loads(chain.segments[-1].header.line)
        assert header["writer"]["impl"] == "threads-py"
        assert chain.segments[0].header.writer_impl == "threads-ts"
        assert chain.events[-1].type == "fork"
        assert await store.stored_lines(root_branch.branch_id) == before  # parent untouched

        refused = await _agent([say("hello")]).run(
            "more", thread=root_branch.thread_id, store=store, principal=principal
        )
        assert isinstance(refused, Failed)
        assert refused.error.code == "writer_mismatch"
        assert await store.stored_lines(root_branch.branch_id) == before
        lease = await store.acquire_lease(child, "runner", 60_000)  # the fork is ours to run
        child_chain = await store.read_chain(child)
        assert refusal(child_chain.branch.state, child_chain.fold(store.clock.now_ms())) is None
        await store.release_lease(lease)
    finally:
        await store.close()
    check_layout(root)


async def test_a_directory_written_here_passes_the_same_checks(tmp_path: Path) -> None:
    root = tmp_path / "py"
    alice = Principal("api", "acme", "alice")
    store = sqlite(root, clock=FakeClock())
    try:
        result = await _agent([use(call("fetch", text="a")), say("done")]).run(
            "go", store=store, principal=alice
        )
        assert isinstance(result, Completed)

        def pragmas(conn: sqlite3.Connection) -> list[int]:
            names = ("synchronous", "foreign_keys", "fullfsync", "checkpoint_fullfsync")
            return [conn.execute(f"PRAGMA {name}").fetchone()[0] for name in names]

        assert await store._run(pragmas) == [2, 1, 1, 1]  # FULL, ON, ON, ON
    finally:
        await store.close()
    files = list((root / "artifacts" / "sha256").rglob("*/*"))
    assert len(files) == 1
    assert files[0].stat().st_size == 80_000
    check_layout(root)


@pytest.mark.parametrize("version", [5, 7])
async def test_other_versions_and_our_old_layout_are_unsupported_format(
    tmp_path: Path, version: int
) -> None:
    for name, setup in (
        ("version", f"PRAGMA user_version = {version}"),
        ("old", "CREATE TABLE artifacts (sha256 TEXT PRIMARY KEY); PRAGMA user_version = 6"),
    ):
        root = tmp_path / f"{name}{version}"
        root.mkdir()
        conn = sqlite3.connect(root / "threads.db")
        conn.executescript(setup)
        conn.close()
        store = sqlite(root)
        try:
            with pytest.raises(Exception) as err:
                await store.list_threads()
            assert getattr(err.value, "code", None) == "unsupported_format"
        finally:
            await store.close()


@needs_ts_logs()
async def test_our_first_request_in_a_threads_ts_directory_adds_only_our_table(
    tmp_path: Path,
) -> None:
    case = TS_LOGS[0].parent
    log = TS_LOGS[0].read_bytes()
    root = tmp_path / "ts"
    write_ts_store(root, log, _case_artifacts(case), "acme")
    request = b'{"adapter":{},"tools":[]}\n{"content":[{"text":"hi","type":"text"}]}\n'
    reader, writer = sqlite(root), sqlite(root)  # two processes' views of one directory
    try:
        with pytest.raises(Exception) as err:
            await reader.get_artifact(sha256_hex(request))  # before any table of ours
        assert getattr(err.value, "code", None) == "artifact_missing"
        ref = await writer.put_artifact(request, "application/x-ndjson")
        assert await writer.get_artifact(ref["sha256"]) == request
        assert await reader.get_artifact(ref["sha256"]) == request  # made by the other one
    finally:
        await reader.close()
        await writer.close()
    conn = sqlite3.connect(root / "threads.db")
    tables = {n for (n,) in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    conn.close()
    assert tables - set(V6_COLUMNS) - set(UNKNOWN_LAYOUT) == {"request_deltas"}
    check_layout(root)
