"""Row mapping and read-time checks shared by every store engine.

A stored branch is trusted only as far as its bytes still chain: ``check_chain`` re-hashes the
resolved chain on every read and refuses a branch whose lines no longer link to the stored head
(``log_corrupt{at_seq}``). Full admission (canonical form, schema) happens on import and verify;
lines this implementation wrote were canonical by construction.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from threads.errors import NotFound, StoreError
from threads.log.canonical import canonical
from threads.log.hashing import sha256_hex
from threads.log.lines import Event, event_from_value, header_from_value
from threads.store.holder import parse as parse_holder
from threads.store.holder import provably_gone
from threads.store.protocol import ArtifactRef, BranchInfo, Lease, Segment

SCHEMA_VERSION = 6

BRANCH_COLUMNS = (
    "branch_id, thread_id, tenant_id, parent_branch_id, fork_at_seq, state, head_seq,"
    " head_hash, head_verified, dropped_ref"
)


def free_roots_query(now: str, order: str) -> str:
    """Root branches in state ``ready``, each with its live lease's holder id (NULL when there
    is no lease row or it expired), ``now`` being the engine's expression for the lease clock;
    ordered by ``b.<order>`` (creation order). ``free_roots`` keeps the claimable ones."""
    columns = ", ".join(f"b.{c.strip()}" for c in BRANCH_COLUMNS.split(","))
    return (
        f"SELECT {columns}, CASE WHEN l.expires_at > {now} THEN l.holder_id END"
        " FROM branches b LEFT JOIN leases l ON l.branch_id = b.branch_id"
        f" WHERE b.parent_branch_id IS NULL AND b.state = 'ready' ORDER BY b.{order}"
    )


def free_roots(rows: Sequence[tuple[Any, ...]]) -> list[BranchInfo]:
    """The rows of ``free_roots_query`` a worker may claim: no live lease, or a live lease
    whose holder is provably gone (a process of this host that died)."""
    return [
        branch_from_row(row)
        for row in rows
        if row[-1] is None or provably_gone(parse_holder(row[-1]))
    ]


def branch_from_row(row: tuple[Any, ...]) -> BranchInfo:
    dropped = row[9]
    return BranchInfo(
        branch_id=row[0],
        thread_id=row[1],
        tenant_id=row[2],
        parent_branch_id=row[3],
        fork_at_seq=row[4],
        state=row[5],
        head_seq=row[6],
        head_hash=row[7],
        head_verified=bool(row[8]),
        dropped_ref=None if dropped is None else json.loads(dropped),
    )


def unsupported_schema(version: int) -> StoreError:
    return StoreError(
        "unsupported_format",
        f"this store has schema version {version}; threads 0.1.0 reads version {SCHEMA_VERSION}."
        " Use the threads release that wrote it (no migrations before 1.0).",
    )


def decode_line(raw: bytes, branch_id: str) -> dict[str, Any]:
    try:
        value = json.loads(raw)
    except ValueError:
        raise corrupt(branch_id, None, "a stored line is not JSON") from None
    if not isinstance(value, dict):
        raise corrupt(branch_id, None, "a stored line is not a JSON object")
    return value


def corrupt(branch_id: str, seq: int | None, cause: str) -> StoreError:
    return StoreError(
        "log_corrupt",
        f"branch {branch_id} is corrupt ({cause}); it can't be run. Export its stored bytes for"
        " inspection (threads export --inspect), or restore it from a good export.",
        seq=seq,
    )


def check_chain(target: BranchInfo, segments: list[Segment]) -> None:
    """Seq contiguity, prev_hash links and the stored head of every segment."""
    expected_seq = 1
    for segment in segments:
        previous = segment.header.hash
        for event in segment.events:
            if event.seq != expected_seq:
                raise corrupt(segment.header.branch_id, event.seq, "seq is not contiguous")
            if event.prev_hash != previous:
                raise corrupt(segment.header.branch_id, event.seq, "prev_hash does not chain")
            previous = event.hash
            expected_seq += 1
    last = segments[-1]
    head_hash = last.events[-1].hash if last.events else last.header.hash
    head_seq = expected_seq - 1
    if (head_seq, head_hash) != (target.head_seq, target.head_hash):
        raise corrupt(target.branch_id, head_seq, "stored lines do not end at the stored head")


# ---- decisions shared by every engine (the engines only fetch the rows) ---------------------


def stale_epoch(lease: Lease) -> StoreError:
    return StoreError(
        "stale_epoch",
        f"this run no longer holds the thread at epoch {lease.epoch}; another process took"
        " it over (or the lease expired). Nothing more is written or sent by this run.",
    )


def require_lease_branch(lease: Lease, branch_id: str) -> None:
    if lease.branch_id != branch_id:
        raise StoreError(
            "stale_epoch",
            f"the lease presented is for branch {lease.branch_id}, not {branch_id};"
            " acquire this branch's lease before appending to it",
        )


def require_batch(branch_id: str, lease: Lease, events: Sequence[Event]) -> None:
    """A batch is written under its lease's epoch, to its own branch, and chains by itself:
    a writer bug is refused here instead of being stored and later read as ``log_corrupt``."""
    require_lease_branch(lease, branch_id)
    previous: Event | None = None
    for event in events:
        wrong = None
        if event.branch_id != branch_id:
            wrong = f"names branch {event.branch_id}"
        elif event.epoch != lease.epoch:
            wrong = f"has epoch {event.epoch}, not the lease's {lease.epoch}"
        elif previous is not None and event.seq != previous.seq + 1:
            wrong = f"has seq {event.seq}, not {previous.seq + 1}"
        elif previous is not None and (
            event.prev_hash != previous.hash or event.thread_id != previous.thread_id
        ):
            wrong = "does not chain to the event before it in the batch"
        if wrong is not None:
            raise StoreError("invalid_argument", f"refused append: event {event.event_id} {wrong}")
        previous = event


def require_live(row: tuple[Any, ...] | None, lease: Lease, now: int) -> None:
    """``row`` = (holder_id, epoch, expires_at) of the branch's lease row, or None."""
    if row is None or row[0] != lease.holder_id or row[1] != lease.epoch or row[2] <= now:
        raise stale_epoch(lease)


def require_free(row: tuple[Any, ...] | None, holder_id: str, now: int) -> None:
    """``branch_busy`` when a live lease of another holder is on the row, unless that holder
    is provably gone (it died on this host): then its lease is taken over at once."""
    if row is None or row[0] == holder_id or row[2] <= now:
        return
    holder = parse_holder(row[0])
    if provably_gone(holder):
        return
    raise StoreError(
        "branch_busy",
        f"another process is running this thread ({holder.describe()}); its lease expires in"
        f" {(row[2] - now) / 1000:.1f} s. Wait for it (run(..., wait=True) waits), or run"
        " again then: a holder that died on another host is taken over once its lease expires",
    )


def require_head(
    branch_id: str, row: tuple[Any, ...] | None, expected_seq: int, events: Sequence[Event]
) -> None:
    """``row`` = (head_seq, head_hash, state) of the branch being appended to."""
    if row is None:
        raise NotFound(f"no branch {branch_id} in this store")
    head_seq, head_hash, state = row
    if head_seq != expected_seq:
        raise StoreError(
            "seq_conflict",
            f"branch head is at seq {head_seq}, not {expected_seq}: another writer"
            " appended; re-read the branch and decide again",
        )
    if state != "ready":
        raise StoreError("branch_not_runnable", f"branch is {state}; it takes no appends")
    if events and (events[0].prev_hash != head_hash or events[0].seq != head_seq + 1):
        raise StoreError("seq_conflict", "first event does not chain to the stored head")


def event_rows(branch_id: str, events: Sequence[Event]) -> list[tuple[Any, ...]]:
    """Rows for ``events(branch_id, seq, event_id, type, type_version, critical, epoch, line)``."""
    return [
        (branch_id, e.seq, e.event_id, e.type, e.type_version, int(e.critical), e.epoch, e.line)
        for e in events
    ]


def segment_head(segment: Segment) -> tuple[int, str]:
    """(head_seq, head_hash) a stored segment ends at."""
    if segment.events:
        return segment.events[-1].seq, segment.events[-1].hash
    return segment.fork_at_seq or 0, segment.header.hash


def dropped_ref_text(dropped_ref: ArtifactRef | None) -> str | None:
    return None if dropped_ref is None else canonical(dropped_ref).decode()


def same_segment(segment: Segment, header_line: bytes, stored_lines: list[bytes]) -> bool:
    """False when the stored branch holds exactly ``segment``'s bytes; else ``seq_conflict``."""
    incoming = [e.line for e in segment.events]
    if header_line == segment.header.line and stored_lines == incoming:
        return False
    raise StoreError(
        "seq_conflict",
        f"branch {segment.header.branch_id} is already stored with different lines;"
        " import it into another store, or fork instead",
    )


def build_segment(info: BranchInfo, header_line: bytes, lines: list[bytes]) -> Segment:
    """Decode one stored segment (its header and its lines through the cut)."""
    header = header_from_value(decode_line(header_line, info.branch_id), header_line)
    events = [event_from_value(decode_line(raw, info.branch_id), raw) for raw in lines]
    return Segment(header, events, info.fork_at_seq)


def artifact_ref(data: bytes, media_type: str) -> ArtifactRef:
    return {"bytes": len(data), "media_type": media_type, "sha256": sha256_hex(data)}


def verified_artifact(sha256: str, data: bytes) -> bytes:
    if sha256_hex(data) != sha256:
        raise StoreError("artifact_corrupt", f"artifact {sha256} does not match its hash")
    return bytes(data)


def artifact_missing(sha256: str) -> StoreError:
    return StoreError("artifact_missing", f"artifact {sha256} is not in this store")
