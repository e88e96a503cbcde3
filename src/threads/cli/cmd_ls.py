"""``threads ls [--store DIR] [--tenant T] [--tree]``: a table of one tenant's threads, newest
first (by the time of the last event): thread id, agent, tenant, status, last update, lease. A
thread no input ever reached (``BranchInfo.empty``) is not listed; the count of those goes to
stderr. ``--tree`` lists each thread started from another (a subagent, a handoff target, a team
member: ``thread_started.parent``) indented under it, oldest first, with the relation.

Invariant: listing never stops at a damaged thread; its status reads ``error <code>``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from typing import Any

from threads.cli import render
from threads.cli.support import add_store_option, add_tenant_option, opened_store
from threads.errors import ThreadsError
from threads.run.listing import listing_of, read_listing
from threads.store.fold_open import open_fold
from threads.store.protocol import BranchInfo, Store

HEADER = ("THREAD", "AGENT", "TENANT", "STATUS", "UPDATED", "LEASE")


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ls", help="list a tenant's threads, newest first",
        description="List a tenant's threads, newest first: agent, status, last update, lease."
        " A thread no input ever reached (a crash right after creating it) is left out.",
    )
    add_store_option(parser)
    add_tenant_option(parser)
    parser.add_argument(
        "--tree", action="store_true",
        help="indent the threads an agent started (subagents, handoff targets) under it",
    )
    parser.set_defaults(handler=run)


@dataclass(frozen=True, slots=True)
class Row:
    updated_ms: int
    cells: tuple[str, ...]
    created_ms: int = 0
    parent: tuple[str, str] | None = None  # (thread id, relation)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        now = store.clock.now_ms()
        roots = await store.list_threads(args.tenant)
        rows = [await thread_row(store, root, now) for root in roots if not root.empty]
    empty = sum(1 for root in roots if root.empty)
    if empty:
        print(f"{empty} thread(s) that never got an input (a crash right after creating them)"
              " are not listed", file=sys.stderr)
    if not rows:
        print(f"no threads of tenant {args.tenant} in this store (another tenant: --tenant T)",
              file=sys.stderr)
        return 0
    rows.sort(key=lambda row: row.updated_ms, reverse=True)
    for line in render.table(HEADER, tree(rows) if args.tree else [row.cells for row in rows]):
        print(line)
    return 0


def tree(rows: list[Row]) -> list[tuple[str, ...]]:
    """The rows' cells with each thread under the thread it was started from (children oldest
    first, their id indented and followed by the relation); a thread whose parent is not listed
    stays at the top level, in the rows' order."""
    listed = {row.cells[0] for row in rows}
    children: dict[str, list[Row]] = {}
    for row in rows:
        if row.parent is not None and row.parent[0] in listed:
            children.setdefault(row.parent[0], []).append(row)
    out: list[tuple[str, ...]] = []

    def add(row: Row, depth: int) -> None:
        thread = row.cells[0]
        if depth:
            assert row.parent is not None
            thread = f"{'  ' * (depth - 1)}└ {thread} ({row.parent[1]})"
        out.append((thread, *row.cells[1:]))
        for child in sorted(children.get(row.cells[0], []), key=lambda r: r.created_ms):
            add(child, depth + 1)

    for row in rows:
        if row.parent is None or row.parent[0] not in listed:
            add(row, 0)
    return out


async def thread_row(store: Store, root: BranchInfo, now: int) -> Row:
    agent, status, updated, created = "?", "", 0, 0
    parent: tuple[str, str] | None = None
    listing = await read_listing(store, root.branch_id)  # at the head: one small row
    try:
        if listing is None:  # mid-turn: its fold snapshot and the lines after it
            listing = listing_of(await open_fold(store, root.branch_id, now))
        agent, status, updated = listing.agent or "?", listing.status, listing.updated_at
        created, parent = listing.created_at, listing.parent
    except ThreadsError as error:
        status = f"error {error.code}"
    lease = render.lease(await store.read_lease(root.branch_id))
    when = render.when(updated, now) if updated else "-"
    return Row(updated, (root.thread_id, agent, root.tenant_id, status, when, lease), created,
               parent)

