"""What ``local_memory()`` keeps the same on every engine: record ids, the binding namespace,
the write window, how a query becomes search terms, and the rule for saving under a key again.
"""

from __future__ import annotations

import re
from typing import Any

from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.memory.protocol import MemoryRecord, MemoryScope

FOREVER_MS = 2**53 - 1  # writes are idempotent by key for good
NAMESPACE = "local"  # the memory_bindings namespace of this provider's records
TERM = re.compile(r"\w+", re.UNICODE)  # a query is its words: nothing in it is search syntax


def record_id(key: str) -> str:
    return "mem_" + sha256_hex(key.encode("utf-8"))[:24]


def text_hash(text: str) -> str:
    return sha256_hex(text.encode("utf-8"))


def saved_again(
    row: tuple[Any, ...], scope: MemoryScope, digest: str, key: str, text: str
) -> MemoryRecord:
    """A save under a key already saved: ``row`` = (tenant, agent, scope, text hash, created
    at) of that record. The same scope and text is the same record; anything else is refused."""
    if tuple(row[:4]) != (scope.tenant_id, scope.agent, scope.user, digest):
        raise StoreError(
            "invalid_argument",
            f"memory key {key} already saved other content; a key names one write",
        )
    return MemoryRecord(record_id(key), text, int(row[4]))
