"""What a listing shows of a thread without its transcript (``Listing``: status, what is
pending, who started it, when it last moved, what it cost), kept in the store beside the fold
snapshot at the head it was made at, so listing a thread at rest reads one small row whatever
its length.

A writer puts the row with every append that leaves the branch not ``in_turn``, and an import
with the branch it stores (``listing_row``); ``read_listing`` answers only for the head the
branch is at now, else None and the caller folds the log as before.
Invariant: a ``Listing`` is a function of the lines through its head and of the fold code that
made it (``threads.log.fold.saved.fold_code``): a row of another head, format or fold code,
or whose bytes changed, is never used.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from threads.errors import ThreadsError
from threads.log.canonical import fast_loads
from threads.log.fold import Fold, ThreadStatus
from threads.log.fold.saved import first_user_input, fold_code, last_time
from threads.log.vocabulary import data_of
from threads.principal import Principal
from threads.run.authority import starter
from threads.run.views import ThreadCost, cost_of
from threads.store.protocol import Store
from threads.store.snapshot_row import StoredSnapshot

FORMAT = 2  # 2: with ``parent``
FIRST_INPUT_CHARS = 280
AT_REST: tuple[ThreadStatus, ...] = ("idle", "parked", "cancelled", "inspection_only")


@dataclass(frozen=True, slots=True)
class Listing:
    head: tuple[int, str]  # the seq and hash it was made at
    status: ThreadStatus
    agent: str | None
    created_at: int
    updated_at: int  # the time of the last event (the header's when there is none)
    first_input: str | None  # the first user message, cut at FIRST_INPUT_CHARS
    cost: ThreadCost | None  # None: no currency, or a sum past what the format carries
    starter: Principal | None
    turns_completed: int
    pending_calls: tuple[str, ...]
    parked: tuple[tuple[str, str], ...]  # (kind, id) of each park
    open_approvals: int  # approval challenges still open
    parent: tuple[str, str] | None = None  # (thread id, relation) of thread_started.parent

    @property
    def waits_on_a_person(self) -> bool:
        return bool(self.parked or self.open_approvals)


def listing_of(fold: Fold) -> Listing:
    """The listing of a folded branch (whole, or opened from its fold snapshot)."""
    header = fold.root_header or fold.header_
    created = header.created_at if header is not None else 0
    name = None if fold.thread_started is None else fold.thread_started.get("agent_name")
    updated = last_time(fold)
    return Listing(
        head=(fold.last_seq, fold.last_hash),
        status=fold.status,
        agent=None if name is None else str(name),
        created_at=created,
        updated_at=created if updated is None else updated,
        first_input=first_input(fold),
        cost=listed_cost(fold),
        starter=starter(fold),
        turns_completed=fold.turns_completed,
        pending_calls=tuple(call.call_id for call in fold.pending_calls()),
        parked=tuple(fold.parks),
        open_approvals=sum(
            1 for challenge_id, call in fold.approvals.items()
            if call.approval is not None and call.approval.challenge_id == challenge_id
            and call.approval.state == "open" and call.result is None
        ),
        parent=parent_of(fold),
    )


def parent_of(fold: Fold) -> tuple[str, str] | None:
    """The thread this one was started from and how (``subagent``, ``handoff``,
    ``team_member``), from ``thread_started.parent``; None for a thread a person started."""
    parent = None if fold.thread_started is None else fold.thread_started.get("parent")
    if not isinstance(parent, dict):
        return None
    return str(parent["thread_id"]), str(parent["relation"])


def listed_cost(fold: Fold) -> ThreadCost | None:
    """The cost a listing shows: None without a currency, and None for a sum past 2^53-1 (a
    listing shows the other threads rather than fail on one)."""
    try:
        return cost_of(fold)
    except ThreadsError as exc:
        if exc.code != "cost_overflow":
            raise
        return None


def first_input(fold: Fold) -> str | None:
    """The text of the branch's first ``user_input`` (its text parts joined), cut short."""
    event = first_user_input(fold)
    if event is None:
        return None
    said = data_of(event, "user_input")
    text = said.get("text")
    if not isinstance(text, str):
        parts = said.get("content") or []
        text = "\n".join(
            str(p.get("text", "")) for p in parts if isinstance(p, dict) and p.get("type") == "text"
        )
    return text if len(text) <= FIRST_INPUT_CHARS else text[: FIRST_INPUT_CHARS - 1] + "…"


def listing_row(fold: Fold) -> StoredSnapshot:
    """The ``summary`` row of ``fold``'s branch at its head."""
    header = fold.header_
    assert header is not None  # a fold a writer or an import holds has read its header
    listing = listing_of(fold)
    body: dict[str, Any] = asdict(listing)
    del body["head"]  # the row's own columns
    body["starter"] = None if listing.starter is None else listing.starter.to_wire()
    encoded = json.dumps(body, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return StoredSnapshot.of(
        header.branch_id, "summary", (fold.last_seq, fold.last_hash), format=FORMAT,
        fold_code=fold_code(), body=encoded.encode(),
    )


async def read_listing(store: Store, branch_id: str) -> Listing | None:
    """The branch's listing when the stored one is intact and made at its head now (None:
    fold the log instead; so is a store without the table, or a branch read failing)."""
    try:
        branch, stored = await store.read_summary(branch_id)
    except ThreadsError:
        return None
    if stored is None or (stored.seq, stored.head_hash) != (branch.head_seq, branch.head_hash):
        return None
    if stored.format != FORMAT or stored.fold_code != fold_code() or not stored.intact:
        return None
    try:
        return _decoded(stored.body, (stored.seq, stored.head_hash))
    except (ValueError, KeyError, TypeError, ThreadsError):
        return None


def _decoded(body: bytes, head: tuple[int, str]) -> Listing:
    value = fast_loads(body)
    wire = value["starter"]
    return Listing(
        head=head,
        status=value["status"],
        agent=value["agent"],
        created_at=value["created_at"],
        updated_at=value["updated_at"],
        first_input=value["first_input"],
        cost=None if value["cost"] is None else ThreadCost(**value["cost"]),
        starter=None if wire is None else Principal.from_wire(wire),
        turns_completed=value["turns_completed"],
        pending_calls=tuple(value["pending_calls"]),
        parked=tuple((kind, ident) for kind, ident in value["parked"]),
        open_approvals=value["open_approvals"],
        parent=None if value["parent"] is None else (value["parent"][0], value["parent"][1]),
    )
