"""A Postgres store's schema: created from ``threads.store.layout``, versioned in ``meta``, its
additive tables created on first use, and our earlier inbox layout upgraded in place.

Invariant: every DDL statement runs under the schema's transaction-scoped advisory lock, so
hosts racing to create or upgrade a schema queue and the loser finds the work done. A schema
that is already set up is only read when a store opens: opening never waits on (or takes) a
lock a writer could hold. A schema another version of threads wrote is ``unsupported_format``.
Our earlier layout keyed ``inbox`` by TEXT; its rows are copied under row ids in the order
they were received (no log line or other row names an inbox id), inside the lock's
transaction.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg import sql

from threads.store.layout import (
    INBOX,
    POSTGRES_TABLES,
    REQUEST_DELTAS,
    SCHEMA_VERSION,
    Table,
    ddl,
)
from threads.store.rows import unsupported_schema

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

SCHEMA_DDL = ddl("postgres", *POSTGRES_TABLES)
DELTAS_DDL = ddl("postgres", REQUEST_DELTAS)


async def init_schema(conn: Conn, schema: str) -> None:
    """Create the schema's tables once, or refuse a schema another version wrote."""
    if await _schema_version(conn, schema) == SCHEMA_VERSION:
        return
    async with conn.transaction():
        await _lock(conn, schema)
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        version = await _schema_version(conn, schema)
        if version is None:
            await conn.execute(SCHEMA_DDL.encode())  # one round trip for all of it
            await conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),)
            )
            return
        if version != SCHEMA_VERSION:
            raise unsupported_schema(version)


async def ensure(conn: Conn, schema: str, tables: tuple[Table, ...], extra: str = "") -> None:
    """Create ``tables`` (and the ``extra`` DDL of a provider's own tables) if absent, under
    the schema's lock, upgrading our earlier inbox first when ``tables`` has the inbox."""
    async with conn.transaction():
        await _lock(conn, schema)
        if INBOX in tables:
            await _rekey_inbox(conn)
        await conn.execute((ddl("postgres", *tables) + extra).encode())


async def has_table(conn: Conn, table: Table) -> bool:
    cursor = await conn.execute("SELECT to_regclass(%s) IS NOT NULL", (table.name,))
    row = await cursor.fetchone()
    return row is not None and bool(row[0])


async def _lock(conn: Conn, schema: str) -> None:
    await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"threads:{schema}",))


async def _schema_version(conn: Conn, schema: str) -> int | None:
    """The schema's recorded version, or None when it has no ``meta`` table yet."""
    cursor = await conn.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'meta'",
        (schema,),
    )
    if await cursor.fetchone() is None:
        return None
    cursor = await conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def _rekey_inbox(conn: Conn) -> None:
    cursor = await conn.execute(
        "SELECT data_type FROM information_schema.columns WHERE table_schema = current_schema()"
        " AND table_name = 'inbox' AND column_name = 'inbox_id'"
    )
    row = await cursor.fetchone()
    if row is None or row[0] != "text":
        return
    columns = ", ".join(c.name for c in INBOX.columns if c.name != "inbox_id")
    await conn.execute("ALTER TABLE inbox RENAME TO inbox_earlier")
    await conn.execute("DROP INDEX IF EXISTS inbox_waiting")  # the new table's to take
    await conn.execute(INBOX.ddl("postgres").encode())
    await conn.execute(
        f"INSERT INTO inbox({columns}) SELECT {columns} FROM inbox_earlier"
        " ORDER BY received_at, inbox_id".encode()
    )
    await conn.execute("DROP TABLE inbox_earlier")
