"""``threads.postgres.postgres(url)``: the shared PostgreSQL store, for many hosts and workers.

Needs the ``postgres`` extra (``pip install 'threads[postgres]'``); importing ``threads`` does
not, and importing this module without it says which extra to install.
"""

from __future__ import annotations

from threads.store.postgres import PostgresStore, postgres

__all__ = ["PostgresStore", "postgres"]
