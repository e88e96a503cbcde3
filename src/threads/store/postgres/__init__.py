"""The PostgreSQL store (``threads[postgres]``): many hosts share one store in one schema.

Front door: ``postgres(url)`` makes a ``PostgresStore``; ``pg_fault`` names a database fault by
its code. Importing this package without the ``postgres`` extra raises an ``ImportError`` that
says which extra to install. Inside: ``store`` (the engine: its pool, transactions, lone
appends and leases), ``schema`` (creating, checking and upgrading the schema from
``threads.store.layout``), ``group``, ``append`` and ``columns`` (appends waiting together commit
in one statement), and the views beside the log: ``controls``, ``resources``, ``deltas``,
``memory`` and ``provider_tables``.
"""

from threads.store.postgres.store import PostgresStore, pg_fault, postgres

__all__ = ["PostgresStore", "pg_fault", "postgres"]
