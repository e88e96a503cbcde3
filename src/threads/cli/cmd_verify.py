"""``threads verify FILE`` (an export) and ``threads verify --store DIR [--thread ID]`` (every
stored branch re-admitted line by line: canonical form, schema, chain, semantic rules, head),
then replayed: every recorded model request re-rendered and compared with what was recorded.

An export carries no artifacts, so ``verify FILE`` replays the requests it can and says where
it stopped when a request needs an artifact. Invariant: "ok" is printed only for a log that
passed every check the importer applies and whose replay found no mismatch.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from threads.cli.cmd_replay import requests
from threads.cli.support import add_store_option, describe, opened_store, report, usage_error
from threads.errors import LogError, ThreadsError
from threads.log.reduce import Fold
from threads.log.replay import Replayed, replay
from threads.log.verify import VerifiedExport, verify_export, verify_lines
from threads.run.replay import replay_branch
from threads.store.protocol import BranchInfo, Store


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "verify", help="verify an export file, or every branch of a store",
        description="Verify an export FILE, or with --store the branches a store holds.",
    )
    parser.add_argument("file", nargs="?", metavar="FILE", help="an export (JSONL) to verify")
    add_store_option(parser)
    parser.add_argument("--thread", metavar="ID", help="with --store: only this thread")
    parser.set_defaults(handler=run, parser=parser)


async def run(args: argparse.Namespace) -> int:
    if args.file is not None and (args.store is not None or args.thread is not None):
        return usage_error(args.parser, "give either FILE or --store, not both")
    if args.file is not None:
        return await verify_file(Path(args.file))
    return await verify_store(args.store, args.thread)


async def verify_file(path: Path) -> int:
    data = await asyncio.to_thread(path.read_bytes)
    fold = Fold()
    verified = verify_export(data, apply=fold.apply, on_header=fold.header)
    if not verified.segments:
        raise LogError("invalid_line", "the file holds no complete line", seq=0)
    replayed = replay(verified.events, {})
    mismatch = replayed.mismatch
    if mismatch is not None and mismatch.code != "artifact_missing":
        raise LogError(mismatch.code, mismatch.message, seq=mismatch.seq)
    summary = f"{head_summary(verified)}, {replay_summary(replayed)}"
    print(f"ok: {len(verified.events)} events, {summary}")
    return 0


def replay_summary(replayed: Replayed) -> str:
    if replayed.mismatch is None:
        return f"{requests(replayed.requests)} replayed"
    return (
        f"{requests(replayed.requests)} replayed, the rest not (seq {replayed.mismatch.seq} needs"
        " an artifact an export does not carry; import it and run `threads replay`)"
    )


def head_summary(verified: VerifiedExport) -> str:
    if verified.head_verified:
        return "head verified"
    if verified.torn is not None:
        return (
            f"head unverified (torn tail of {len(verified.torn.data)} bytes at offset"
            f" {verified.torn.at_offset})"
        )
    return "head unverified (no head line)"


async def verify_store(spec: str | None, thread_id: str | None) -> int:
    failed = 0
    async with opened_store(spec) as store:
        if thread_id is not None:
            await store.root_branch(thread_id)  # not_found for an unknown thread
            thread_ids = [thread_id]
        else:
            thread_ids = [root.thread_id for root in await store.list_threads()]
        for thread in thread_ids:
            for branch in await store.list_branches(thread):
                failed += not await verify_branch(store, branch)
    return 1 if failed else 0


async def verify_branch(store: Store, branch: BranchInfo) -> bool:
    """Re-admit every line of the branch's resolved chain; print one result line."""
    try:
        chain = await store.read_chain(branch.branch_id)
        lines = [
            line for segment in chain.segments
            for line in (segment.header.line, *(event.line for event in segment.events))
        ]
        fold = Fold()
        checker = verify_lines(lines, apply=fold.apply, on_header=fold.header)
        if checker.last_hash != branch.head_hash:
            raise LogError(
                "head_mismatch", "the stored head does not name the last stored line",
                seq=branch.head_seq,
            )
        replayed = await replay_branch(store, branch.branch_id)
        if replayed.mismatch is not None:
            mismatch = replayed.mismatch
            raise LogError(mismatch.code, mismatch.message, seq=mismatch.seq)
    except ThreadsError as error:
        print(f"{branch.branch_id}: FAILED {describe(error)}")
        report(error)
        return False
    head = "verified" if branch.head_verified else "unverified (imported with a torn tail)"
    print(
        f"{branch.branch_id}: ok: {len(chain.events)} events, head seq {branch.head_seq} {head},"
        f" {requests(replayed.requests)} replayed"
    )
    return True
