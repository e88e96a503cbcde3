"""``threads gc [--store DIR] [--sandboxes DIR]``: release sandboxes and snapshots no branch needs.

Runs ``threads.sandbox.gc.collect`` with the local sandbox provider kept under ``--sandboxes``
(the default root of ``threads.sandbox.local()``), and prints what it did. First it gives up
forks a crash interrupted (``forking`` children whose lease lapsed become ``fork_failed``), so
the sandboxes they were restoring into are collected with the rest. Rows of providers it
has no adapter for are counted and left alone, as are ``pending`` and ``unknown`` rows.
Invariant: gc never takes a branch lease and never frees a row a run touched after its claim.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.run.fork import abandon_interrupted_forks
from threads.sandbox.gc import collect
from threads.sandbox.local import local
from threads.sandbox.protocol import Sandbox
from threads.store.capabilities import resources_of


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "gc", help="release sandboxes and snapshots no live branch needs",
        description="Release expired or orphaned sandboxes and snapshots recorded in the"
        " store's resource ledger. Pending and unknown rows are never touched.",
    )
    add_store_option(parser)
    parser.add_argument(
        "--sandboxes", metavar="DIR",
        help="where the local sandboxes live (default: threads.sandbox.local()'s)",
    )
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    sandboxes: dict[str, Sandbox] = {}
    root = Path(args.sandboxes) if args.sandboxes else None
    sandboxes["local"] = local(root)
    async with opened_store(args.store) as store:
        abandoned = await abandon_interrupted_forks(store)
        report = await collect(resources_of(store), sandboxes, store.clock)
    if abandoned:
        print(f"gave up {len(abandoned)} fork(s) a crash interrupted: {', '.join(abandoned)}")
    for line in report.lines():
        print(line)
    return 1 if report.failed else 0
