"""Fixtures every test directory may use: a fresh SQLite store in the test's directory, and the
branches whose chain it was asked to read (``chain_reads``: clear it where counting starts)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from threads.store.protocol import Chain
from threads.store.sqlite import SQLiteStore, sqlite


@pytest.fixture
async def sqlite_store(tmp_path: Path) -> AsyncIterator[SQLiteStore]:
    opened = sqlite(tmp_path / "store")
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture
def chain_reads(sqlite_store: SQLiteStore) -> list[str]:
    reads: list[str] = []
    read_chain = sqlite_store.read_chain

    async def counted(branch_id: str) -> Chain:
        reads.append(branch_id)
        return await read_chain(branch_id)

    sqlite_store.read_chain = counted  # type: ignore[method-assign]
    return reads
