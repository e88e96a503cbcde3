"""Which store this is, as the owner of sandboxes and snapshots: an identity a copy does not share.

A sandbox provider writes its creator's identity beside each sandbox and snapshot it makes, and
releases, kills or deletes one only for a caller with the same identity (``SandboxContext.owner``).
A byte copy of a store (a backup, a staging copy) holds every byte the original holds, so no id
kept *in* the store could tell the two apart; what differs is where each one lives. So the
identity is derived from the store's place, never from its content:

- a SQLite store directory: its real path (symlinks resolved). A copy elsewhere is another store;
  a store moved to another path loses its claim (its sandboxes are left alone, never freed by
  mistake); a backup restored at the original's path is that store again.
- ``":memory:"``: one identity per open store object (nothing else can reach it).
- a Postgres store: the cluster's system identifier, the database and the schema. A dump
  restored into another database, schema or cluster is another store.

``owner_id`` is a sha256 of that description, so the owner record reveals nothing of the path.
"""

from __future__ import annotations

import os
import uuid
import weakref
from typing import Any

from threads.log.hashing import sha256_hex

_MEMORY: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
_FORMAT = "threads.store-owner/1"


def owner_id(place: str) -> str:
    """The owner identity of a store living at ``place`` (a description made here)."""
    return sha256_hex(f"{_FORMAT}\n{place}".encode())


def sqlite_owner(store: Any) -> str:
    """The identity of a ``SQLiteStore`` (``root`` is its directory, None in memory)."""
    if store.root is None:
        if store not in _MEMORY:
            _MEMORY[store] = f"sqlite-memory:{uuid.uuid4()}"
        return owner_id(_MEMORY[store])
    return owner_id(f"sqlite:{os.path.realpath(store.root)}")


def postgres_owner(system_identifier: object, database: object, schema: str) -> str:
    """The identity of a Postgres store: its cluster, database and schema."""
    return owner_id(f"postgres:{system_identifier}:{database}:{schema}")
