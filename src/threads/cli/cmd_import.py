"""``threads import FILE [--store DIR] [--tenant T] [--max-bytes N]``: verify an export (or a
bundle, told apart by its bytes) and store its bytes.

Invariant: nothing is stored unless every committed line of FILE passed verification (and, for
a bundle, every artifact its log references is in the bundle or the store, each matching its
hash), and only artifacts the log references are stored; a torn FILE (an unterminated final
chunk, or no head line) is imported as its verified prefix and reported as torn, with where, in
the words ``threads verify`` uses; FILE (and what a bundle expands to) is read up to a bound
(``import_too_large``).
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from threads.cli.support import add_store_option, describe, error_line, opened_store
from threads.errors import StoreError
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
        try:
            result = await import_from_path(
                store, args.file, tenant_id=args.tenant, max_bytes=args.max_bytes
            )
        except StoreError as error:
            if error.code != "forbidden":
                raise
            print(error_line(describe(error), None), file=sys.stderr)  # it says what to do
            return 1
    verb = "imported" if result.stored else "already stored (identical, nothing written)"
    head = "head verified" if result.head_verified else "head unverified"
    print(
        f"{verb}: branch {result.branch_id} of thread {result.thread_id},"
        f" {result.events} events, {head}, status {result.status}"
    )
    if result.torn is not None:
        kept = ""
        if result.dropped_ref is not None:
            kept = (
                f"; the dropped bytes are kept as artifact {result.dropped_ref['sha256']} and"
                " recorded as log_repaired when the thread next runs"
            )
        print(f"torn: {args.file}: {result.torn}. Only the events before that were imported{kept}.")
    if result.unreferenced_members:
        print(
            f"note: the bundle holds {result.unreferenced_members} artifact(s) its log does not"
            " reference; they were not stored.",
            file=sys.stderr,
        )
    if result.missing_artifacts:
        print(
            f"warning: this store lacks {len(result.missing_artifacts)} artifact(s) the log"
            " references; the thread can be read but not continued here. Import a bundle"
            " instead: an export with --bundle from the store that holds them.",
            file=sys.stderr,
        )
    return 0
