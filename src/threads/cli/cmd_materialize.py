"""``threads materialize [--store DIR]``: write request artifacts out in the reference form.

A SQLite store keeps each model request as a delta of the one before it
(``threads.store.request_deltas``); threads-ts expects every artifact as a full file at
``artifacts/sha256/<ab>/<hex>``. This writes each request kept as a delta out as that file
(the deltas stay; reads prefer the file), so a threads-ts reader can replay and verify them.
Idempotent: a request already there as a file is skipped. Invariant: every file written holds
exactly the bytes its name hashes to (they are rebuilt and checked before being written).
"""

from __future__ import annotations

import argparse
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.errors import ConfigError
from threads.store.sqlite import SQLiteStore


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "materialize", help="write request artifacts out as full files (the reference form)",
        description="Write every model request a SQLite store keeps as a delta out as a full"
        " file at artifacts/sha256/<ab>/<hex>, the form threads-ts reads.",
    )
    add_store_option(parser)
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store) as store:
        if not isinstance(store, SQLiteStore):
            raise ConfigError(
                "invalid_config",
                "only a SQLite store directory has the reference layout; Postgres keeps its"
                " artifacts in the database",
            )
        written = await store.materialize_requests()
    print(f"{written} request artifact(s) written as full files")
    return 0
