"""A fold restored from a snapshot folds on to exactly what the full fold reaches (issue 36
item 1): for every cut of every conformance log (every event type the fold knows, forks, logs a
rule refuses) and of random logs (turns, snapshots, forks, a crash anywhere mid-write), the
state, the projections, the cost and the listing are equal, or the same error is raised at the
same seq, or the restored fold says it needs the whole chain (``SnapshotShortError``). A body
it did not write is refused whole."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shared_data import CASES, needs
from threads.clock import FakeClock
from threads.errors import ThreadsError
from threads.log.fold import Fold
from threads.log.fold.saved import (
    FORMAT,
    RestoredFold,
    SnapshotShortError,
    SnapshotUnusableError,
    dump,
    restore,
)
from threads.log.lines import Event, Header
from threads.log.verify import verify_export
from threads.run.listing import listing_of
from threads.testing.sample_log import SampleLog

Item = Header | Event
Outcome = tuple[object, ...]

# Every field of the fold, as the snapshot format knows them: a field added to ``Fold`` must be
# carried by ``threads.log.fold.saved`` (then added here), or a restored fold would miss it.
FOLD_FIELDS = {
    "now_ms", "header_", "root_header", "thread_started", "tools", "last_seq", "last_hash",
    "epoch", "inspection_only", "thread_cancelled", "turn", "turns_completed", "calls",
    "call_order", "settled_calls", "effect_order", "attempts", "open_attempt", "last_attempt",
    "parks", "approvals", "thread_rules", "snapshots", "transcript", "responses",
    "model_requests", "input_tokens", "output_tokens", "unknown_responses", "events",
    "segment_headers", "features", "knowledge_revision", "snapshot_revisions", "_by_event_id",
    "_indexed", "open_calls", "response_of", "_prefix", "transcript_seqs", "side_responses",
    "loaded_tools", "compaction", "wakes", "cache",
}


def feed(fold: Fold, items: Sequence[Item]) -> None:
    for item in items:
        if isinstance(item, Header):
            fold.header(item)
        else:
            fold.apply(item)


def outcome(fold: Fold, items: Sequence[Item]) -> Outcome:
    """What folding ``items`` on reaches: the read projections, or the error and its seq."""
    try:
        feed(fold, items)
        return ("ok", fold.state(), fold.projections(), fold.cost(), listing_of(fold))
    except ThreadsError as error:
        return ("error", error.code, getattr(error, "seq", None))


def check_every_cut(items: Sequence[Item]) -> int:
    """Each cut inside the branch's own segment: restored + the rest == the full fold.
    Returns how many cuts were compared."""
    full = outcome(Fold(now_ms=0), items)
    last_header = max(i for i, item in enumerate(items) if isinstance(item, Header))
    compared = 0
    for cut in range(last_header + 1, len(items) + 1):
        base = Fold(now_ms=0)
        try:
            feed(base, items[:cut])
        except ThreadsError:
            break  # the full fold fails here too: nothing to snapshot past it
        restored = restore(dump(base), 0)
        assert restore(dump(restored), 0).state() == restored.state()  # dumps again
        try:
            assert outcome(restored, items[cut:]) == full, f"cut after item {cut}"
        except SnapshotShortError:
            continue  # the opener folds the whole chain instead
        compared += 1
    return compared


def chain_items(data: bytes) -> list[Item]:
    """The headers and events of an export in chain order (admitted and chained, not folded:
    the fold's own rules are what is compared)."""
    items: list[Item] = []
    with contextlib.suppress(ThreadsError):  # a line that does not admit or chain: those before
        verify_export(data, apply=items.append, on_header=items.append)
    return items


def test_the_format_carries_every_field_of_the_fold() -> None:
    assert {f.name for f in dataclasses.fields(Fold)} == FOLD_FIELDS
    restored_only = {"cut", "start", "first_input", "cut_time", "bytes_before"}
    assert {f.name for f in dataclasses.fields(RestoredFold)} == FOLD_FIELDS | restored_only


@needs(CASES, "the conformance cases")
def test_every_cut_of_every_conformance_log_folds_on_to_the_full_state() -> None:
    compared = 0
    logs = sorted(CASES.glob("*/log*.jsonl"))
    for path in logs:
        items = chain_items(path.read_bytes())
        if items:
            compared += check_every_cut(items)
    assert len(logs) > 100
    assert compared > 900


_STEPS = st.lists(st.sampled_from(["turn", "snapshot", "fork", "request"]), max_size=12)


def random_log(steps: list[str]) -> SampleLog:
    log = SampleLog(FakeClock())
    log.started()
    for step in steps:
        if step == "turn":
            log.turn(text="next", reply="done")
        elif step == "snapshot":
            log.snapshot()
        elif step == "fork" and log.events[-1].type == "snapshot":
            log = log.fork()
        elif step == "request":  # a turn whose write stopped after its model_request
            log.turn()
            del log.events[-2:]
    return log


@settings(max_examples=40, deadline=None)
@given(steps=_STEPS, crash=st.integers(min_value=0, max_value=3))
def test_every_cut_of_a_random_log_folds_on_to_the_full_state(steps: list[str], crash: int) -> None:
    log = random_log(steps)
    items: list[Item] = [
        item for header, events in log.segments() for item in (header, *events)
    ]
    items = items[: max(1, len(items) - crash)]  # a crash mid-write: the lines before it
    check_every_cut(items)


@pytest.mark.parametrize(
    "body",
    [
        b"", b"[]", b'{"format":4}\n{}', b'{"format":6}\n{}', b'{"format":5,"headers":[]}\n{}',
        b'{"format":5}', b"\xff",
    ],
)
def test_a_body_this_code_did_not_write_is_refused(body: bytes) -> None:
    with pytest.raises(SnapshotUnusableError):
        restore(body, 0)


def test_the_body_is_json_of_our_own_not_a_pickle() -> None:
    log = SampleLog(FakeClock())
    log.started()
    log.turn()
    fold = Fold(now_ms=0)
    feed(fold, [log.header, *log.events])
    body = dump(fold)
    assert body.startswith(b"{")
    assert b'"format":%d' % FORMAT in body
