"""Which engine keeps what beside the log: control items and the resource ledger. The Postgres
engine is only looked at once its module was imported (a store of it exists then), so this
never needs the ``postgres`` extra.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from threads.errors import ConfigError
from threads.store.control_items import ControlItems
from threads.store.resources import ResourceStore
from threads.store.sqlite import SQLiteStore
from threads.store.sqlite.controls import SQLiteControls
from threads.store.sqlite.resources import SQLiteResources

_LEDGERS: weakref.WeakKeyDictionary[Any, ResourceStore] = weakref.WeakKeyDictionary()


def _postgres(store: object) -> bool:
    engine = sys.modules.get("threads.store.postgres")
    return engine is not None and isinstance(store, engine.PostgresStore)


def controls_of(store: object) -> ControlItems | None:
    """The store's control items; None for a store that keeps none (a wrapper, a test fake)."""
    if isinstance(store, SQLiteStore):
        return SQLiteControls(store)
    if _postgres(store):
        from threads.store.postgres.controls import PostgresControls

        return PostgresControls(store)  # type: ignore[arg-type]
    return None


def resources_of(store: object) -> ResourceStore:
    """The store's resource ledger (one view per open store); ``capability_missing`` for a
    store that keeps none."""
    ledger = _LEDGERS.get(store)
    if ledger is not None:
        return ledger
    if isinstance(store, SQLiteStore):
        ledger = SQLiteResources(store)
    elif _postgres(store):
        from threads.store.postgres.resources import PostgresResources

        ledger = PostgresResources(store)  # type: ignore[arg-type]
    else:
        raise ConfigError(
            "capability_missing",
            f"sandboxes need the resource ledger, which {type(store).__name__} does not keep;"
            " use threads.sqlite(...) or threads.postgres.postgres(...)",
        )
    _LEDGERS[store] = ledger
    return ledger
