"""Waiting for a branch's lease (``run(..., wait=True)``) instead of failing ``branch_busy``.

The waiter retries the acquire whenever the holder may have let go: it sleeps until the held
lease's expiry, but never longer than ``POLL_MAX_S``, so a holder that finishes (and releases)
or dies on this host (and is taken over at once) is noticed soon after.
Invariant: waiting never takes a lease a live holder still has; every attempt is an ordinary
``acquire_lease``, judged by the store as any other. A deadline is read on the store's clock,
so tests reach it by moving an injected clock.
"""

from __future__ import annotations

import asyncio

from threads.errors import ConfigError, StoreError
from threads.store.protocol import Lease, Store

POLL_MIN_S = 0.02
POLL_MAX_S = 0.5


def check_wait(wait: object) -> None:
    if not isinstance(wait, bool | int | float) or wait < 0:
        raise ConfigError("invalid_config", "wait is True, False or a number of seconds >= 0")


async def acquire_waiting(
    store: Store, branch_id: str, holder_id: str, ttl_ms: int, *, wait: bool | float
) -> Lease:
    """``acquire_lease``; with ``wait`` (True, or a number of seconds) a ``branch_busy`` is
    retried until the lease is taken or the wait is over (then the last ``branch_busy``)."""
    check_wait(wait)
    if wait is False or wait == 0:
        return await store.acquire_lease(branch_id, holder_id, ttl_ms)
    deadline = None if wait is True else store.clock.now_ms() + int(wait * 1000)
    pause = POLL_MIN_S
    while True:
        try:
            return await store.acquire_lease(branch_id, holder_id, ttl_ms)
        except StoreError as busy:
            if busy.code != "branch_busy":
                raise
            now = store.clock.now_ms()
            if deadline is not None and now >= deadline:
                raise
        state = await store.read_lease(branch_id)
        until_expiry = (state.expires_at - state.now) / 1000 if state is not None else 0.0
        until_deadline = (deadline - now) / 1000 if deadline is not None else POLL_MAX_S
        await asyncio.sleep(max(POLL_MIN_S, min(pause, until_expiry, until_deadline)))
        pause = min(pause * 2, POLL_MAX_S)
