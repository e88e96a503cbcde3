"""Postgres plumbing for the store suite: a fresh schema per store, dropped after the test.

The server is the one on 127.0.0.1:5432 (``THREADS_TEST_POSTGRES_URL`` overrides the URL). When
nothing answers there, every Postgres test is skipped with that reason; any other failure
(auth, a missing database) fails the tests instead of hiding them.
"""

from __future__ import annotations

import os
import socket
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
import pytest
from psycopg import sql

from threads.clock import Clock
from threads.store.postgres import PostgresStore, postgres
from threads.store.protocol import Store

URL = os.environ.get("THREADS_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _server_answers(host: str = "127.0.0.1", port: int = 5432) -> bool:
    try:
        with socket.create_connection((host, port), timeout=2.0):
            return True
    except OSError:
        return False


SERVER_UP = _server_answers()
POSTGRES_MARKS = (
    pytest.mark.postgres,
    pytest.mark.skipif(
        not SERVER_UP,
        reason="no PostgreSQL server answers on 127.0.0.1:5432"
        " (start it with tools/ensure_postgres.sh)",
    ),
)

F = TypeVar("F", bound=Callable[..., Any])


def needs_postgres(test: F) -> F:
    """Mark one test as needing the server (``postgres`` marker + skip when it's down)."""
    for mark in POSTGRES_MARKS:
        test = mark(test)
    return test


def fresh_schema() -> str:
    return f"t_{uuid.uuid4().hex[:16]}"


def open_postgres(clock: Clock | None, schema: str | None = None) -> PostgresStore:
    """A store in a schema of its own (created on first use)."""
    return postgres(URL, clock=clock, schema=schema or fresh_schema(), max_size=4)


async def drop_store(store: Store) -> None:
    """Drop a Postgres store's schema (a no-op for other engines)."""
    if isinstance(store, PostgresStore):
        await drop_schema(store.schema)


async def drop_schema(schema: str) -> None:
    async with await psycopg.AsyncConnection.connect(URL, autocommit=True) as conn:
        await conn.execute(
            sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema))
        )


def execute(schema: str, query: str, args: tuple[object, ...] = ()) -> int:
    """Run ``query`` (table names unqualified) in ``schema``; returns the row count."""
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return conn.execute(query.encode(), args).rowcount


def fetch_one(schema: str, query: str, args: tuple[object, ...] = ()) -> tuple[Any, ...] | None:
    rows = fetch_all(schema, query, args)
    return rows[0] if rows else None


def fetch_all(schema: str, query: str, args: tuple[object, ...] = ()) -> list[tuple[Any, ...]]:
    with psycopg.connect(URL, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(schema)))
        return conn.execute(query.encode(), args).fetchall()


class PostgresTamper:
    """Edits a Postgres store's bytes behind its back, through a second connection."""

    def __init__(self, store: Store) -> None:
        assert isinstance(store, PostgresStore)
        self.schema = store.schema

    def replace_line(self, branch_id: str, seq: int, line: bytes) -> None:
        updated = execute(
            self.schema,
            "UPDATE events SET line = %s WHERE branch_id = %s AND seq = %s",
            (line, branch_id, seq),
        )
        assert updated == 1

    def update_one(self, sql: str, args: tuple[object, ...]) -> None:
        """Run an UPDATE (``?`` placeholders) that must change exactly one row."""
        assert execute(self.schema, sql.replace("?", "%s"), args) == 1

    def flip_artifact_byte(self, sha256: str) -> None:
        updated = execute(
            self.schema,
            "UPDATE artifacts SET data = set_byte(data, 0, get_byte(data, 0) # 1)"
            " WHERE sha256 = %s",
            (sha256,),
        )
        assert updated == 1
