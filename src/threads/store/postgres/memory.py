"""``local_memory()`` on a Postgres store: the records in the store's own schema.

Tables ``memory_bindings`` (who owns a record: tenant, agent, scope; namespace ``local``) and
``local_memory`` (its text, with a generated ``tsvector`` under a GIN index) are created on
first use. Ids, the write window and the save-again rule are the SQLite engine's
(``threads.memory_records``). Every read and write awaits the fence first, then runs in one
transaction; a save takes an advisory lock on its record id, so two processes saving under one
key write it once. A scope only ever sees and forgets its own records.
"""

from __future__ import annotations

from threads.memory import SEARCH_DEFAULT_K, Fence, MemoryRecord, MemoryScope
from threads.memory_records import NAMESPACE, TERM, record_id, saved_again, text_hash
from threads.store.layout import MEMORY_BINDINGS
from threads.store.postgres.provider_tables import transaction
from threads.store.postgres.store import PostgresStore

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
_OWNED = (
    "local_memory m JOIN memory_bindings b"
    f" ON b.namespace = '{NAMESPACE}' AND b.record_id = m.record_id"
)


class PostgresMemory:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def remember(
        self, scope: MemoryScope, text: str, key: str, fence: Fence
    ) -> MemoryRecord:
        await fence()
        rid, digest, now = record_id(key), text_hash(text), self.store.clock.now_ms()
        async with transaction(self.store, _TABLES, _RECORDS_DDL) as conn:
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (rid,))
            cursor = await conn.execute(
                f"SELECT b.tenant_id, b.agent, b.scope, m.text_hash, m.created_at FROM {_OWNED}"
                " WHERE m.record_id = %s".encode(),
                (rid,),
            )
            row = await cursor.fetchone()
            if row is not None:
                return saved_again(row, scope, digest, key, text)
            await conn.execute(
                "INSERT INTO memory_bindings(namespace, record_id, tenant_id, agent, scope)"
                " VALUES (%s, %s, %s, %s, %s)",
                (NAMESPACE, rid, scope.tenant_id, scope.agent, scope.user),
            )
            await conn.execute(
                "INSERT INTO local_memory(record_id, text, text_hash, created_at)"
                " VALUES (%s, %s, %s, %s)",
                (rid, text, digest, now),
            )
        return MemoryRecord(rid, text, now)

    async def recall(
        self, scope: MemoryScope, query: str, fence: Fence, *, k: int = SEARCH_DEFAULT_K
    ) -> list[MemoryRecord]:
        await fence()
        terms = TERM.findall(query)
        if not terms:
            return []
        # Each word its own lexeme (quoted), OR'ed: nothing in the query is tsquery syntax.
        match = " | ".join("'" + t.replace("'", "''") + "'" for t in terms)
        async with transaction(self.store, _TABLES, _RECORDS_DDL) as conn:
            cursor = await conn.execute(
                f"SELECT m.record_id, m.text, m.created_at FROM {_OWNED}"
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
            cursor = await conn.execute(
                "DELETE FROM memory_bindings WHERE namespace = %s AND record_id = %s"
                " AND tenant_id = %s AND agent = %s AND scope = %s",
                (NAMESPACE, record_id, scope.tenant_id, scope.agent, scope.user),
            )
            if cursor.rowcount:
                await conn.execute("DELETE FROM local_memory WHERE record_id = %s", (record_id,))
            return cursor.rowcount == 1
