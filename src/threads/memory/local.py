"""``local_memory()``: memories kept in the store itself: a SQLite store's own ``threads.db``
here, a Postgres store's schema in ``threads.memory.postgres``.

Tables ``local_memory`` (one row per record) and ``local_memory_fts`` (an FTS5 index of the
text) are created on first use (saving and forgetting are ``threads.memory.rows``'s),
beside the log; who owns a record (tenant, agent, scope) is its row in the v6
``memory_bindings`` table (namespace ``local``). A record's id is ``mem_`` + the first 24 hex of
sha256(key), the key being the saving call's effect key: saving again under the same key with
the same text is a no-op, with other text it is refused. Writes are ``idempotent`` for good (the
window is the largest the format allows). Every read and write awaits the fence first, then runs
in one transaction; a scope only ever sees and forgets its own records.
"""

from __future__ import annotations

import sqlite3
import sys
import weakref
from collections.abc import Callable
from typing import Literal, TypeVar

from threads.errors import ConfigError
from threads.memory import rows as memory_rows
from threads.memory.protocol import SEARCH_DEFAULT_K, BoundMemory, Fence, MemoryRecord, MemoryScope
from threads.memory.records import FOREVER_MS
from threads.store.sqlite import SQLiteStore
from threads.store.sqlite.provider_tables import one_per_store, transaction
from threads.store.sqlite.store import drive
from threads.store.statements import SQLITE

T = TypeVar("T")
# How a record is kept in (and dropped from) its FTS5 index.
_INDEX = ("INSERT INTO local_memory_fts(record_id, text) VALUES (?, ?)",)
_UNINDEX = ("DELETE FROM local_memory_fts WHERE record_id = ?",)

_DDL = """
CREATE TABLE IF NOT EXISTS local_memory (
  record_id TEXT PRIMARY KEY,
  text TEXT NOT NULL,
  text_hash TEXT NOT NULL,
  created_at INTEGER NOT NULL
) STRICT;
CREATE INDEX IF NOT EXISTS memory_bindings_by_scope ON memory_bindings(tenant_id, agent, scope);
CREATE VIRTUAL TABLE IF NOT EXISTS local_memory_fts USING fts5(record_id UNINDEXED, text);
"""


class LocalMemory:
    """The provider; ``bind(store)`` gives the memory of one store."""

    @property
    def write_effect(self) -> Literal["idempotent", "unguarded"]:
        return "idempotent"

    @property
    def dedup_window_ms(self) -> int | None:
        return FOREVER_MS

    def check_fenceable(self) -> None:
        return None  # it sends nothing anywhere: every call is a transaction on the store

    def bind(self, store: object) -> BoundMemory:
        if isinstance(store, SQLiteStore):
            return one_per_store(_BOUND, store, StoreMemory)
        engine = sys.modules.get("threads.store.postgres")
        if engine is not None and isinstance(store, engine.PostgresStore):
            from threads.memory.postgres import PostgresMemory

            return PostgresMemory(store)
        raise ConfigError(
            "invalid_config",
            "local_memory() keeps memories in the store itself, a SQLite or Postgres one; run"
            " this agent on threads.sqlite(...) or threads.postgres.postgres(...), or choose"
            " another memory provider",
        )


_BOUND: weakref.WeakKeyDictionary[SQLiteStore, StoreMemory] = weakref.WeakKeyDictionary()


class StoreMemory:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def _txn(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        return await transaction(self.store, _DDL, fn)

    async def remember(
        self, scope: MemoryScope, text: str, key: str, fence: Fence
    ) -> MemoryRecord:
        await fence()
        now = self.store.clock.now_ms()
        return await self._txn(
            lambda conn: drive(
                conn, memory_rows.remember(SQLITE, scope, text, key, now=now, indexed=_INDEX)
            )
        )

    async def recall(
        self, scope: MemoryScope, query: str, fence: Fence, *, k: int = SEARCH_DEFAULT_K
    ) -> list[MemoryRecord]:
        match = memory_rows.match_of(query, quote='"', joiner=" OR ")  # FTS5's words
        await fence()
        if match is None:
            return []

        def search(conn: sqlite3.Connection) -> list[MemoryRecord]:
            rows = conn.execute(
                f"SELECT m.record_id, m.text, m.created_at FROM {memory_rows.OWNED}"
                " JOIN local_memory_fts f ON f.record_id = m.record_id"
                " WHERE local_memory_fts MATCH ? AND b.tenant_id = ? AND b.agent = ?"
                " AND b.scope = ? ORDER BY bm25(local_memory_fts), m.created_at DESC LIMIT ?",
                (match, scope.tenant_id, scope.agent, scope.user, k),
            ).fetchall()
            return [MemoryRecord(r[0], r[1], int(r[2])) for r in rows]

        return await self._txn(search)

    async def forget(self, scope: MemoryScope, record_id: str, key: str, fence: Fence) -> bool:
        await fence()

        return await self._txn(
            lambda conn: drive(conn, memory_rows.forget(scope, record_id, _UNINDEX))
        )


def local_memory() -> LocalMemory:
    """Memories in the run's own store, SQLite or Postgres (``agent(memory=local_memory())``)."""
    return LocalMemory()
