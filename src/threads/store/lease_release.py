"""Handing a lease back when a run (or a control) ends, whichever way it ends.

A release is one small write. When it can't be written (the store is full, read-only or out of
reach: the very fault that may have ended the run) the lease is still nobody's: the run is
over, so nothing writes or sends under it. The row keeps naming this process until its expiry,
so ``release`` records the holder as ended in this process (``threads.store.holder.ended``):
this process's next acquire on the branch takes it over at once, and another process waits
for the expiry (at most one TTL), as after any holder it can't prove gone.

Invariant: ``release`` never raises; it logs what it could not write.
"""

from __future__ import annotations

import logging

from threads.errors import StoreError
from threads.store.holder import ended
from threads.store.protocol import Lease, Store

log = logging.getLogger("threads")


async def release(store: Store, lease: Lease) -> None:
    """Release ``lease``; a release the store can't take leaves it to expire (see above)."""
    try:
        await store.release_lease(lease)
    except Exception as exc:  # whatever stopped the release, the lease then expires
        ended(lease.holder_id)
        log.warning(
            "branch %s: the lease could not be released (%s); it expires on its own at"
            " %d, and this process takes it back at once",
            lease.branch_id,
            exc.code if isinstance(exc, StoreError) else type(exc).__name__,
            lease.expires_at,
        )
