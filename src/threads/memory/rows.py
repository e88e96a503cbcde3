"""``local_memory()``'s records in a store, written once for both engines: saving and forgetting
as flows (``threads.store.flows``) over the v6 ``memory_bindings`` table (who owns a record) and
the ``local_memory`` table (its text). How a record is indexed for search is the engine's own
(SQLite: an FTS5 table kept by statements of its own, passed in as ``indexed``/``unindexed``;
Postgres: a generated ``tsvector`` column), and so is searching.

Invariant: a save and a forget are each one transaction; saving again under one key with the
same text is a no-op and with other text is refused (``threads.memory.records.saved_again``);
on Postgres a save first takes an advisory lock on its record id, so two processes saving under
one key write it once (SQLite's ``BEGIN IMMEDIATE`` already orders them). A scope only ever
forgets its own records.
"""

from __future__ import annotations

from collections.abc import Sequence

from threads.memory.protocol import MemoryRecord, MemoryScope
from threads.memory.records import NAMESPACE, TERM, record_id, saved_again, text_hash
from threads.store import flows
from threads.store.flows import Flow
from threads.store.statements import ADVISORY_LOCK, Dialect, Query

# A record joined to its binding.
OWNED = (
    "local_memory m JOIN memory_bindings b"
    f" ON b.namespace = '{NAMESPACE}' AND b.record_id = m.record_id"
)
_SAVED = (
    f"SELECT b.tenant_id, b.agent, b.scope, m.text_hash, m.created_at FROM {OWNED}"
    " WHERE m.record_id = ?"
)
_BIND = (
    "INSERT INTO memory_bindings(namespace, record_id, tenant_id, agent, scope)"
    " VALUES (?, ?, ?, ?, ?)"
)
_RECORD = "INSERT INTO local_memory(record_id, text, text_hash, created_at) VALUES (?, ?, ?, ?)"
_UNBIND = (
    "DELETE FROM memory_bindings WHERE namespace = ? AND record_id = ? AND tenant_id = ?"
    " AND agent = ? AND scope = ?"
)
_DROP = "DELETE FROM local_memory WHERE record_id = ?"


def remember(
    dialect: Dialect, scope: MemoryScope, text: str, key: str, *, now: int,
    indexed: Sequence[str] = (),
) -> Flow[MemoryRecord]:
    """Save ``text`` under ``key``'s record id; ``indexed``: the engine's statements that index
    a new record, each taking (record_id, text)."""
    rid, digest = record_id(key), text_hash(text)
    if dialect.locks:
        yield Query(ADVISORY_LOCK, (rid,))
    row = yield from flows.one(_SAVED, rid)
    if row is not None:
        return saved_again(tuple(row), scope, digest, key, text)
    yield Query(_BIND, (NAMESPACE, rid, scope.tenant_id, scope.agent, scope.user))
    yield Query(_RECORD, (rid, text, digest, now))
    for statement in indexed:
        yield Query(statement, (rid, text))
    return MemoryRecord(rid, text, now)


def match_of(query: str, *, quote: str, joiner: str) -> str | None:
    """A search expression of the query's words, each quoted with ``quote`` (doubled inside
    it) and joined by ``joiner``, so nothing in the query is read as search syntax; None when
    the query has no words."""
    terms = TERM.findall(query)
    if not terms:
        return None
    return joiner.join(quote + t.replace(quote, quote * 2) + quote for t in terms)


def forget(scope: MemoryScope, rid: str, unindexed: Sequence[str] = ()) -> Flow[bool]:
    """Forget the scope's own record ``rid``; ``unindexed``: the engine's statements that drop
    it from its index, each taking (record_id,)."""
    binding = (NAMESPACE, rid, scope.tenant_id, scope.agent, scope.user)
    if (yield from flows.changed(_UNBIND, *binding)) != 1:
        return False
    for statement in (_DROP, *unindexed):
        yield Query(statement, (rid,))
    return True
