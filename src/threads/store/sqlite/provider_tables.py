"""Tables a provider adds to a SQLite store's ``threads.db`` beside the v6 ones (local memory).

``transaction(store, ddl, fn)`` makes sure the tables of ``ddl`` exist (``IF NOT EXISTS``,
created on first use, the schema version unchanged, as the reference's provider does), then runs
``fn`` in one ``BEGIN IMMEDIATE`` transaction on the store's own thread. ``one_per_store``
keeps one view object (a ledger, a memory) per open store.
"""

from __future__ import annotations

import sqlite3
import weakref
from collections.abc import Callable
from typing import TypeVar

from threads.store.sqlite.store import SQLiteStore

T = TypeVar("T")
V = TypeVar("V")

_CREATED: weakref.WeakKeyDictionary[SQLiteStore, set[str]] = weakref.WeakKeyDictionary()


async def transaction(store: SQLiteStore, ddl: str, fn: Callable[[sqlite3.Connection], T]) -> T:
    created = _CREATED.setdefault(store, set())

    def run(conn: sqlite3.Connection) -> T:
        if ddl not in created:
            conn.executescript(ddl)  # outside any transaction: it commits on its own
            created.add(ddl)
        return store._txn(fn)(conn)

    return await store._run(run)


def one_per_store(
    cache: weakref.WeakKeyDictionary[SQLiteStore, V], store: SQLiteStore,
    make: Callable[[SQLiteStore], V],
) -> V:
    view = cache.get(store)
    if view is None:
        view = cache[store] = make(store)
    return view
