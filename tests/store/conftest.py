"""Store-suite fixtures: ``tamper`` edits a store's bytes behind its back, on each engine.
The ``store``, ``open_store`` and ``clock`` fixtures come from ``tests/conftest.py``."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import pytest

from postgres_support import PostgresTamper
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore


class SQLiteTamper:
    """Edits a SQLite store's bytes behind its back, through a second connection."""

    def __init__(self, store: Store) -> None:
        assert isinstance(store, SQLiteStore)
        assert store.root is not None
        self.root = store.root

    def replace_line(self, branch_id: str, seq: int, line: bytes) -> None:
        self._execute(
            "UPDATE events SET line = ? WHERE branch_id = ? AND seq = ?", (line, branch_id, seq)
        )

    def flip_artifact_byte(self, sha256: str) -> None:
        path = self.root / "artifacts" / "sha256" / sha256[:2] / sha256
        if path.exists():
            data = bytearray(path.read_bytes())
            data[0] ^= 1
            path.write_bytes(bytes(data))
        else:  # a request artifact, kept as a delta
            self._execute(
                "UPDATE request_deltas SET middle = CAST('b' || substr(middle, 2) AS BLOB)"
                " WHERE sha256 = ?", (sha256,),
            )

    def update_one(self, sql: str, args: tuple[object, ...]) -> None:
        """Run an UPDATE (``?`` placeholders) that must change exactly one row."""
        self._execute(sql, args)

    def _execute(self, sql: str, args: tuple[object, ...]) -> None:
        conn = sqlite3.connect(self.root / "threads.db")
        try:
            with conn:
                assert conn.execute(sql, args).rowcount == 1
        finally:
            conn.close()


_TAMPERS: dict[str, Callable[[Store], object]] = {
    "sqlite": SQLiteTamper,
    "postgres": PostgresTamper,
}


@pytest.fixture
def tamper(engine: str, store: Store) -> object:
    return _TAMPERS[engine](store)
