"""``local_memory()`` on a Postgres store: the records in the store's own schema.

Tables ``memory_bindings`` (who owns a record: tenant, agent, scope; namespace ``local``) and
``local_memory`` (its text, with a generated ``tsvector`` under a GIN index) are created on
first use. Saving and forgetting are written once for both engines
(``threads.memory.rows``); what is Postgres's own is the index and the search. Every read
and write awaits the fence first, then runs in one transaction. A scope only ever sees and
forgets its own records.
"""

from __future__ import annotations

from threads.memory import rows as memory_rows
from threads.memory.protocol import SEARCH_DEFAULT_K, Fence, MemoryRecord, MemoryScope
from threads.store.layout import MEMORY_BINDINGS
from threads.store.postgres.provider_tables import transaction
from threads.store.postgres.store import PostgresStore, drive
from threads.store.statements import POSTGRES

# Beside the v6 ``memory_bindings`` (``threads.store.layout``): the records themselves.
_RECORDS_DDL = """
CREATE INDEX IF NOT EXISTS memory_bindings_by_scope ON memory_bindings(tenant_id, agent, scope);
CREATE TABLE IF NOT EXISTS local_memory (
  record_id text PRIMARY KEY,
  text text NOT NULL,
  text_hash text NOT NULL,
  created_at bigint NOT NULL,
  words tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED
);
CREATE INDEX IF NOT EXISTS local_memory_words ON local_memory USING gin(words);
"""
_TABLES = (MEMORY_BINDINGS,)


class PostgresMemory:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def remember(
        self, scope: MemoryScope, text: str, key: str, fence: Fence
    ) -> MemoryRecord:
        await fence()
        now = self.store.clock.now_ms()
        async with transaction(self.store, _TABLES, _RECORDS_DDL) as conn:
            return await drive(conn, memory_rows.remember(POSTGRES, scope, text, key, now=now))

    async def recall(
        self, scope: MemoryScope, query: str, fence: Fence, *, k: int = SEARCH_DEFAULT_K
    ) -> list[MemoryRecord]:
        match = memory_rows.match_of(query, quote="'", joiner=" | ")  # one lexeme a word
        await fence()
        if match is None:
            return []
        async with transaction(self.store, _TABLES, _RECORDS_DDL) as conn:
            cursor = await conn.execute(
                f"SELECT m.record_id, m.text, m.created_at FROM {memory_rows.OWNED}"
                " WHERE m.words @@ to_tsquery('simple', %s) AND b.tenant_id = %s"
                " AND b.agent = %s AND b.scope = %s"
                " ORDER BY ts_rank(m.words, to_tsquery('simple', %s)) DESC, m.created_at DESC"
                " LIMIT %s".encode(),
                (match, scope.tenant_id, scope.agent, scope.user, match, k),
            )
            rows = await cursor.fetchall()
        return [MemoryRecord(r[0], r[1], int(r[2])) for r in rows]

    async def forget(self, scope: MemoryScope, record_id: str, key: str, fence: Fence) -> bool:
        await fence()
        async with transaction(self.store, _TABLES, _RECORDS_DDL) as conn:
            return await drive(conn, memory_rows.forget(scope, record_id))
