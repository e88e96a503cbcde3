"""``threads export BRANCH_ID [--store DIR] [-o FILE] [--inspect | --bundle]``: the branch's
export, bytes exact (``--inspect``: the stored bytes unchecked, to look at a corrupt branch;
``--bundle``: a tar carrying the export and every artifact it references, see
``threads.store.bundle``).

Invariant: the bytes written are exactly ``export_branch``'s (no newline translation, no
encoding), to stdout unless ``-o`` names a file.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path
from typing import Any

from threads.cli.support import add_store_option, opened_store, usage_error
from threads.store.transfer import export_branch, export_bundle


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export",
        help="write a branch's log (JSONL + head line)",
        description="Write BRANCH_ID's resolved chain as JSONL plus its head line.",
    )
    parser.add_argument("branch_id", metavar="BRANCH_ID")
    add_store_option(parser)
    parser.add_argument("-o", "--output", metavar="FILE", help="write here instead of stdout")
    parser.add_argument(
        "--inspect",
        action="store_true",
        help="write the stored bytes as they are, unchecked (for a branch reported log_corrupt)",
    )
    parser.add_argument(
        "--bundle",
        action="store_true",
        help="write a bundle (tar) carrying every artifact the branch references, to move it"
        " to another store",
    )
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    if args.bundle and args.inspect:
        return usage_error(args.parser, "give either --bundle or --inspect, not both")
    async with opened_store(args.store) as store:
        if args.bundle:
            data = await export_bundle(store, args.branch_id)
        else:
            data = await export_branch(store, args.branch_id, inspect=args.inspect)
    if args.output is None:
        sys.stdout.flush()
        sys.stdout.buffer.write(data)
        sys.stdout.buffer.flush()
    else:
        await asyncio.to_thread(Path(args.output).write_bytes, data)
    return 0
