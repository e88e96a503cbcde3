"""Pausing Python's cyclic garbage collector while a whole log is decoded or folded.

Reading a long branch allocates a few hundred thousand containers (the parsed lines, their
events, the fold's records) in one burst, and each burst of allocations makes the collector
walk every live object again: on a 10,001-event thread its full passes cost more than the
decoding itself. Nothing a read allocates can form a cycle that only the collector would free
(the values are trees that reference counting frees), so it is paused for the burst and
resumed after, as it was. The pause is shared by every thread of the process (``gc`` is
global): it counts nested and concurrent pauses and resumes the collector when the last ends,
and only if it was enabled when the first began.

Resuming alone would still cost a young pass over everything the burst built (the first
allocation after it starts one) and a middle pass later, though what a long read builds lives
as long as the handle holding it. A pause for a long read (``events`` of ``LONG_READ`` or
more) first runs a young pass, which leaves no young garbage of other code behind, and when the
last pause ends the young generations (the burst) are moved to the oldest one at once
(``gc.freeze`` then ``gc.unfreeze``, which moves lists and walks nothing), where only full
passes visit them. The young pass first matters: without it, cycles other code dropped before
the read would be promoted with it, and a process reading in a loop would keep every one of
them. Promotion is skipped while the application keeps objects frozen itself (``gc.freeze``
before a fork), so its permanent generation is never thawed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Events a read or fold must span for its pause to promote what it builds: far past what the
# young generation's threshold (700 objects) holds, so the young pass it costs is repaid.
LONG_READ = 1_000

_lock = threading.Lock()
_pauses = 0
_resume = False
_promote = False


@contextmanager
def collector_paused(*, events: int = 0) -> Iterator[None]:
    """The collector paused for the block, which reads or folds ``events`` events (see the
    module docstring)."""
    global _pauses, _resume, _promote
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        if events >= LONG_READ and _resume:
            gc.collect(1)  # the young generations hold the burst alone
            _promote = True
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                if _promote and gc.get_freeze_count() == 0:
                    gc.freeze()
                    gc.unfreeze()
                _promote = False
                gc.enable()
