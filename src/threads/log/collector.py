"""Pausing Python's cyclic garbage collector while a whole log is decoded or folded.

Reading a long branch allocates a few hundred thousand containers (the parsed lines, their
events, the fold's records) in one burst, and each burst of allocations makes the collector
walk every live object again: on a 10,001-event thread its full passes cost more than the
decoding itself. Nothing a read allocates can form a cycle that only the collector would free
(the values are trees that reference counting frees), so it is paused for the burst and
resumed after, as it was. The pause is shared by every thread of the process (``gc`` is
global): it counts nested and concurrent pauses and resumes the collector when the last ends,
and only if it was enabled when the first began.

Resuming alone would not be enough: the first allocation after it starts a young pass over
everything the burst built, and a middle pass walks it again later, though what a read builds
lives as long as the handle that holds it. So when the pause leaves a large burst behind
(``PROMOTE_AT`` young objects or more), the young objects are moved to the oldest generation
at once (``gc.freeze`` then ``gc.unfreeze``, which moves lists and walks nothing), where only
full passes visit them. That moves the few young objects of other code present at that instant
too: a cycle among them is freed by the next full pass instead of a young one. It is skipped
while the application keeps objects frozen itself (``gc.freeze`` before a fork), so its
permanent generation is never thawed.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

# Young objects a pause must leave behind for them to go straight to the oldest generation:
# a read of about a thousand events. Far above the young generation's threshold (700), so what
# other code allocates between two passes is never enough on its own.
PROMOTE_AT = 5_000

_lock = threading.Lock()
_pauses = 0
_resume = False


@contextmanager
def collector_paused() -> Iterator[None]:
    global _pauses, _resume
    with _lock:
        if _pauses == 0:
            _resume = gc.isenabled()
            gc.disable()
        _pauses += 1
    try:
        yield
    finally:
        with _lock:
            _pauses -= 1
            if _pauses == 0 and _resume:
                _promote_burst()
                gc.enable()


def _promote_burst() -> None:
    """Move the young generations into the oldest (see the module docstring), when a burst
    filled them and nothing is frozen."""
    if gc.get_count()[0] >= PROMOTE_AT and gc.get_freeze_count() == 0:
        gc.freeze()
        gc.unfreeze()
