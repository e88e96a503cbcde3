"""Time as threads reads it: an injected ``Clock`` so tests move time instead of sleeping.

A clock may also say how to wait (``sleep_ms``): a run that waits out a recorded delay waits on
its store's clock, so a ``FakeClock`` moves forward instead of the test sleeping. A clock may
also say how much time has passed (``monotonic_ms``) without the steps a wall clock takes: a
lease holder measures its lease's age with it (``elapsed_source``).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Protocol, runtime_checkable


class Clock(Protocol):
    """Where threads reads the time: the store's clock judges leases, windows and waits."""

    def now_ms(self) -> int:
        """Unix epoch milliseconds."""
        ...


@runtime_checkable
class SleepingClock(Protocol):
    def now_ms(self) -> int: ...

    async def sleep_ms(self, ms: int) -> None:
        """Return once ``ms`` have passed on this clock."""
        ...


@runtime_checkable
class MonotonicClock(Protocol):
    def now_ms(self) -> int: ...

    def monotonic_ms(self) -> int:
        """Milliseconds since an arbitrary origin; never steps, whatever the wall clock does."""
        ...


class SystemClock:
    """The machine's clock (the default)."""

    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    async def sleep_ms(self, ms: int) -> None:
        await asyncio.sleep(ms / 1000)


class FakeClock:
    """A clock that only moves when told to (tests, drills, conformance cases)."""

    def __init__(self, now_ms: int = 1_790_000_000_000) -> None:
        self._now = now_ms

    def now_ms(self) -> int:
        return self._now

    def monotonic_ms(self) -> int:
        return self._now  # fake time is the only time there is: it passes when moved

    def advance(self, ms: int) -> None:
        self._now += ms

    def set(self, now_ms: int) -> None:
        self._now = now_ms

    async def sleep_ms(self, ms: int) -> None:
        """Waiting on a fake clock moves it: the test never sleeps."""
        self._now += max(ms, 0)
        await asyncio.sleep(0)


async def sleep_on(clock: Clock, ms: int) -> None:
    """Wait ``ms`` on ``clock``: its own ``sleep_ms`` when it has one, else real time."""
    if isinstance(clock, SleepingClock):
        await clock.sleep_ms(ms)
    else:
        await asyncio.sleep(ms / 1000)


def elapsed_source(clock: Clock) -> Callable[[], int]:
    """How to read elapsed time beside ``clock``: its ``monotonic_ms`` when it has one, else
    its ``now_ms`` (an injected clock without one is trusted not to step)."""
    if isinstance(clock, MonotonicClock):
        return clock.monotonic_ms
    return clock.now_ms


SYSTEM_CLOCK = SystemClock()


def utc_iso(ms: int) -> str:
    """``2026-12-01T09:15:03.120Z``: a Unix-ms time in UTC, to the millisecond."""
    moment = datetime.fromtimestamp(ms / 1000, tz=UTC)
    return moment.strftime("%Y-%m-%dT%H:%M:%S.") + f"{moment.microsecond // 1000:03d}Z"
