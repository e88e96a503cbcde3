"""Pausing Python's cyclic garbage collector while a whole log is decoded or folded.

Reading a long branch allocates a few hundred thousand containers (the parsed lines, their
events, the fold's records) in one burst, and each burst of allocations makes the collector
walk every live object again: on a 10,001-event thread its full passes cost more than the
decoding itself. Nothing a read allocates can form a cycle that only the collector would free
(the values are trees that reference counting frees), so it is paused for the burst and
resumed after, as it was. The pause is shared by every thread of the process (``gc`` is
global): it counts nested and concurrent pauses and resumes the collector when the last ends,
and only if it was enabled when the first began.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from contextlib import contextmanager

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
                gc.enable()
