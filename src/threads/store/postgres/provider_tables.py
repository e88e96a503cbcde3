"""Additive tables beside a Postgres store's core schema (control items, the resource ledger,
local memory).

``transaction(store, tables, extra)`` makes sure ``tables`` (``threads.store.layout``) and a
provider's ``extra`` DDL exist (``IF NOT EXISTS``, under the schema's advisory lock, once per
open store: ``PostgresStore.ensure_tables``; a store created before them gains them on first
use, its schema version unchanged), then yields one connection inside one transaction.
``connection(store, tables)`` does the same but yields the connection outside any transaction,
for work that is one statement (its own implicit transaction: one round trip instead of three).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from threads.store.layout import Table
from threads.store.postgres.group import Conn
from threads.store.postgres.store import PostgresStore


@asynccontextmanager
async def transaction(
    store: PostgresStore, tables: tuple[Table, ...], extra: str = ""
) -> AsyncIterator[Conn]:
    await store.ensure_tables(*tables, extra=extra)
    async with store._txn() as conn:
        yield conn


@asynccontextmanager
async def connection(store: PostgresStore, tables: tuple[Table, ...]) -> AsyncIterator[Conn]:
    await store.ensure_tables(*tables)
    async with store._conn() as conn:
        yield conn
