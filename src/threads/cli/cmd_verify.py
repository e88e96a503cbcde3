"""``threads verify FILE`` (an export or a bundle) and ``threads verify --store DIR [--thread
ID]``: every stored branch re-admitted line by line (canonical form, schema, chain, semantic
rules, head), each row's derived columns (seq, event_id, type, type_version, critical, epoch)
compared with its line, the branch row's thread id with its header, every artifact the branch
references read back (present, matching its hash), every permission decision audited against the
thread's pinned policy (``threads.run.decision_audit``), then replayed: every recorded model
request re-rendered and compared with what was recorded.

A plain export carries no artifacts, so ``verify FILE`` replays the requests it can and says
where it stopped when a request needs an artifact. A torn FILE (an unterminated final chunk,
or no head line) is reported as torn, with where, and exits 1 even though its prefix verifies.
Invariant: "ok" (exit 0) is printed only for a complete log that passed every check the
importer applies and whose replay found no mismatch, and for a stored branch only when it
could also be exported as a bundle and continued elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path
from typing import Any

from threads.cli.cmd_replay import requests
from threads.cli.support import add_store_option, describe, opened_store, report, usage_error
from threads.errors import LogError, StoreError, ThreadsError
from threads.log.fold import Fold
from threads.log.lines import Event
from threads.log.refs import first_reference, referenced_artifacts
from threads.log.replay import Replayed, missing_before, replay
from threads.log.verify import verify_export, verify_lines
from threads.run.decision_audit import audited
from threads.run.replay import replay_branch
from threads.store.bundle import is_bundle, read_bundle
from threads.store.protocol import BranchInfo, Store
from threads.store.rows import derived_mismatch
from threads.store.transfer import MAX_IMPORT_BYTES, read_bounded


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
    data = await asyncio.to_thread(read_bounded, path, MAX_IMPORT_BYTES)
    carried: dict[str, bytes] | None = None
    if is_bundle(data):  # each artifact checked against its hash, the whole bounded
        data, carried = read_bundle(data, max_bytes=MAX_IMPORT_BYTES)
    fold = Fold()
    try:
        verified = verify_export(data, apply=audited(fold), on_header=fold.header)
    except LogError as failure:
        if carried is None:
            raise
        lacking = set(referenced_artifacts(fold.events)) - set(carried)
        raise missing_before(fold.events, lacking, failure) from None
    if not verified.segments:
        raise LogError("invalid_line", "the file holds no complete line", seq=0)
    replayed = replay(verified.events, carried or {})
    mismatch = replayed.mismatch
    failures: list[ThreadsError] = []
    if mismatch is not None and mismatch.code != "artifact_missing":
        failures.append(LogError(mismatch.code, mismatch.message, seq=mismatch.seq))
    if carried is not None:
        failures += _lacking(verified.events, carried)
    if failures:
        raise first_by_seq(failures)
    extra = "" if carried is None else f", {_carried_summary(verified.events, carried)}"
    torn = verified.torn_where()
    if torn is not None:
        print(
            f"torn: {path}: {torn}. The {len(verified.events)} events before that verify"
            f"{extra}, {replay_summary(replayed)}. `threads import` would store those events"
            " with the head unverified (and keep any dropped bytes, recorded as log_repaired"
            " when the thread next runs); export the branch again for a complete file."
        )
        return 1
    print(f"ok: {len(verified.events)} events{extra}, head verified, {replay_summary(replayed)}")
    return 0


def first_by_seq(failures: list[ThreadsError]) -> ThreadsError:
    """The failure a verifier reports: the one at the lowest seq (one without a seq last)."""
    return min(failures, key=lambda f: (f.seq is None, f.seq or 0))


def _lacking(events: list[Event], carried: dict[str, bytes]) -> list[ThreadsError]:
    """``artifact_missing`` at the first event referencing an artifact the bundle lacks."""
    refs = referenced_artifacts(events)
    missing = [sha for sha in refs if sha not in carried]
    first = first_reference(events, missing)
    if first is None:
        return []
    return [StoreError(
        "artifact_missing",
        f"the bundle lacks {len(missing)} referenced artifact(s): {', '.join(missing)}",
        seq=first[0].seq,
    )]


def _carried_summary(events: list[Event], carried: dict[str, bytes]) -> str:
    """How many artifacts a bundle carries (every one its log references, checked before)."""
    refs = referenced_artifacts(events)
    stray = len(set(carried) - set(refs))
    unreferenced = f" (and {stray} its log does not reference: an import stores none)"
    return f"{len(refs)} artifacts" + (unreferenced if stray else "")


def replay_summary(replayed: Replayed) -> str:
    if replayed.mismatch is None:
        return f"{requests(replayed.requests)} replayed"
    return (
        f"{requests(replayed.requests)} replayed, the rest not (seq {replayed.mismatch.seq} needs"
        " an artifact an export does not carry; import it and replay it there)"
    )


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
        checker = verify_lines(lines, apply=audited(fold), on_header=fold.header)
        if checker.last_hash != branch.head_hash:
            raise LogError(
                "head_mismatch", "the stored head does not name the last stored line",
                seq=branch.head_seq,
            )
        await _check_rows(store, branch, chain.segments[-1].header.thread_id)
        artifacts, failures = await _check_artifacts(store, chain.events)
        replayed = await replay_branch(store, branch.branch_id)
        if replayed.mismatch is not None:
            mismatch = replayed.mismatch
            failures.append(LogError(mismatch.code, mismatch.message, seq=mismatch.seq))
        if failures:
            raise first_by_seq(failures)
    except ThreadsError as error:
        print(f"{branch.branch_id}: FAILED {describe(error)}")
        report(error)
        return False
    head = "verified" if branch.head_verified else "unverified (imported with a torn tail)"
    print(
        f"{branch.branch_id}: ok: {len(chain.events)} events, {artifacts} artifacts, head seq"
        f" {branch.head_seq} {head}, {requests(replayed.requests)} replayed"
    )
    return True


async def _check_rows(store: Store, branch: BranchInfo, header_thread_id: str) -> None:
    """The columns a store derives from each line (and reads: the next epoch comes from the
    epoch column) must say what the line says."""
    if branch.thread_id != header_thread_id:
        raise StoreError(
            "log_corrupt",
            f"the branch row names thread {branch.thread_id}, its header {header_thread_id}",
            seq=0,
        )
    for row in await store.stored_rows(branch.branch_id):
        wrong = derived_mismatch(branch.branch_id, row)
        if wrong is not None:
            raise StoreError(
                "log_corrupt",
                f"the stored row's columns disagree with its line ({wrong}); the database was"
                " edited behind threads' back",
                seq=row.seq,
            )


async def _check_artifacts(
    store: Store, events: list[Event]
) -> tuple[int, list[ThreadsError]]:
    """Every referenced artifact is stored and matches its hash: how many there are, and the
    failure of the first one that isn't (``artifact_missing`` / ``artifact_corrupt`` at the
    seq of the first event referencing it)."""
    refs = referenced_artifacts(events)
    for sha256 in refs:
        try:
            await store.get_artifact(sha256)
        except StoreError as exc:
            if exc.code not in ("artifact_missing", "artifact_corrupt"):
                raise
            first = first_reference(events, (sha256,))
            seq = first[0].seq if first is not None else None
            return len(refs), [StoreError(exc.code, exc.message, seq=seq)]
    return len(refs), []
