"""Minted ids: UUIDv7 order and uniqueness, and the OS randomness pool behind them (each byte
handed out once, across threads, and never again in a forked child)."""

from __future__ import annotations

import os
import threading

from threads.log import ids
from threads.log.ids import UUID_PATTERN, random_bytes, uuid7


def test_ids_are_lowercase_v7_and_increase_within_one_millisecond() -> None:
    minted = [uuid7(1_700_000_000_000) for _ in range(5000)]
    assert all(UUID_PATTERN.match(i) and i[14] == "7" for i in minted)
    assert minted == sorted(minted)
    assert len(set(minted)) == len(minted)


def test_the_pool_hands_each_byte_out_once_across_threads() -> None:
    taken: list[bytes] = []
    lock = threading.Lock()

    def draw() -> None:
        mine = [random_bytes(8) for _ in range(2000)]
        with lock:
            taken.extend(mine)

    workers = [threading.Thread(target=draw) for _ in range(8)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    assert len(taken) == 16_000
    assert len(set(taken)) == len(taken)  # 64-bit draws: a repeat means bytes reused


def test_a_request_larger_than_the_pool_is_served() -> None:
    assert len(random_bytes(ids.POOL_BYTES + 1)) == ids.POOL_BYTES + 1


def test_a_forked_child_does_not_reuse_its_parents_pool() -> None:
    random_bytes(1)  # the parent has a pool with bytes left in it
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report its next draw, then leave at once
        os.write(write, random_bytes(16))
        os._exit(0)
    os.close(write)
    child = os.read(read, 16)
    os.close(read)
    os.waitpid(pid, 0)
    assert child != random_bytes(16)  # the parent's next bytes, which a shared pool repeats
