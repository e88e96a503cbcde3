"""The CLI on a Postgres store: ``--store postgres://...`` opens it for every command, and an
export from Postgres is byte-identical to the file imported into it (and to SQLite's export)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import sql

from threads.cli.main import main
from threads.clock import FakeClock
from threads.testing.sample_log import SampleLog

SERVER = "postgresql://postgres@127.0.0.1:5432"


def _server_answers() -> bool:
    try:
        with socket.create_connection(("127.0.0.1", 5432), timeout=2.0):
            return True
    except OSError:
        return False


pytestmark = [
    pytest.mark.postgres,
    pytest.mark.skipif(
        not _server_answers(),
        reason="no PostgreSQL server answers on 127.0.0.1:5432"
        " (start it with tools/ensure_postgres.sh)",
    ),
]


@pytest.fixture(scope="module")
def server_database() -> Iterator[str]:
    """A database of this module's own (dropping one forces a checkpoint: once is enough)."""
    name = f"cli_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield f"{SERVER}/{name}"
    finally:
        with psycopg.connect(f"{SERVER}/postgres", autocommit=True) as conn:
            conn.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )


@pytest.fixture
def database(server_database: str) -> Iterator[str]:
    """The module's database with nothing in it (the CLI uses the default schema, dropped
    after the test)."""
    yield server_database
    with psycopg.connect(server_database, autocommit=True) as conn:
        conn.execute("DROP SCHEMA IF EXISTS threads CASCADE")


@pytest.mark.parametrize("scheme", ["postgres://", "postgresql://"])
def test_import_ls_export_on_postgres(
    database: str, scheme: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = database.replace("postgresql://", scheme, 1)
    log = SampleLog(FakeClock())
    log.started()
    log.turn(text="What is in README.md?", reply="One heading.")
    exported = tmp_path / "thread.jsonl"
    exported.write_bytes(log.export())
    assert main(["import", str(exported), "--store", url]) == 0
    assert main(["ls", "--store", url]) == 0
    assert log.header.thread_id in capsys.readouterr().out
    assert main(["lease", log.header.thread_id, "--store", url]) == 0
    assert "never held: the next run takes it" in capsys.readouterr().out
    back = tmp_path / "back.jsonl"
    assert main(["export", log.header.branch_id, "--store", url, "-o", str(back)]) == 0
    assert back.read_bytes() == exported.read_bytes()
    lite = tmp_path / "lite"
    assert main(["import", str(back), "--store", str(lite)]) == 0
    again = tmp_path / "again.jsonl"
    assert main(["export", log.header.branch_id, "--store", str(lite), "-o", str(again)]) == 0
    assert again.read_bytes() == exported.read_bytes()
