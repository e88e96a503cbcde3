"""Row mapping and read-time checks shared by every store engine.

A stored branch is trusted only as far as its bytes still chain: ``check_chain`` re-hashes the
resolved chain on every read and refuses a branch whose lines no longer link to the stored head
(``log_corrupt{at_seq}``). Full admission (canonical form, schema) happens on import and verify;
lines this implementation wrote were canonical by construction.
"""

from __future__ import annotations

import json
from typing import Any

from threads.errors import StoreError
from threads.store.protocol import BranchInfo, Segment

SCHEMA_VERSION = 6

BRANCH_COLUMNS = (
    "branch_id, thread_id, tenant_id, parent_branch_id, fork_at_seq, state, head_seq,"
    " head_hash, head_verified, dropped_ref"
)


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
        f"branch {branch_id} is corrupt ({cause}); it can be read and exported for inspection"
        " but not run. Fork it for repair at the last good seq, or restore it from an export.",
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
