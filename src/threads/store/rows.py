"""Row mapping and read-time checks shared by every store engine.

A stored branch is trusted only as far as its bytes still chain: ``check_chain`` re-hashes the
resolved chain on every read and refuses a branch whose lines no longer link to the stored head
(``log_corrupt{at_seq}``), and any stored line that no longer decodes into its envelope is
``log_corrupt`` at its position. Every line a store takes passes full line admission first
(``admit_appended``: the same ``admit_line`` an import applies), so a store holds only lines
that verify, export and import.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from threads.errors import LogError, NotFoundError, StoreError
from threads.log.admission import admit_line
from threads.log.canonical import MAX_SAFE_INT, canonical
from threads.log.collector import collector_paused
from threads.log.hashing import sha256_hex
from threads.log.json_types import JsonObject
from threads.log.lines import (
    Event,
    Header,
    event_from_value,
    events_from_values,
    header_from_value,
)
from threads.log.stored_json import UndecodedLineError, loads_stored, loads_stored_lines
from threads.log.vocabulary import ArtifactRef
from threads.store.holder import parse as parse_holder
from threads.store.holder import provably_gone
from threads.store.layout import SCHEMA_VERSION
from threads.store.protocol import BranchInfo, Chain, Lease, Segment, StoredRow


def free_roots(rows: Sequence[tuple[Any, ...]]) -> list[BranchInfo]:
    """The rows of ``statements.FREE_ROOTS`` a worker may claim: no live lease, or a live lease
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


def corrupt(branch_id: str, seq: int | None, cause: str) -> StoreError:
    return StoreError(
        "log_corrupt",
        f"branch {branch_id} is corrupt ({cause}); it can't be run. Export its stored bytes for"
        " inspection (an export with --inspect), or restore it from a good export.",
        seq=seq,
    )


def check_chain(target: BranchInfo, segments: list[Segment]) -> None:
    """Seq contiguity, prev_hash links and the stored head of every segment. ``at_seq`` names
    the damaged line (``_damaged_seq``)."""
    expected_seq = 1
    for index, segment in enumerate(segments):
        previous = segment.header.hash
        for position, event in enumerate(segment.events):
            if event.seq != expected_seq:
                raise corrupt(segment.header.branch_id, expected_seq, "seq is not contiguous")
            if event.prev_hash != previous:
                head_hash = target.head_hash if index == len(segments) - 1 else None
                at_seq = _damaged_seq(segment, position, head_hash)
                raise corrupt(segment.header.branch_id, at_seq, "prev_hash does not chain")
            previous = event.hash
            expected_seq += 1
    last_segment = segments[-1]
    head_hash = last_segment.events[-1].hash if last_segment.events else last_segment.header.hash
    head_seq = expected_seq - 1
    if (head_seq, head_hash) != (target.head_seq, target.head_hash):
        raise corrupt(target.branch_id, head_seq, "stored lines do not end at the stored head")


def _damaged_seq(segment: Segment, position: int, head_hash: str | None) -> int:
    """The link into ``segment.events[position]`` is broken: the line before it changed when
    this line still links to what follows it (the next line's ``prev_hash``, or the stored head
    of the last segment), else this line's own ``prev_hash`` did; 0 is the header."""
    events = segment.events
    event = events[position]
    following = events[position + 1].prev_hash if position + 1 < len(events) else head_hash
    if following != event.hash:
        return event.seq
    return events[position - 1].seq if position else 0


# ---- decisions shared by every engine (the engines only fetch the rows) ---------------------


def stale_epoch(lease: Lease) -> StoreError:
    return StoreError(
        "stale_epoch",
        f"this run no longer holds the thread at epoch {lease.epoch}; another process took"
        " it over (or the lease expired). Nothing more is written or sent by this run.",
    )


def duplicate_event(branch_id: str) -> StoreError:
    """An append whose insert hit a unique key although its head check passed: an event of
    the batch reuses an ``event_id`` already stored on the branch (a writer bug)."""
    return StoreError(
        "invalid_argument",
        f"refused append: an event of this batch has an event_id already stored on branch"
        f" {branch_id}; mint new ids (nothing of the batch was written)",
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
    admit_appended(None, events)
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
    branch_id: str,
    row: tuple[Any, ...] | None,
    expected_seq: int,
    events: Sequence[Event],
    *,
    state_needed: str = "ready",
) -> None:
    """``row`` = (head_seq, head_hash, state) of the branch being appended to; only a branch in
    ``state_needed`` takes the append (``forking`` for the append that finishes a fork)."""
    if row is None:
        raise NotFoundError(f"no branch {branch_id} in this store")
    head_seq, head_hash, state = row
    if head_seq != expected_seq:
        raise StoreError(
            "seq_conflict",
            f"branch head is at seq {head_seq}, not {expected_seq}: another writer"
            " appended; re-read the branch and decide again",
        )
    if state != state_needed:
        if state_needed == "forking":
            raise StoreError(
                "branch_not_runnable",
                f"this fork was given up ({state}) while it restored; fork again",
            )
        raise StoreError("branch_not_runnable", f"branch is {state}; it takes no appends")
    if events and (events[0].prev_hash != head_hash or events[0].seq != head_seq + 1):
        raise StoreError("seq_conflict", "first event does not chain to the stored head")


def event_rows(branch_id: str, events: Sequence[Event]) -> list[tuple[Any, ...]]:
    """Rows for ``events(branch_id, seq, event_id, type, type_version, critical, epoch, line)``."""
    return [
        (branch_id, e.seq, e.event_id, e.type, e.type_version, int(e.critical), e.epoch, e.line)
        for e in events
    ]


def stored_row(row: tuple[Any, ...]) -> StoredRow:
    """A row of ``SELECT seq, event_id, type, type_version, critical, epoch, line``."""
    return StoredRow(row[0], row[1], row[2], row[3], row[4], row[5], bytes(row[6]))


def derived_mismatch(branch_id: str, row: StoredRow) -> str | None:
    """Which stored columns of ``row`` differ from what its line says (None: all agree). The
    columns are the ones ``event_rows`` derives, so the two can never drift apart."""
    try:
        event = event_from_value(_decoded(row.line), row.line)
    except (ValueError, KeyError, TypeError):
        return "its line does not decode"
    names = ("seq", "event_id", "type", "type_version", "critical", "epoch")
    stored = (row.seq, row.event_id, row.type, row.type_version, row.critical, row.epoch)
    derived = event_rows(branch_id, [event])[0][1:7]
    wrong = [
        f"{name} is {have!r}, its line says {want!r}"
        for name, have, want in zip(names, stored, derived, strict=True)
        if have != want
    ]
    return "; ".join(wrong) or None


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


def resolved_chain(
    target: BranchInfo, stored: Sequence[tuple[BranchInfo, bytes, list[bytes]]]
) -> Chain:
    """The chain ``target`` resolves to, from its stored bytes segment by segment (an engine's
    ``read_chain``): each segment decoded, then every link checked (``check_chain``)."""
    with collector_paused():
        segments = [build_segment(info, header, lines) for info, header, lines in stored]
    check_chain(target, segments)
    return Chain(target, segments)


def build_segment(info: BranchInfo, header_line: bytes, lines: list[bytes]) -> Segment:
    """Decode one stored segment (its header and its lines through the cut). A line that no
    longer decodes into a header or an envelope (a damaged byte anywhere, a key name included)
    is ``log_corrupt`` at its position; a damaged value is caught by ``check_chain``."""
    try:
        header = header_from_value(_decoded(header_line), header_line)
    except (ValueError, KeyError, TypeError):
        raise corrupt(info.branch_id, 0, "its stored header does not decode") from None
    first = (info.fork_at_seq or 0) + 1
    try:
        values = loads_stored_lines(lines)
    except UndecodedLineError as exc:
        # a line before it that parses but is no envelope is the first damage
        _events(info.branch_id, first, lines, loads_stored_lines(lines[: exc.index]))
        raise corrupt(info.branch_id, first + exc.index, _UNDECODED) from None
    try:
        events = events_from_values(values, lines)
    except (KeyError, TypeError):
        _events(info.branch_id, first, lines, values)  # names the first that is no envelope
        raise
    return Segment(header, events, info.fork_at_seq)


_UNDECODED = "a stored line does not decode"


def _events(branch_id: str, first: int, lines: list[bytes], values: list[Any]) -> list[Event]:
    """The events of ``lines`` parsed (``values``: all of them, or the first few; the first at
    seq ``first``); the first value that is not an envelope is ``log_corrupt`` at its seq."""
    events = []
    for position, (value, raw) in enumerate(zip(values, lines, strict=False), start=first):
        try:
            if not isinstance(value, dict):
                raise TypeError("a stored line is not a JSON object")
            events.append(event_from_value(value, raw))
        except (KeyError, TypeError):
            raise corrupt(branch_id, position, _UNDECODED) from None
    return events


def _decoded(raw: bytes) -> JsonObject:
    value = loads_stored(raw)
    if not isinstance(value, dict):
        raise TypeError("a stored line is not a JSON object")
    return value


def admit_appended(header: Header | None, events: Sequence[Event]) -> None:
    """Admit each line a store is asked to take exactly as an import admits it (size, depth,
    canonical form, safe integers, schema, id patterns): ``invalid_line`` at its seq."""
    if header is not None:
        admit_line(header.line, position_seq=0)
    for event in events:
        admitted = admit_line(event.line, position_seq=event.seq)
        if not isinstance(admitted, Event):
            raise LogError("invalid_line", "an appended line must be an event", seq=event.seq)


def require_first_events(
    header: Header, fork_at_seq: int | None, events: Sequence[Event]
) -> tuple[int, str]:
    """A new branch's header and first events, checked as one batch (admission, then each
    event chaining from the header on the new branch); returns the head they end at."""
    admit_appended(header, events)
    seq, head_hash = fork_at_seq or 0, header.hash
    for event in events:
        if (event.branch_id, event.thread_id) != (header.branch_id, header.thread_id) or (
            event.seq != seq + 1 or event.prev_hash != head_hash
        ):
            raise StoreError(
                "invalid_argument",
                f"refused branch creation: event {event.event_id} does not chain from the"
                " new branch's header",
            )
        seq, head_hash = event.seq, event.hash
    return seq, head_hash


def next_epoch(lease_epoch: int, chain_epoch: int) -> int:
    """The epoch a new holder gets; refused once it would leave the format's integer range."""
    epoch = max(lease_epoch, chain_epoch) + 1
    if epoch > MAX_SAFE_INT:
        raise StoreError(
            "branch_not_runnable",
            f"this branch has used every epoch (the next would be {epoch}, past 2^53-1): no"
            " holder can write to it any more. It can still be read, exported and verified.",
        )
    return epoch


def artifact_ref(data: bytes, media_type: str) -> ArtifactRef:
    return {"bytes": len(data), "media_type": media_type, "sha256": sha256_hex(data)}


def verified_artifact(sha256: str, data: bytes) -> bytes:
    if sha256_hex(data) != sha256:
        raise StoreError("artifact_corrupt", f"artifact {sha256} does not match its hash")
    return bytes(data)


def artifact_missing(sha256: str) -> StoreError:
    return StoreError("artifact_missing", f"artifact {sha256} is not in this store")
