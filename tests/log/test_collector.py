"""Pausing the cyclic collector for a bulk read leaves it as it found it, whatever nests,
overlaps from another thread or raises inside."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from threads.log.collector import collector_paused


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
    """A container the collector tracks, in a cycle of its own: only a pass frees it. (No
    ``__dict__``: making one could start a pass while the node is still referenced.)"""

    __slots__ = ("me",)

    def __init__(self) -> None:
        self.me = self


def test_cycles_other_code_drops_around_and_during_reads_are_freed() -> None:
    """Cycles other code drops between long reads, and while one runs (a host's loop while its
    store thread reads), are freed by the next young pass: a pause never moves what it did not
    build out of that pass's reach. (Moving the young generations to the oldest after each read
    kept every such cycle until a full pass, and none came.)"""
    gc.collect()
    for _ in range(20):
        for _ in range(300):  # fewer than a young pass's threshold between two reads
            Node()
        with collector_paused():
            kept = [[index] for index in range(20_000)]
            for _ in range(300):  # another thread's garbage, made meanwhile
                Node()
        assert kept
    gc.collect(1)  # the young passes: promoted cycles (6,000 of them) would outlive them
    assert sum(type(obj) is Node for obj in gc.get_objects()) < 10
