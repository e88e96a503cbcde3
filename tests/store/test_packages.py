"""The store's packages: each ``__all__`` is its front door, and the names the README and
earlier releases import from keep working."""

from __future__ import annotations

import importlib

import pytest

import threads

FRONT_DOORS = {
    "threads.store": ["ArtifactRef", "BranchInfo", "Chain", "Lease", "LeaseState",
                      "PendingArtifact", "Segment", "Store", "StoredRow"],
    "threads.store.sqlite": ["DEFAULT_BUSY_TIMEOUT_MS", "SQLiteStore", "sqlite"],
    "threads.store.postgres": ["PostgresStore", "pg_fault", "postgres"],
}


@pytest.mark.parametrize("name", sorted(FRONT_DOORS))
def test_each_store_package_names_its_front_door(name: str) -> None:
    module = importlib.import_module(name)
    assert sorted(module.__all__) == FRONT_DOORS[name]
    for attribute in module.__all__:
        assert getattr(module, attribute) is not None


def test_the_engines_are_where_users_import_them_from() -> None:
    from threads.postgres import PostgresStore as Shared
    from threads.postgres import postgres
    from threads.store.postgres import PostgresStore
    from threads.store.sqlite import SQLiteStore, sqlite

    assert SQLiteStore.__module__ == "threads.store.sqlite.store"

    assert threads.sqlite is sqlite
    assert Shared is PostgresStore
    assert postgres("postgresql://nobody@127.0.0.1:1/none").schema == "threads"
