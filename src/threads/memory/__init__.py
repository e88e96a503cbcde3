"""Memory: facts an agent keeps across runs, in one package.

The front door: the ``Memory`` protocol a provider implements and the values it speaks
(``protocol``), ``local_memory()``, which keeps memories in the store itself (``local`` for
SQLite, ``postgres`` for a Postgres store, over the rows both write the same way in ``rows``),
and ``mem0()``, refused at setup because its SDK can't be fenced. How a record's id and text
hash are made is ``records``; the tools an agent gets (``save_memory``, ``search_memory``,
``forget_memory``) are ``tools``.
"""

from threads.memory.local import LocalMemory, local_memory
from threads.memory.protocol import (
    SEARCH_DEFAULT_K,
    BoundMemory,
    Memory,
    MemoryHandle,
    MemoryRecord,
    MemoryScope,
    mem0,
)

__all__ = [
    "SEARCH_DEFAULT_K",
    "BoundMemory",
    "LocalMemory",
    "Memory",
    "MemoryHandle",
    "MemoryRecord",
    "MemoryScope",
    "local_memory",
    "mem0",
]
