"""Control actions from any process (approve, deny, resolve, cancel): each takes the branch's
lease only for its one append, so it is fenced like any writer and fails ``branch_busy`` while a
live run holds the thread."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from threads.log.ids import uuid7
from threads.run.writer import BranchWriter
from threads.store.lease_release import release
from threads.store.protocol import Store

CONTROL_TTL_MS = 10_000


@contextlib.asynccontextmanager
async def control_writer(store: Store, branch_id: str) -> AsyncIterator[BranchWriter]:
    lease = await store.acquire_lease(branch_id, uuid7(store.clock.now_ms()), CONTROL_TTL_MS)
    try:
        chain = await store.read_chain(branch_id)
        fold = chain.fold(store.clock.now_ms())
        writer = BranchWriter(store, lease, fold, ttl_ms=CONTROL_TTL_MS)
        yield writer
    finally:
        await release(store, lease)
