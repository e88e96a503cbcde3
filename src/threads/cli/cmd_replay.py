"""``threads replay THREAD_ID [--store DIR]``: re-render every recorded model request of the
thread from its log and compare it with what was recorded; no model is called.

Prints ``replayed N requests, all match`` (exit 0), or the first mismatch with its code and the
seq of its request (exit 1). A thread with forks is replayed branch by branch, each line
prefixed with its branch id. Invariant: reading only.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from threads.cli.support import add_store_option, hint, opened_store
from threads.log.replay import Replayed
from threads.run.replay import replay_branch


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="re-render a thread's recorded model requests and compare them",
        description="Re-render every model request THREAD_ID recorded, from its log, and check"
        " each against its recorded hash and declared prefix. No model is called.",
    )
    parser.add_argument("thread_id", metavar="THREAD_ID", help="the thread's id (threads ls)")
    add_store_option(parser)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        await store.root_branch(args.thread_id)  # not_found for an unknown thread
        branches = await store.list_branches(args.thread_id)
        failed = 0
        for branch in branches:
            prefix = f"{branch.branch_id}: " if len(branches) > 1 else ""
            replayed = await replay_branch(store, branch.branch_id)
            print(prefix + summary(replayed))
            if replayed.mismatch is not None:
                failed += 1
                print(f"hint: {hint(replayed.mismatch.code)}", file=sys.stderr)
    return 1 if failed else 0


def requests(count: int) -> str:
    return f"{count} request" if count == 1 else f"{count} requests"


def summary(replayed: Replayed) -> str:
    mismatch = replayed.mismatch
    if mismatch is None:
        return f"replayed {requests(replayed.requests)}, all match"
    return (
        f"replayed {requests(replayed.requests)}, then {mismatch.code} at seq {mismatch.seq}:"
        f" {mismatch.message}"
    )
