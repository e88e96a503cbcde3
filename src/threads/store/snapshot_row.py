"""A ``fold_snapshots`` row as written (``StoredSnapshot``): a branch's fold, or the summary a
listing reads, made at a head (seq and hash), and the statement that puts it.

A row goes in with the append (or import) whose last event it follows, in its transaction
(``require_snapshots`` holds the caller to that head), replacing the branch's row of that kind.
Reading rows back is ``threads.store.fold_snapshots``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.store.layout import FOLD_SNAPSHOTS
from threads.store.statements import POSTGRES

SnapshotKind = Literal["fold", "summary"]

SNAPSHOT_COLUMNS = FOLD_SNAPSHOTS.column_names()
SNAPSHOT_UPDATE = ", ".join(
    f"{name} = excluded.{name}" for name in SNAPSHOT_COLUMNS.split(", ")[2:]
)
PUT = (
    f"INSERT INTO fold_snapshots({SNAPSHOT_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
    f" ON CONFLICT (branch_id, kind) DO UPDATE SET {SNAPSHOT_UPDATE}"
)
PUT_POSTGRES = POSTGRES.render(PUT)


@dataclass(frozen=True, slots=True)
class StoredSnapshot:
    """One row: ``body`` (format ``format``, by fold code ``fold_code``) made at ``seq`` and
    ``head_hash`` of ``branch_id``; ``sha256`` is the body's, as written."""

    branch_id: str
    kind: SnapshotKind
    seq: int
    head_hash: str
    format: int
    fold_code: str
    sha256: str
    body: bytes

    @classmethod
    def of(
        cls, branch_id: str, kind: SnapshotKind, head: tuple[int, str], *, format: int,
        fold_code: str, body: bytes,
    ) -> StoredSnapshot:
        return cls(branch_id, kind, head[0], head[1], format, fold_code, sha256_hex(body), body)

    def row(self) -> tuple[str, str, int, str, int, str, str, bytes]:
        return (self.branch_id, self.kind, self.seq, self.head_hash, self.format,
                self.fold_code, self.sha256, self.body)

    @property
    def intact(self) -> bool:
        """Whether the body is still the bytes it was written with."""
        return sha256_hex(self.body) == self.sha256




def require_snapshots(
    branch_id: str, events: Sequence[Event], snapshots: Sequence[StoredSnapshot]
) -> None:
    """A snapshot appended with a batch is of that branch at the batch's last event."""
    if not snapshots:
        return
    head = (events[-1].seq, events[-1].hash) if events else None
    for stored in snapshots:
        if stored.branch_id != branch_id or (stored.seq, stored.head_hash) != head:
            raise StoreError(
                "invalid_argument",
                f"refused append: a {stored.kind} snapshot must be of branch {branch_id} at the"
                " batch's last event (nothing of the batch was written)",
            )
