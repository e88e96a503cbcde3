"""Additive tables beside a Postgres store's core schema (control items, the resource ledger,
local memory).

``transaction(store, ddl)`` makes sure the tables of ``ddl`` exist (``IF NOT EXISTS``, under the
schema's advisory lock, once per open store: ``PostgresStore.ensure_tables``; a store created
before them gains them on first use, its schema version unchanged), then yields one connection
inside one transaction. ``connection(store, ddl)`` does the same but yields the connection
outside any transaction, for work that is one statement (its own implicit transaction: one
round trip instead of three).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from threads.store.pg_group import Conn
from threads.store.postgres import PostgresStore


@asynccontextmanager
async def transaction(store: PostgresStore, ddl: str) -> AsyncIterator[Conn]:
    await store.ensure_tables(ddl)
    async with store._txn() as conn:
        yield conn


@asynccontextmanager
async def connection(store: PostgresStore, ddl: str) -> AsyncIterator[Conn]:
    await store.ensure_tables(ddl)
    async with store._conn() as conn:
        yield conn
