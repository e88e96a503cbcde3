"""Store fixtures: every store test runs once per engine in ``ENGINES``.

To run the suite on another engine, add its name to ``ENGINES`` and an opener to ``_OPENERS``;
nothing else changes. Each store gets a fresh directory (SQLite) or a fresh schema, dropped
after the test (Postgres; skipped only when no server answers on 127.0.0.1:5432), and shares the
test's ``FakeClock``, so lease expiry is reached by moving the clock, never by sleeping.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest
from postgres_support import POSTGRES_MARKS, PostgresTamper, drop_store, open_postgres

from threads.clock import FakeClock
from threads.store.protocol import Store
from threads.store.sqlite import SQLiteStore, sqlite

ENGINES = ["sqlite", "postgres"]

_OPENERS: dict[str, Callable[[Path, FakeClock], Store]] = {
    "sqlite": lambda path, clock: sqlite(path, clock=clock),
    "postgres": lambda _path, clock: open_postgres(clock),  # a fresh schema each
}
_MARKS = {"postgres": POSTGRES_MARKS}

StoreFactory = Callable[[], Store]


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
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture(params=[pytest.param(e, marks=_MARKS.get(e, ())) for e in ENGINES])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def open_store(
    engine: str, tmp_path: Path, clock: FakeClock
) -> AsyncIterator[StoreFactory]:
    """Opens fresh, empty stores (each in its own directory); all closed at teardown."""
    opened: list[Store] = []

    def open_fresh() -> Store:
        store = _OPENERS[engine](tmp_path / f"store-{len(opened)}", clock)
        opened.append(store)
        return store

    yield open_fresh
    for store in opened:
        await store.close()
        await drop_store(store)


@pytest.fixture
def store(open_store: StoreFactory) -> Store:
    return open_store()


@pytest.fixture
def tamper(engine: str, store: Store) -> object:
    return _TAMPERS[engine](store)
