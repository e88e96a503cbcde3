"""``threads export THREAD|BRANCH [--store DIR] [--tenant T] [-o FILE] [--inspect]``: the
export of a thread's root branch (or of the branch named), bytes exact (``--inspect``: the
stored bytes unchecked, to look at a corrupt branch).

Invariant: the bytes written are exactly ``export_branch``'s (no newline translation, no
encoding), to stdout unless ``-o`` names a file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from threads.cli.support import add_store_option, add_tenant_option, opened_store, tenant_branch
from threads.store.transfer import export_branch


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a thread's (or a branch's) log (JSONL + head line)",
        description="Write the resolved chain of THREAD's root branch (or of BRANCH) as JSONL"
        " plus its head line.",
    )
    parser.add_argument("thread", metavar="THREAD|BRANCH", help="a thread id, or a branch id")
    add_store_option(parser)
    add_tenant_option(parser)
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    parser.add_argument(
        "--inspect",
        action="store_true",
        help="write the stored bytes as they are, unchecked (for a branch reported log_corrupt)",
    )
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        branch = await tenant_branch(store, args.thread, args.tenant)
        data = await export_branch(store, branch.branch_id, inspect=args.inspect)
    if args.output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        await asyncio.to_thread(Path(args.output).write_bytes, data)
    return 0
