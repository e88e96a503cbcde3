"""Time as threads reads it: an injected ``Clock`` so tests move time instead of sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Unix epoch milliseconds."""
        ...


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000


class FakeClock:
    """A clock that only moves when told to (tests, drills, conformance cases)."""

    def __init__(self, now_ms: int = 1_790_000_000_000) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def advance(self, ms: int) -> None:
        self._now += ms

    def set(self, now_ms: int) -> None:
        self._now = now_ms


SYSTEM_CLOCK = SystemClock()
