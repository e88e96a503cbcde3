"""Wake-ups for stream readers: "branch B has new committed events".

Appends made in this process (the host's runs and controls) call ``notify``, which wakes every
reader of that branch at once. Readers of a branch no run of this process writes fall back to a
short poll of the branch's head (``POLL_S``), so another process's appends reach them within
tens of milliseconds. Invariant: a reader takes ``version`` before reading and waits only if it
is unchanged, so a notify between its read and its wait is never lost.
"""

from __future__ import annotations

import asyncio
import contextlib

POLL_S = 0.02  # head poll for branches another process writes
IDLE_S = 1.0  # safety re-read while this process's own run writes the branch


class Hub:
    def __init__(self) -> None:
        self._versions: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}

    def version(self, branch_id: str) -> int:
        return self._versions.get(branch_id, 0)

    def notify(self, branch_id: str) -> None:
        self._versions[branch_id] = self.version(branch_id) + 1
        for waiter in self._waiters.get(branch_id, ()):
            waiter.set()

    async def wait(self, branch_id: str, seen: int, timeout_s: float) -> None:
        """Return once ``branch_id`` moved past version ``seen``, or after ``timeout_s``."""
        if self.version(branch_id) != seen:
            return
        waiter = asyncio.Event()
        waiters = self._waiters.setdefault(branch_id, set())
        waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter.wait(), timeout_s)
        finally:
            waiters.discard(waiter)
            if not waiters:
                self._waiters.pop(branch_id, None)
