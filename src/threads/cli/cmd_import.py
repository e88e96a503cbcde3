"""``threads import FILE [--store DIR] [--tenant T] [--max-bytes N]``: verify an export (or a
bundle, told apart by its bytes) and store its bytes.

Invariant: nothing is stored unless every committed line of FILE passed verification (and, for
a bundle, every artifact its log references is in the bundle or the store, each matching its
hash); a torn tail is reported and kept as an artifact, never stored as a line; FILE is read up
to a bound (``import_too_large``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from threads.cli.support import add_store_option, opened_store
from threads.store.transfer import MAX_IMPORT_BYTES, import_from_path

DEFAULT_TENANT = "local"


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "import", help="verify an export file and store it",
        description="Verify FILE (an export) completely, then store it (creates the store).",
    )
    parser.add_argument("file", metavar="FILE", help="an export (JSONL) or a bundle (tar)")
    add_store_option(parser)
    parser.add_argument(
        "--tenant", default=DEFAULT_TENANT, help=f"owning tenant (default {DEFAULT_TENANT})"
    )
    parser.add_argument(
        "--max-bytes", type=int, default=MAX_IMPORT_BYTES, metavar="N",
        help=f"refuse a FILE larger than N bytes (default {MAX_IMPORT_BYTES})",
    )
    parser.set_defaults(handler=run)


async def run(args: argparse.Namespace) -> int:
    async with opened_store(args.store, create=True) as store:
        result = await import_from_path(
            store, args.file, tenant_id=args.tenant, max_bytes=args.max_bytes
        )
    verb = "imported" if result.stored else "already stored (identical, nothing written)"
    head = "head verified" if result.head_verified else "head unverified"
    if result.torn_at_offset is not None and result.dropped_ref is not None:
        head += (
            f" (torn tail of {result.dropped_ref['bytes']} bytes at offset"
            f" {result.torn_at_offset} kept as artifact {result.dropped_ref['sha256']})"
        )
    print(
        f"{verb}: branch {result.branch_id} of thread {result.thread_id},"
        f" {result.events} events, {head}, status {result.status}"
    )
    if result.missing_artifacts:
        print(
            f"warning: this store lacks {len(result.missing_artifacts)} artifact(s) the log"
            " references; the thread can be read but not continued here. Import a bundle"
            " instead: an export with --bundle from the store that holds them.",
            file=sys.stderr,
        )
    return 0
