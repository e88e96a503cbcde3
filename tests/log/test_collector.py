"""Pausing the cyclic collector for a bulk read leaves it as it found it, whatever nests,
overlaps from another thread or raises inside; a large burst goes straight to the oldest
generation, and what the application froze stays frozen."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator

import pytest

from threads.log.collector import PROMOTE_AT, collector_paused


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
    """A container the collector tracks, that can be put in a cycle."""

    def __init__(self) -> None:
        self.other: object = None


def test_a_large_burst_goes_straight_to_the_oldest_generation() -> None:
    with collector_paused():
        kept = [[index] for index in range(PROMOTE_AT * 2)]
    assert gc.get_count()[0] < PROMOTE_AT  # no young pass is owed for the burst
    oldest = {id(obj) for obj in gc.get_objects(generation=2)}
    assert all(id(item) in oldest for item in kept)
    assert gc.get_freeze_count() == 0


def test_a_small_burst_stays_young() -> None:
    gc.collect()
    with collector_paused():
        kept = [[index] for index in range(100)]
    young = {id(obj) for obj in gc.get_objects(generation=0)}
    assert all(id(item) in young for item in kept)


def test_a_cycle_promoted_with_a_burst_is_still_freed_by_a_full_pass() -> None:
    first, second = Node(), Node()
    first.other, second.other = second, first
    gone = weakref.ref(first)
    with collector_paused():
        kept = [[index] for index in range(PROMOTE_AT * 2)]
    del first, second
    gc.collect()
    assert gone() is None
    assert kept


def test_objects_the_application_froze_stay_frozen() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with collector_paused():
            kept = [[index] for index in range(PROMOTE_AT * 2)]
        assert gc.get_freeze_count() == frozen
        assert kept
    finally:
        gc.unfreeze()
