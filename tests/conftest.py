"""Fixtures every test directory may use.

``store`` is a fresh, empty store, and a test that asks for it runs once per engine in
``ENGINES``: a SQLite store in its own directory, and a Postgres store in a schema of its own,
dropped after the test (those runs carry the ``postgres`` marker and are skipped only when no
server answers on 127.0.0.1:5432). ``open_store`` opens more such stores on the same engine.
Every store shares the test's ``clock`` (a ``FakeClock``; a test module may override the
fixture), so time moves when the test moves it. A test that only makes sense on some engines
says which: ``@pytest.mark.engines("sqlite")``.

To run the suite on another engine, add its name to ``ENGINES`` and an opener to ``_OPENERS``.

The tiers: ``drill``, ``race``, ``timed`` and ``browser`` mark the slow kinds of test; every
other test gets the ``fast`` marker, so ``pytest -m fast`` is the tier to run while working.

Scratch files live on a tmpfs, Postgres commits are not flushed and Python's bytecode is
cached (``scratch_io``): no test can observe the difference, and the flushes and recompiles
were most of the suite's time.

``chain_reads`` lists the branches whose chain ``store`` was asked to read (clear it where
counting starts). ``sqlite_store`` is a SQLite store alone, on the machine's clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from postgres_support import POSTGRES_MARKS, drop_store, open_postgres
from scratch_io import use_scratch_io
from threads.clock import Clock, FakeClock
from threads.store.protocol import Chain, Store
from threads.store.sqlite import SQLiteStore, sqlite

ENGINES = ("sqlite", "postgres")

_OPENERS: dict[str, Callable[[Path, Clock], Store]] = {
    "sqlite": lambda path, clock: sqlite(path, clock=clock),
    "postgres": lambda _path, clock: open_postgres(clock),  # a fresh schema each
}
_MARKS = {"postgres": POSTGRES_MARKS}

StoreFactory = Callable[[], Store]


@pytest.fixture(params=[pytest.param(name, marks=_MARKS.get(name, ())) for name in ENGINES])
def engine(request: pytest.FixtureRequest) -> str:
    return str(request.param)


SLOW_KINDS = ("drill", "race", "timed", "browser")


def pytest_configure(config: pytest.Config) -> None:
    use_scratch_io()  # before the first tmp_path: pytest picks its directory lazily


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the fast tier, and deselect a test's runs on the engines its ``engines`` marker
    leaves out."""
    for item in items:
        if not any(item.get_closest_marker(kind) for kind in SLOW_KINDS):
            item.add_marker(pytest.mark.fast)
    kept: list[pytest.Item] = []
    dropped: list[pytest.Item] = []
    for item in items:
        marker = item.get_closest_marker("engines")
        callspec = getattr(item, "callspec", None)
        engine = callspec.params.get("engine") if callspec is not None else None
        if marker is None or engine is None:
            kept.append(item)
            continue
        unknown = set(marker.args) - set(ENGINES)
        if unknown:
            raise pytest.UsageError(f"{item.nodeid}: unknown engine(s) {sorted(unknown)}")
        (kept if engine in marker.args else dropped).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def open_store(
    engine: str, tmp_path: Path, clock: Clock
) -> AsyncIterator[StoreFactory]:
    """Opens fresh, empty stores; all closed at teardown. A SQLite store's directory is
    ``tmp_path / "store"`` for the first, then ``store-1``, ``store-2``..."""
    opened: list[Store] = []

    def open_fresh() -> Store:
        name = f"store-{len(opened)}" if opened else "store"
        store = _OPENERS[engine](tmp_path / name, clock)
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
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = sqlite(tmp_path / "store")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def chain_reads(store: Store) -> list[str]:
    reads: list[str] = []
    read_chain = store.read_chain

    async def counted(branch_id: str) -> Chain:
        reads.append(branch_id)
        return await read_chain(branch_id)

    store.read_chain = counted  # type: ignore[method-assign]
    return reads
