"""Counting the jobs a store hands to its store thread (``StoreThread.run``), for the tests of
what runs in place."""

from __future__ import annotations

from typing import Any

import pytest

from threads.store.sqlite.worker import StoreThread


class Handoffs:
    """Counts the jobs handed to the store thread."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.jobs = 0
        real = StoreThread.run

        def counted(worker: StoreThread, fn: Any) -> Any:
            self.jobs += 1
            return real(worker, fn)

        monkeypatch.setattr(StoreThread, "run", counted)
