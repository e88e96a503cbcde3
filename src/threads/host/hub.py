"""Wake-ups for stream readers: "branch B has new committed events", and the events themselves
when this process's run wrote them.

Appends made in this process call ``notify`` (with the committed events when the host's own run
made them), which wakes every reader of that branch at once; a reader then takes the events
from ``since`` instead of reading the store again. Readers of a branch no run of this process
writes fall back to a short poll of the branch's head (``POLL_S``), so another process's
appends reach them within tens of milliseconds. Invariants: a reader takes ``version`` before
reading and waits only if it is unchanged, so a notify between its read and its wait is never
lost; ``since`` answers only with a contiguous run of seqs, or None (read the store).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Iterable

from threads.log.lines import Event

POLL_S = 0.02  # head poll for branches another process writes
IDLE_S = 1.0  # safety re-read while this process's own run writes the branch
KEEP = 1024  # committed events kept per branch while our run writes it


class Hub:
    def __init__(self) -> None:
        self._versions: dict[str, int] = {}
        self._waiters: dict[str, set[asyncio.Event]] = {}
        self._recent: dict[str, deque[Event]] = {}

    def version(self, branch_id: str) -> int:
        return self._versions.get(branch_id, 0)

    def notify(self, branch_id: str, events: Iterable[Event] = ()) -> None:
        recent = self._recent.setdefault(branch_id, deque(maxlen=KEEP))
        for event in events:
            if recent and recent[-1].seq + 1 != event.seq:
                recent.clear()  # never keep a gap
            recent.append(event)
        self._versions[branch_id] = self.version(branch_id) + 1
        for waiter in self._waiters.get(branch_id, ()):
            waiter.set()

    def forget(self, branch_id: str) -> None:
        """Our run of the branch ended: readers go back to the store."""
        self._recent.pop(branch_id, None)

    def since(self, branch_id: str, seq: int) -> list[Event] | None:
        """The events after ``seq`` this process committed, or None when they don't reach back
        to ``seq + 1`` (the caller reads the store)."""
        recent = self._recent.get(branch_id)
        if not recent or recent[0].seq > seq + 1:
            return None
        return [e for e in recent if e.seq > seq]

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
