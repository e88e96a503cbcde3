"""Pausing the cyclic collector for a bulk read leaves it as it found it, whatever nests,
overlaps from another thread or raises inside; a large burst goes straight to the oldest
generation, and what the application froze stays frozen."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from threads.log.collector import LONG_READ, collector_paused


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    gc.enable()
    yield
    gc.enable()


def read_damaged() -> None:
    with collector_paused():
        assert not gc.isenabled()
        raise RuntimeError("a damaged line")


def test_paused_inside_and_resumed_after_even_when_it_raises() -> None:
    with pytest.raises(RuntimeError):
        read_damaged()
    assert gc.isenabled()


def test_a_nested_pause_does_not_resume_it_early() -> None:
    with collector_paused():
        with collector_paused():
            pass
        assert not gc.isenabled()
    assert gc.isenabled()


def test_it_is_resumed_when_the_last_of_two_threads_ends() -> None:
    inside, release = threading.Event(), threading.Event()

    def other() -> None:
        with collector_paused():
            inside.set()
            release.wait()

    thread = threading.Thread(target=other)
    with collector_paused():
        thread.start()
        inside.wait()
    assert not gc.isenabled()  # the other thread still reads
    release.set()
    thread.join()
    assert gc.isenabled()


def test_a_collector_the_application_disabled_stays_disabled() -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()



class Node:
    """A container the collector tracks, in a cycle of its own: only a pass frees it."""

    def __init__(self) -> None:
        self.me = self


def long_read() -> list[list[int]]:
    """What a read of ``LONG_READ`` events builds, more or less: a few containers each."""
    with collector_paused(events=LONG_READ):
        return [[index] for index in range(LONG_READ * 5)]


def test_a_long_reads_burst_goes_straight_to_the_oldest_generation() -> None:
    kept = long_read()
    assert gc.get_count()[0] < 700  # no young pass is owed for the burst
    oldest = {id(obj) for obj in gc.get_objects(generation=2)}
    assert all(id(item) in oldest for item in kept)
    assert gc.get_freeze_count() == 0


def test_a_short_reads_burst_stays_young() -> None:
    gc.collect()
    with collector_paused(events=LONG_READ - 1):
        kept = [[index] for index in range(LONG_READ * 5)]
    oldest = {id(obj) for obj in gc.get_objects(generation=2)}
    assert not any(id(item) in oldest for item in kept)


def test_garbage_dropped_before_a_long_read_is_not_promoted_with_it() -> None:
    gc.collect()
    cycle = Node()
    gone = weakref.ref(cycle)
    del cycle
    assert gone() is not None  # unreachable, but only a pass frees a cycle
    assert long_read()
    assert gone() is None


def test_reading_in_a_loop_keeps_no_garbage() -> None:
    """A process that drops a few cycles between long reads (a host answering requests) does
    not keep them: each read's young pass frees them, whatever promotion did before."""
    gc.collect()
    for _ in range(50):
        for _ in range(300):  # fewer than a young pass's threshold between two reads
            Node()
        assert long_read()
    assert sum(type(obj) is Node for obj in gc.get_objects()) <= 300


def test_objects_the_application_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert long_read()
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
