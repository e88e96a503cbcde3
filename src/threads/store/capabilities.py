"""Which store keeps what beside the log: control items and the resource ledger. Every engine
(``threads.store.core.StoreCore``) keeps both; the Postgres engine reads its inbox its own way,
and is only looked at once its module was imported (a store of it exists then), so this never
needs the ``postgres`` extra.
"""

from __future__ import annotations

import sys
import weakref
from typing import Any

from threads.errors import ConfigError
from threads.store.control_items import ControlItems
from threads.store.controls import StoreControls
from threads.store.core import StoreCore
from threads.store.resource_ledger import ResourceLedger
from threads.store.resources import ResourceStore

_LEDGERS: weakref.WeakKeyDictionary[Any, ResourceStore] = weakref.WeakKeyDictionary()


def controls_of(store: object) -> ControlItems | None:
    """The store's control items; None for a store that keeps none (a wrapper, a test fake)."""
    if not isinstance(store, StoreCore):
        return None
    engine = sys.modules.get("threads.store.postgres.store")
    if engine is not None and isinstance(store, engine.PostgresStore):
        from threads.store.postgres.controls import PostgresControls

        return PostgresControls(store)
    return StoreControls(store)


def resources_of(store: object) -> ResourceStore:
    """The store's resource ledger (one view per open store); ``capability_missing`` for a
    store that keeps none."""
    ledger = _LEDGERS.get(store)
    if ledger is not None:
        return ledger
    if not isinstance(store, StoreCore):
        raise ConfigError(
            "capability_missing",
            f"sandboxes need the resource ledger, which {type(store).__name__} does not keep;"
            " use threads.sqlite(...) or threads.postgres.postgres(...)",
        )
    ledger = _LEDGERS[store] = ResourceLedger(store)
    return ledger
