"""Which engine keeps what beside the log: control items, today (the resource ledger and
local memory have their own lookups). The Postgres engine is only looked at once its module
was imported (a store of it exists then), so this never needs the ``postgres`` extra.
"""

from __future__ import annotations

import sys

from threads.store.control_items import ControlItems
from threads.store.sqlite import SQLiteStore
from threads.store.sqlite_controls import SQLiteControls


def controls_of(store: object) -> ControlItems | None:
    """The store's control items; None for a store that keeps none (a wrapper, a test fake)."""
    if isinstance(store, SQLiteStore):
        return SQLiteControls(store)
    engine = sys.modules.get("threads.store.postgres")
    if engine is not None and isinstance(store, engine.PostgresStore):
        from threads.store.postgres_controls import PostgresControls

        return PostgresControls(store)
    return None
