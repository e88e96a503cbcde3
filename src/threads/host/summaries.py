"""What the thread list and the inbox show of each thread (status, agent, times, first message,
cost, who started it and what it waits on a person for), kept per root branch by the head it
was folded at, so a listing folds again only the threads whose head moved.

Before, ``GET /v1/threads`` read and folded the whole log of every thread it listed on every
call: 50 threads of 1,000 events cost ~460 ms a listing, and it grows with the store.

Invariant: an entry answers only for the exact head (seq and hash) its fold ended at. A chain
ending at that hash holds exactly the events it held then (the hash chain), and everything kept
is a function of those events and of this host's agents (fixed for the process), never of the
clock: an approval's expiry is kept as a time and compared by the reader, a park's words are
made from its facts when asked (``threads.run.park_info.explain``). A thread that could not be
read is not kept: the next listing tries it again. What a kept thread's rows hold is checked
again whenever it is opened (the timeline, a run); the listing alone does not re-read bytes
that did not move.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass

from threads.log.fold import Fold
from threads.log.fold.saved import RestoredFold
from threads.principal import Principal
from threads.run import (
    Agent,
    Listing,
    ThreadCost,
    Waiting,
    gone_holders,
    listing_of,
    read_listing,
    waiting_on,
)
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Store
from threads.tools.tool import Tool

ENTRIES = 16_384  # threads remembered; a listing of more folds the ones it dropped again
NOTHING = Waiting((), (), ())  # what a thread at rest with no park waits on


@dataclass(frozen=True, slots=True)
class Summary:
    status: str
    agent: str | None
    created_at: int
    updated_at: int  # the time of the last event (the header's when there is none)
    first_input: str | None  # the first user message, cut at FIRST_INPUT_CHARS
    cost: ThreadCost | None  # None: no currency, or a sum past what the format carries
    starter: Principal | None  # who may decide when the agent names no approvers
    waiting: Waiting
    parent: tuple[str, str] | None = None  # (thread id, relation) it was started from


@dataclass(frozen=True, slots=True)
class Listed:
    """One of a tenant's threads: its root branch and its summary (None: unreadable)."""

    root: BranchInfo
    summary: Summary | None


class Summaries:
    """The summary of each recently listed root branch, by the head it was read at."""

    def __init__(
        self, agents: Mapping[str, Agent] | None = None, entries: int = ENTRIES
    ) -> None:
        self._agents: Mapping[str, Agent] = agents or {}
        self._items: OrderedDict[str, tuple[int, str, Summary]] = OrderedDict()
        self._entries = entries

    async def of(self, store: Store, root: BranchInfo) -> Summary:
        """``root``'s summary at the head the listing found it at (read and folded only when
        that is not the head its kept summary was made at). Raises what the read raises."""
        kept = self._items.get(root.branch_id)
        if kept is not None and kept[:2] == (root.head_seq, root.head_hash):
            self._items.move_to_end(root.branch_id)
            return kept[2]
        listing = await read_listing(store, root.branch_id)
        if listing is not None and not listing.waits_on_a_person:
            summary, head = self._from_listing(listing, NOTHING), listing.head
        else:
            now = store.clock.now_ms()
            fold: Fold | None = None
            if listing is None:  # none at the head (mid-turn): the snapshot and lines after it
                fold = await open_fold(store, root.branch_id, now)
                if isinstance(fold, RestoredFold) and listing_of(fold).waits_on_a_person:
                    fold = None
            if fold is None:  # what it waits on is read from the parks' own events: the log
                fold = (await store.read_chain(root.branch_id)).fold(now)
            gone = await gone_holders(store, root.branch_id)
            summary = self.summarize(fold, gone)
            head = (fold.last_seq, fold.last_hash)
        # keyed by the head the read itself ended at: it may be newer than the listing's
        self._items[root.branch_id] = (*head, summary)
        self._items.move_to_end(root.branch_id)
        if len(self._items) > self._entries:
            self._items.popitem(last=False)
        return summary

    async def listed(self, store: Store, tenant_id: str) -> list[Listed]:
        """Every thread of the tenant with its summary: one query for the roots and their
        heads, and a fold only for each thread whose head moved since it was last summarized."""
        out = []
        for root in await store.list_threads(tenant_id):
            if root.empty:
                continue  # no input ever reached it: nothing for a person to look at
            try:
                summary: Summary | None = await self.of(store, root)
            except Exception:  # one unreadable thread must not hide the others
                summary = None
            out.append(Listed(root, summary))
        return out

    @staticmethod
    def _from_listing(listing: Listing, waits: Waiting) -> Summary:
        """The summary from a listing (stored, or made from a fold just now); ``waits``: what
        the thread waits on a person for (a stored listing is used only when nothing)."""
        return Summary(
            status=listing.status,
            agent=listing.agent,
            created_at=listing.created_at,
            updated_at=listing.updated_at,
            first_input=listing.first_input,
            cost=listing.cost,
            starter=listing.starter,
            waiting=waits,
            parent=listing.parent,
        )

    def summarize(self, fold: Fold, gone: frozenset[int] = frozenset()) -> Summary:
        """``gone``: the epochs whose holders are proven dead (what a park's words say)."""
        listing = listing_of(fold)
        served = self._agents.get(listing.agent) if listing.agent is not None else None

        def tool_named(tool: str) -> Tool | None:
            return served.tool_named(tool) if served is not None else None

        return self._from_listing(listing, waiting_on(fold, tool_named, gone))
