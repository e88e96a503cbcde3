"""``threads lease THREAD [--store DIR] [--tenant T]``: who holds each branch of a thread, at
which epoch, and until when (by the store's lease clock: the database's, on Postgres).

For a holder this host can judge (same boot id, hostname and pid namespace) it also says
whether that process still runs; a dead one's lease is taken over at once by the next run.
Invariant: reading only; nothing here takes or changes a lease.
"""

from __future__ import annotations

import argparse
from typing import Any

from threads.cli import render
from threads.cli.support import add_store_option, add_tenant_option, opened_store, tenant_branch
from threads.store.holder import Holder, parse, provably_gone, this_host
from threads.store.protocol import LeaseState


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "lease", help="show who holds a thread and until when",
        description="Show each branch's lease: holder (host, pid, run), epoch and expiry.",
    )
    parser.add_argument("thread", metavar="THREAD", help="the thread's id (threads ls)")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        root = await tenant_branch(store, args.thread, args.tenant)
        for branch in await store.list_branches(root.thread_id):
            origin = "root" if branch.parent_branch_id is None else "fork"
            print(f"branch {branch.branch_id} ({origin})")
            for line in lease_lines(await store.read_lease(branch.branch_id)):
                print(f"  {line}")
    return 0


def lease_lines(state: LeaseState | None) -> list[str]:
    if state is None:
        return ["never held: the next run takes it"]
    lines = [f"epoch    {state.epoch}"]
    holder = parse(state.holder_id)
    lines.append(f"holder   {holder_text(holder)}")
    if state.expires_at == 0:
        lines.append("state    released: free, the next run takes it")
    elif not state.live:
        lines.append(f"state    expired {render.when(state.expires_at, state.now)}: free")
    elif provably_gone(holder):
        lines.append(f"expires  {render.when(state.expires_at, state.now)}")
        lines.append("state    its process is gone (this host): the next run takes over at once")
    else:
        lines.append(f"expires  {render.when(state.expires_at, state.now)}")
        alive = "running" if holder.host == this_host() else "on another host: can't be checked"
        lines.append(f"state    held ({alive}); a second run gets branch_busy until it lets go")
    return lines


def holder_text(holder: Holder) -> str:
    if holder.host is None:
        return holder.describe()
    return f"{holder.describe()} (run {holder.run}, boot id {holder.host.boot_id})"
