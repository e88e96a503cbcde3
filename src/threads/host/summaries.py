"""What the thread list shows of each thread (its status and agent), kept per root branch by the
head it was folded at, so a listing folds again only the threads whose head moved.

Before, ``GET /v1/threads`` read and folded the whole log of every thread it listed on every
call: 50 threads of 1,000 events cost ~460 ms a listing, and it grows with the store.

Invariant: an entry answers only for the exact head (seq and hash) its fold ended at. A chain
ending at that hash holds exactly the events it held then (the hash chain), and the status
and the agent's name are functions of those events alone (not of the clock), so the answer is
the fold's. A thread that could not be read is not kept: the next listing tries it again. What
a kept thread's rows hold is checked again whenever it is opened (the timeline, a run); the
listing alone does not re-read bytes that did not move.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from threads.store.protocol import BranchInfo, Store

ENTRIES = 4096  # threads remembered; the list shows at most LIST_LIMIT of a tenant's


@dataclass(frozen=True, slots=True)
class Summary:
    status: str
    agent: str | None


class Summaries:
    """The summary of each recently listed root branch, by the head it was read at."""

    def __init__(self, entries: int = ENTRIES) -> None:
        self._items: OrderedDict[str, tuple[int, str, Summary]] = OrderedDict()
        self._entries = entries

    async def of(self, store: Store, root: BranchInfo) -> Summary:
        """``root``'s summary at the head the listing found it at (read and folded only when
        that is not the head its kept summary was made at). Raises what the read raises."""
        kept = self._items.get(root.branch_id)
        if kept is not None and kept[:2] == (root.head_seq, root.head_hash):
            self._items.move_to_end(root.branch_id)
            return kept[2]
        chain = await store.read_chain(root.branch_id)
        fold = chain.fold(store.clock.now_ms())
        agent = (fold.thread_started or {}).get("agent_name")
        summary = Summary(fold.status, None if agent is None else str(agent))
        # keyed by the head the read itself ended at: it may be newer than the listing's
        self._items[root.branch_id] = (chain.branch.head_seq, chain.branch.head_hash, summary)
        self._items.move_to_end(root.branch_id)
        if len(self._items) > self._entries:
            self._items.popitem(last=False)
        return summary
