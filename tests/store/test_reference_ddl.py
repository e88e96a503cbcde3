"""A directory this project writes is one the reference can open (issue 28 item 9).

The reference runs its whole ``store.sql`` on every open. Its text is built here from the specs
(``reference_schema.REFERENCE_DDL``), so these tests run it over directories written here, old
and new, and write into a directory laid out by it the way a TypeScript host would find it.
"""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from reference_schema import KNOWN_COLUMNS, NEWER_INDEXES, REFERENCE_DDL, UNKNOWN_LAYOUT

import threads.store.sqlite.store as sqlite_engine
from postgres_support import fetch_all, fetch_one, needs_postgres, open_postgres
from threads import Completed, FakeClock, Principal, agent, sqlite, tool
from threads.cli.main import main
from threads.errors import StoreError
from threads.log.canonical import canonical
from threads.log.hashing import sha256_hex
from threads.store import layout
from threads.store.capabilities import controls_of
from threads.store.postgres import PostgresStore
from threads.testing.sample_log import SampleLog
from threads.testing.scripted import call, say, scripted_model, use

UUID7 = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
ALICE = Principal("api", "local", "alice")


def run_reference_open(root: Path, extra: str = "") -> None:
    """What the reference does to a directory it opens: its whole DDL (it creates the tables
    it finds missing, and every index)."""
    conn = sqlite3.connect(root / "threads.db")
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 6
        conn.executescript(REFERENCE_DDL + extra)
    finally:
        conn.close()


def check_reference_columns(root: Path) -> None:
    """Every table and column the specs give, with its declared type and key."""
    conn = sqlite3.connect(root / "threads.db")
    try:
        for table, columns in KNOWN_COLUMNS.items():
            have = {row[1]: (row[2], row[5]) for row in conn.execute(f"PRAGMA table_info({table})")}
            for column, declared in columns.items():
                assert have.get(column) == declared, (table, column, have.get(column), declared)
    finally:
        conn.close()


class Note(BaseModel):
    text: str


def _agent(replies: list[Any]) -> Any:
    async def fetch(args: Note, ctx: Any) -> str:
        return "0123456789abcdef" * 5000  # kept as an artifact file

    return agent(
        name="demo", model=scripted_model(replies),
        tools=[tool(name="fetch", description="Fetch.", input=Note, execute=fetch,
                    effect="read_only")],
    )


async def _write_here(root: Path) -> str:
    """A directory written by this project: a finished run with a tool and an artifact, and a
    control item queued (and left waiting) for it."""
    store = sqlite(root, clock=FakeClock())
    try:
        result = await _agent([use(call("fetch", text="a")), say("done")]).run(
            "go", store=store, principal=ALICE
        )
        assert isinstance(result, Completed)
        controls = controls_of(store)
        assert controls is not None
        await controls.queue_control(tenant_id="local", thread_id=result.thread.id,
                                     principal=ALICE.to_wire(), command="stop_when_idle")
        return result.thread.id
    finally:
        await store.close()


def test_the_tables_left_to_the_reference_are_the_ones_the_specs_give_no_columns() -> None:
    assert set(layout.UNKNOWN_LAYOUT) == set(UNKNOWN_LAYOUT)
    ours = {t.name for t in layout.SQLITE_TABLES}
    assert ours == set(KNOWN_COLUMNS) | {"request_deltas", "fold_snapshots"}


def test_the_reference_ddl_runs_over_a_directory_written_here_and_it_still_verifies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "py"
    thread_id = asyncio.run(_write_here(root))
    check_reference_columns(root)
    run_reference_open(root, NEWER_INDEXES)  # the newest reference's indexes fit it too
    run_reference_open(root)  # and it opens again
    check_reference_columns(root)
    capsys.readouterr()
    assert main(["verify", "--store", str(root)]) == 0, capsys.readouterr()
    assert main(["timeline", thread_id, "--store", str(root), "--tenant", "local"]) == 0
    # Opened here again after the reference created its own tables: they are left alone.
    asyncio.run(_write_here(root))
    conn = sqlite3.connect(root / "threads.db")
    try:
        for name in UNKNOWN_LAYOUT:
            columns = [row[1] for row in conn.execute(f"PRAGMA table_info({name})")]
            assert columns == ["reference_only"], name
    finally:
        conn.close()
    assert main(["verify", "--store", str(root)]) == 0


def _as_written_by_ts(log: SampleLog) -> list[tuple[Any, ...]]:
    """``log``'s header and events with the writer set to threads-ts, chained again."""
    lines = [json.loads(raw) for raw in log.lines()]
    previous = b""
    out: list[bytes] = []
    for line in lines:
        if line.get("format") == "threads.log":
            line["writer"] = {"impl": "threads-ts", "version": "0.9.0"}
        else:
            line["prev_hash"] = sha256_hex(previous)
        previous = canonical(line)
        out.append(previous)
    return [(json.loads(raw), raw) for raw in out]


def _write_ts_thread(root: Path, clock: FakeClock) -> str:
    """A directory laid out by the reference's DDL holding one thread a TypeScript host wrote,
    in an open turn, with that host holding the lease."""
    log = SampleLog(clock)
    log.started()
    log.add("user_input", {"source": "api", "text": "work"},
            {"kind": "user", "principal": ALICE.to_wire()})
    (header, header_line), *events = _as_written_by_ts(log)
    root.mkdir(mode=0o700)
    (root / "artifacts").mkdir(mode=0o700)
    conn = sqlite3.connect(root / "threads.db", isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.executescript(REFERENCE_DDL)
        thread_id, branch_id = header["thread_id"], header["branch_id"]
        last, last_line = events[-1]
        conn.execute("INSERT INTO threads VALUES (?, ?)", (thread_id, "local"))
        conn.execute(
            "INSERT INTO branches VALUES (?, ?, ?, NULL, NULL, ?, 'ready', ?, ?, 1, NULL)",
            (branch_id, thread_id, "local", header_line, last["seq"], sha256_hex(last_line)),
        )
        for event, line in events:
            conn.execute(
                "INSERT INTO events VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (branch_id, event["seq"], event["event_id"], event["type"],
                 event["type_version"], int(event["critical"]), event["epoch"], line),
            )
        an_hour_on = int(time.time() * 1000) + 3_600_000  # live for the CLI's clock too
        conn.execute("INSERT INTO leases VALUES (?, ?, ?, ?)",
                     (branch_id, "threads-ts:host-b:4242", 1, an_hour_on))
    finally:
        conn.close()
    return str(thread_id)


def test_a_cancel_for_a_thread_a_typescript_host_holds_is_stored_in_the_reference_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "ts"
    thread_id = _write_ts_thread(root, FakeClock())
    who = ["--issuer", ALICE.issuer, "--tenant", ALICE.tenant, "--subject", ALICE.subject]
    assert main(["cancel", thread_id, "--store", str(root), *who]) == 0, capsys.readouterr()
    assert "cancel queued" in capsys.readouterr().out
    conn = sqlite3.connect(root / "threads.db")
    try:
        rows = conn.execute(
            "SELECT typeof(inbox_id), tenant_id, channel, installation_id, item_key, delivery_id,"
            " thread_id, item, consumed_seq FROM inbox"
        ).fetchall()
    finally:
        conn.close()
    [(id_type, tenant, channel, installation, key, delivery, thread, item, consumed)] = rows
    assert (id_type, tenant, channel, installation) == ("integer", "local", "api", "local")
    assert key == delivery
    assert UUID7.match(key)
    assert (thread, consumed) == (thread_id, None)
    assert item == canonical({"address": thread_id, "command": "cancel", "item_key": key,
                              "kind": "control", "principal": ALICE.to_wire()})
    run_reference_open(root)  # still the reference's directory


async def test_an_item_a_typescript_host_queued_is_applied_here_by_its_row_id(
    tmp_path: Path,
) -> None:
    root = tmp_path / "py"
    thread_id = await _write_here(root)
    conn = sqlite3.connect(root / "threads.db")
    try:  # queued by another implementation: the database assigns the id
        item_key = "0190f3a0-0000-7000-8000-000000000001"
        item = canonical({"address": thread_id, "command": "cancel", "item_key": item_key,
                          "kind": "control", "principal": ALICE.to_wire()})
        with conn:
            conn.execute(
                "INSERT INTO inbox(tenant_id, channel, installation_id, item_key, delivery_id,"
                " thread_id, item, received_at) VALUES ('local', 'api', 'local', ?, ?, ?, ?, 1)",
                (item_key, item_key, thread_id, item),
            )
    finally:
        conn.close()
    store = sqlite(root, clock=FakeClock())
    try:
        controls = controls_of(store)
        assert controls is not None
        waiting = {i.item_key: i for i in await controls.pending_controls(thread_id)}
        assert waiting[item_key].inbox_id.isdigit()
        assert await controls.consume_control(waiting[item_key].inbox_id, 7)
        assert not await controls.consume_control(waiting[item_key].inbox_id, 8)
        assert item_key not in {i.item_key for i in await controls.pending_controls(thread_id)}
        with pytest.raises(StoreError) as refused:  # not an id the database could have made
            await controls.consume_control("0190f3a0-0000-7000-8000-000000000001", 9)
        assert refused.value.code == "invalid_argument"
    finally:
        await store.close()


# ---- our earlier layout --------------------------------------------------------------------

# What threads-py wrote before store v6 matched the reference (cb0b30c's ``V6_DDL``), for the
# tables that changed.
EARLIER_TABLES = """
DROP TABLE inbox;
DROP TABLE provider_audit;
CREATE TABLE inbox (inbox_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, channel TEXT NOT NULL,
  installation_id TEXT NOT NULL, item_key TEXT NOT NULL, delivery_id TEXT, thread_id TEXT,
  item BLOB NOT NULL, received_at INTEGER NOT NULL, consumed_seq INTEGER,
  UNIQUE (tenant_id, channel, installation_id, item_key)) STRICT;
CREATE TABLE provider_audit (audit_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL,
  kind TEXT NOT NULL CHECK (kind IN ('memory','knowledge')),
  code TEXT NOT NULL CHECK (code IN ('scope_violation')), namespace TEXT NOT NULL,
  record_id TEXT NOT NULL, at INTEGER NOT NULL) STRICT;
CREATE TABLE schedule_occurrences (tenant_id TEXT NOT NULL, schedule_id TEXT NOT NULL,
  occurrence_at INTEGER NOT NULL, pending INTEGER NOT NULL CHECK (pending IN (0, 1)),
  retired INTEGER NOT NULL DEFAULT 0 CHECK (retired IN (0, 1)), reason TEXT,
  PRIMARY KEY (tenant_id, schedule_id, occurrence_at)) STRICT;
CREATE INDEX schedule_occurrences_pending ON schedule_occurrences(occurrence_at)
  WHERE pending = 1;
CREATE TABLE teams (team_id TEXT PRIMARY KEY, tenant_id TEXT NOT NULL, thread_id TEXT NOT NULL,
  created_at INTEGER NOT NULL) STRICT;
CREATE TABLE team_members (team_id TEXT NOT NULL, member TEXT NOT NULL,
  thread_id TEXT NOT NULL, PRIMARY KEY (team_id, member)) STRICT;
CREATE TABLE mail (mail_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, sender TEXT NOT NULL,
  recipient TEXT NOT NULL, sent_seq INTEGER NOT NULL, claimed_by TEXT,
  claimed_at INTEGER) STRICT;
CREATE TABLE asks (ask_id TEXT PRIMARY KEY, team_id TEXT NOT NULL, asker TEXT NOT NULL,
  target TEXT NOT NULL, state TEXT NOT NULL) STRICT;
CREATE TABLE monitors (team_id TEXT NOT NULL, member TEXT NOT NULL, branch_id TEXT NOT NULL,
  PRIMARY KEY (team_id, member)) STRICT;
CREATE TABLE operator_receipts (tenant_id TEXT NOT NULL, team_id TEXT NOT NULL,
  idempotency_key TEXT NOT NULL, request_id TEXT NOT NULL, created_at INTEGER NOT NULL,
  PRIMARY KEY (tenant_id, team_id, idempotency_key)) STRICT;
CREATE TABLE team_feed (team_id TEXT NOT NULL, seq INTEGER NOT NULL, thread_id TEXT NOT NULL,
  event_seq INTEGER NOT NULL, PRIMARY KEY (team_id, seq)) STRICT;
"""


def _as_earlier_layout(root: Path, thread_id: str, *, team_row: bool = False) -> None:
    """``root`` rewritten into our earlier layout, with two waiting control items in it."""
    conn = sqlite3.connect(root / "threads.db", isolation_level=None)
    try:
        conn.executescript(EARLIER_TABLES)
        for key, at in (("0190f3a0-0000-7000-8000-00000000000b", 2),
                        ("0190f3a0-0000-7000-8000-00000000000a", 1)):
            item = canonical({"address": thread_id, "command": "cancel", "item_key": key,
                              "kind": "control", "principal": ALICE.to_wire()})
            conn.execute("INSERT INTO inbox VALUES (?, 'local', 'api', 'local', ?, ?, ?, ?, ?,"
                         " NULL)", (key, key, key, thread_id, item, at))
        if team_row:
            conn.execute("INSERT INTO teams VALUES ('t', 'local', ?, 1)", (thread_id,))
    finally:
        conn.close()


def _schema(root: Path) -> list[tuple[Any, ...]]:
    conn = sqlite3.connect(root / "threads.db")
    try:
        return conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall()
    finally:
        conn.close()


async def test_a_directory_in_our_earlier_layout_is_upgraded_in_place_losing_nothing(
    tmp_path: Path,
) -> None:
    root = tmp_path / "old"
    thread_id = await _write_here(root)
    _as_earlier_layout(root, thread_id)
    with pytest.raises(sqlite3.OperationalError, match="reference_only"):
        run_reference_open(root)  # what the reference met before: it could not open it
    first, second = sqlite(root, clock=FakeClock()), sqlite(root, clock=FakeClock())
    try:  # two processes open it at once: it is upgraded once
        [a, b] = await asyncio.gather(first.list_threads(), second.list_threads())
        assert a == b
        controls = controls_of(first)
        assert controls is not None
        waiting = await controls.pending_controls(thread_id)
        # Every item kept, in the order received, under row ids; the one queued above too.
        assert [i.item_key for i in waiting][:2] == ["0190f3a0-0000-7000-8000-00000000000a",
                                                     "0190f3a0-0000-7000-8000-00000000000b"]
        assert [int(i.inbox_id) for i in waiting] == sorted(int(i.inbox_id) for i in waiting)
        assert await controls.consume_control(waiting[0].inbox_id, 9)
    finally:
        await first.close()
        await second.close()
    check_reference_columns(root)
    run_reference_open(root)
    assert await asyncio.to_thread(main, ["verify", "--store", str(root)]) == 0


async def test_an_earlier_layout_holding_rows_we_never_wrote_is_refused_and_left_as_it_is(
    tmp_path: Path,
) -> None:
    root = tmp_path / "old"
    thread_id = await _write_here(root)
    _as_earlier_layout(root, thread_id, team_row=True)
    before = _schema(root)
    store = sqlite(root)
    try:
        with pytest.raises(Exception) as err:
            await store.list_threads()
        assert getattr(err.value, "code", None) == "unsupported_format"
        assert "teams" in str(err.value)
        assert "threads export --bundle" in str(err.value)
    finally:
        await store.close()
    assert _schema(root) == before


async def test_a_read_only_copy_in_our_earlier_layout_is_read_as_it_is(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "old"
    thread_id = await _write_here(root)
    _as_earlier_layout(root, thread_id)
    before = _schema(root)
    configure = sqlite_engine.configure

    def read_only(conn: sqlite3.Connection, **kwargs: Any) -> None:
        configure(conn, **kwargs)
        conn.execute("PRAGMA query_only = ON")  # what a copy this process can't write gives

    monkeypatch.setattr(sqlite_engine, "configure", read_only)
    store = sqlite(root)
    try:
        [thread] = await store.list_threads()
        assert thread.thread_id == thread_id
        assert (await store.read_chain(thread.branch_id)).events
    finally:
        await store.close()
    assert _schema(root) == before


@needs_postgres
async def test_on_postgres_an_inbox_in_our_earlier_layout_is_upgraded_on_first_use() -> None:
    clock = FakeClock()
    store = open_postgres(clock)
    assert isinstance(store, PostgresStore)
    try:
        await store.list_threads()  # the schema exists
        async with store._conn() as conn:
            await conn.execute(
                "CREATE TABLE inbox (inbox_id text PRIMARY KEY, tenant_id text NOT NULL,"
                " channel text NOT NULL, installation_id text NOT NULL, item_key text NOT NULL,"
                " delivery_id text, thread_id text, item bytea NOT NULL,"
                " received_at bigint NOT NULL, consumed_seq bigint,"
                " UNIQUE (tenant_id, channel, installation_id, item_key))"
            )
            await conn.execute(
                "CREATE INDEX inbox_waiting ON inbox(thread_id) WHERE consumed_seq IS NULL"
            )
            for key, at in (("k-b", 2), ("k-a", 1)):
                item = canonical({"address": "t1", "command": "cancel", "item_key": key,
                                  "kind": "control", "principal": ALICE.to_wire()})
                await conn.execute(
                    "INSERT INTO inbox VALUES (%s, 'local', 'api', 'local', %s, %s, 't1', %s,"
                    " %s, NULL)", (key, key, key, item, at),
                )
        controls = controls_of(store)
        assert controls is not None
        waiting = await controls.pending_controls("t1")
        assert [i.item_key for i in waiting] == ["k-a", "k-b"]
        assert await controls.consume_control(waiting[0].inbox_id, 3)
        key = await controls.queue_control(tenant_id="local", thread_id="t1",
                                           principal=ALICE.to_wire(), command="stop_when_idle")
        assert [i.item_key for i in await controls.pending_controls("t1")] == ["k-b", key]
        [(kind,)] = fetch_all(store.schema, "SELECT data_type FROM information_schema.columns"
                              " WHERE table_schema = %s AND table_name = 'inbox'"
                              " AND column_name = 'inbox_id'", (store.schema,))
        assert kind == "bigint"
        assert fetch_one(store.schema, "SELECT count(*) FROM pg_indexes WHERE schemaname = %s"
                         " AND indexname = 'inbox_waiting'", (store.schema,)) == (1,)
    finally:
        await store.close()
        from postgres_support import drop_store

        await drop_store(store)
