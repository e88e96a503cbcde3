"""``threads ls [--store DIR]``: one line per thread (id, branch count, head seq, status).

Invariant: listing never stops at a damaged thread; its status reads ``error <code>``.
"""

from __future__ import annotations

import argparse
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.errors import ThreadsError
from threads.store.protocol import BranchInfo, Store


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ls", help="list the threads of a store", description="List the threads of a store."
    )
    add_store_option(parser)
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        for root in await store.list_threads():
            branches = await store.list_branches(root.thread_id)
            status = await root_status(store, root)
            print(
                f"{root.thread_id}  branches={len(branches)}  head={root.head_seq}  status={status}"
            )
    return 0


async def root_status(store: Store, root: BranchInfo) -> str:
    try:
        fold = (await store.read_chain(root.branch_id)).fold(store.clock.now_ms())
    except ThreadsError as error:
        return f"error {error.code}"
    return fold.status
