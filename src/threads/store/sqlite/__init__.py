"""The embedded SQLite store (the default): a directory the reference implementation can open.

Front door: ``sqlite(path)`` makes a ``SQLiteStore``. Inside: ``store`` (the engine: its I/O,
its store thread and in-place paths, its one-statement append fence), ``schema`` (pragmas, the
version check, creating and upgrading the tables ``threads.store.layout`` specifies),
``group_commit`` and ``worker`` (appends queued together commit in one transaction on one
thread), and the views beside the log: ``controls`` (control items), ``resources`` (the
resource ledger), ``deltas`` (request artifacts kept as deltas), ``provider_tables`` (tables a
provider adds, such as local memory's).
"""

from threads.store.sqlite.store import DEFAULT_BUSY_TIMEOUT_MS, SQLiteStore, sqlite

__all__ = ["DEFAULT_BUSY_TIMEOUT_MS", "SQLiteStore", "sqlite"]
