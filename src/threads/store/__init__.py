"""The store: where a thread's log, its branches, leases and artifacts are kept.

Front door: the ``Store`` protocol every engine provides and the values it speaks in. The
engines are packages of their own: ``threads.store.sqlite`` (the default, a directory the
reference implementation can open) and ``threads.store.postgres`` (the ``postgres`` extra).
What both engines share is written once beside them: the table spec (``layout``), the
statements (``statements``), what a store does on its connection (``flows``, run by
``core.StoreCore``), the rules a read or an append checks (``rows``), and the views beside the
log (``controls``, ``resource_ledger``, ``request_deltas``).
``docs/internals/store.md`` draws the layout.
"""

from threads.log.vocabulary import ArtifactRef
from threads.store.protocol import (
    BranchInfo,
    Chain,
    Lease,
    LeaseState,
    PendingArtifact,
    Segment,
    Store,
    StoredRow,
)

__all__ = [
    "ArtifactRef",
    "BranchInfo",
    "Chain",
    "Lease",
    "LeaseState",
    "PendingArtifact",
    "Segment",
    "Store",
    "StoredRow",
]
