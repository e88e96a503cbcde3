"""Opening a branch's state from its fold snapshot: the newest ``fold`` row, checked, and the
lines after it, chained from the row's head hash to the branch's head, folded on top.

``open_fold`` is what reading a thread's state costs once its log is long: the snapshot's body
and the tail are decoded, not every line. Anything that does not hold exactly (no row, its
sha256, format or fold code, a head the body does not end at, a tail that does not chain from
it to the head, a line after it that needs an event the snapshot dropped) is not an error here:
the row is ignored and the whole chain is read and folded, which raises what a broken log
raises. ``fold_row`` is what a writer (or an import) puts with an append, when
``SnapshotSchedule`` (``row_at_head_pays``) says so; a writer's row also carries the request
checkpoint of the last turn request its run rendered, or of the one it opened with
(``threads.log.render_resume``), after the fold's two lines.

A continuing run reads that checkpoint one of two ways. ``open_window`` opens its fold from the
row as ``open_fold`` does, and also reads the lines from the checkpoint's request up to the
row's cut (and counts the bytes of those before it after the last multiple of
``SNAPSHOT_EVERY``, which the writer's ``SnapshotSchedule`` counts: so its rows fall where a
whole chain's writer puts them), which must chain into the row's head hash, so that its ``events``
(``RestoredFold.start``) hold that request and every line after it, and the next request is
rendered on from the checkpoint (``threads.run.run_open`` decides when a run may use it).
``open_checkpoint`` is for a run holding the whole chain folded.

A damaged line before the snapshot (before the checkpoint's request, for a run) is therefore not
noticed by an open: ``verify`` and ``export`` (and every run that folds the whole chain) still
read and check every line.
Invariant: the fold ``open_fold`` and ``open_window`` return has the ``state()``, ``cost()`` and
``projections()`` of the full fold of the branch's chain; only its ``events`` start later, at
``start``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from threads.errors import ThreadsError
from threads.log.collector import collector_paused
from threads.log.fold import Fold
from threads.log.fold.saved import (
    FORMAT,
    RestoredFold,
    SnapshotShortError,
    SnapshotUnusableError,
    dump,
    fold_code,
    restore,
)
from threads.log.lines import Event
from threads.log.render_resume import (
    CheckpointUnusableError,
    RequestCheckpoint,
    Resumed,
    resume,
)
from threads.store.protocol import BranchInfo, Store, TailRead
from threads.store.rows import build_segment
from threads.store.snapshot_row import StoredSnapshot

# A fold snapshot is written with the append that reaches a multiple of this many events, so
# an open folds fewer lines than this past it (see ``bench/open_state.py`` for the choice) ...
SNAPSHOT_EVERY = 512
# ... or sooner, once the lines since the last one reach this many bytes (long tool results):
# an open then reads about this much past it at most.
SNAPSHOT_BYTES = 1 << 20


def snapshot_due(first_seq: int, last_seq: int) -> bool:
    """Whether a batch of events ``first_seq``..``last_seq`` reaches a multiple of
    ``SNAPSHOT_EVERY``."""
    return (first_seq - 1) // SNAPSHOT_EVERY != last_seq // SNAPSHOT_EVERY


@dataclass(slots=True)
class SnapshotSchedule:
    """Which of a writer's appends put a fold row: one reaching a multiple of
    ``SNAPSHOT_EVERY``, or one that brings the bytes of the lines since the last row
    (``unsaved``, newline included) to ``SNAPSHOT_BYTES``."""

    unsaved: int

    @classmethod
    def of(cls, fold: Fold) -> SnapshotSchedule:
        """Counting the lines of ``fold`` after the last multiple of ``SNAPSHOT_EVERY``: the
        last row is at or after it (the append that reached it put one), so this counts no
        fewer bytes than there are past the row, and a row is never later than due."""
        boundary = fold.last_seq // SNAPSHOT_EVERY * SNAPSHOT_EVERY
        unsaved = 0
        for event in reversed(fold.events):
            if event.seq <= boundary:
                break
            unsaved += len(event.line) + 1
        else:  # a window (``open_window``) counted the lines before its events
            if isinstance(fold, RestoredFold):
                unsaved += fold.bytes_before
        return cls(unsaved)

    def due(self, batch: Sequence[Event]) -> bool:
        """Whether the append of ``batch`` (non-empty) puts a row; counts it as put if so."""
        self.unsaved += sum(len(event.line) + 1 for event in batch)
        if snapshot_due(batch[0].seq, batch[-1].seq) or self.unsaved >= SNAPSHOT_BYTES:
            self.unsaved = 0
            return True
        return False


def row_at_head_pays(fold: Fold) -> bool:
    """Whether a chain folded whole (an import) is long enough, in events or bytes, for its
    open to start from a row at its head."""
    return fold.last_seq >= SNAPSHOT_EVERY or SnapshotSchedule.of(fold).unsaved >= SNAPSHOT_BYTES


def fold_row(fold: Fold, checkpoint: RequestCheckpoint | None = None) -> StoredSnapshot:
    """The ``fold`` row of ``fold``'s branch at its head, with the request ``checkpoint`` (a
    turn request of that chain a run rendered) after the fold's two lines when there is one."""
    header = fold.header_
    assert header is not None  # a fold a writer or an import holds has read its header
    with collector_paused():  # a burst of containers, as a read's: none forms a cycle
        body = dump(fold)
    if checkpoint is not None:
        body += b"\n" + checkpoint.encode()
    return StoredSnapshot.of(
        header.branch_id, "fold", (fold.last_seq, fold.last_hash), format=FORMAT,
        fold_code=fold_code(), body=body,
    )


def _parts(body: bytes) -> tuple[bytes, bytes | None]:
    """A row's body as the fold's two lines and the request checkpoint after them (if any)."""
    first = body.find(b"\n")
    second = -1 if first < 0 else body.find(b"\n", first + 1)
    if second < 0:
        return body, None
    return body[:second], body[second + 1 :]


async def open_checkpoint(store: Store, branch_id: str, fold: Fold) -> Resumed | None:
    """A renderer of the next request going on from the request checkpoint in the branch's
    fold row, for a run holding ``fold``, the whole chain folded (None: no row, no checkpoint
    in it, or one that does not hold: the run renders every line)."""
    started = fold.thread_started
    if started is None or isinstance(fold, RestoredFold):
        return None
    try:
        stored = await store.read_fold_row(branch_id)
    except ThreadsError:
        return None  # a read-only copy that lacks the table, say: render every line
    checkpoint = None if stored is None else _checkpoint_in(stored)
    if checkpoint is None:
        return None
    with collector_paused():
        return resume(checkpoint, started, fold.events)


def _checkpoint_in(stored: StoredSnapshot) -> RequestCheckpoint | None:
    """The request checkpoint of a fold row this code wrote, intact (None: another code's or
    a damaged row, one without a checkpoint, or one that does not decode)."""
    if not _usable(stored):
        return None
    raw = _parts(stored.body)[1]
    if raw is None:
        return None
    try:
        return RequestCheckpoint.decode(raw)
    except CheckpointUnusableError:
        return None


def _usable(stored: StoredSnapshot) -> bool:
    """Whether a row is one this code wrote, with the bytes it wrote."""
    return stored.format == FORMAT and stored.fold_code == fold_code() and stored.intact


async def open_fold(store: Store, branch_id: str, now_ms: int) -> Fold:
    """The branch's state: from its fold snapshot and the lines after it when they hold,
    else from its whole chain (see the module docstring)."""
    try:
        read = await store.read_tail(branch_id)
    except ThreadsError:
        read = None  # a read-only copy that lacks the table, say: the log answers
    fold = None if read is None else from_snapshot(read, now_ms)
    if fold is None:
        fold = (await store.read_chain(branch_id)).fold(now_ms)
    return fold


def from_snapshot(read: TailRead, now_ms: int) -> Fold | None:
    """``read``'s snapshot with its tail folded on, or None when any part does not hold."""
    return _restored(read, now_ms, [])


def _restored(read: TailRead, now_ms: int, before: list[bytes]) -> RestoredFold | None:
    """``read``'s snapshot with its tail folded on, its ``events`` also holding ``before``
    (the branch's own lines through the cut, unchecked; they must chain into the row's head
    hash), or None when any part does not hold."""
    stored = read.snapshot
    if not _usable(stored):
        return None
    try:
        with collector_paused():
            fold = restore(_parts(stored.body)[0], now_ms)
            header = fold.header_
            if (
                header is None or header.line != read.header_line
                or (fold.last_seq, fold.last_hash) != (stored.seq, stored.head_hash)
            ):
                return None
            if before:
                start = stored.seq - len(before) + 1
                window = build_segment(replace(read.branch, fork_at_seq=start - 1),
                                       read.header_line, before).events
                if window[0].seq != start or not _chains(
                    window[0].seq - 1, window[0].prev_hash, window, (stored.seq, stored.head_hash)
                ):
                    return None
                fold.events, fold.start = window, start
            tail = build_segment(replace(read.branch, fork_at_seq=stored.seq),
                                 read.header_line, read.lines).events
            head = (read.branch.head_seq, read.branch.head_hash)
            if not _chains(stored.seq, stored.head_hash, tail, head):
                return None
            fold.extend(tail)
    except (SnapshotUnusableError, SnapshotShortError, ThreadsError):
        return None
    return fold


@dataclass(frozen=True, slots=True)
class Window:
    """A continuing run's open: the branch, its fold restored from the fold row with the lines
    from the row's request checkpoint on (``fold.start``), and the renderer of its next request
    going on from that checkpoint."""

    branch: BranchInfo
    fold: RestoredFold
    resumed: Resumed


async def open_window(store: Store, branch_id: str, now_ms: int) -> Window | None:
    """A continuing run's fold from the branch's fold row, the lines from its request
    checkpoint's request to the row's cut, and the tail after it: the row checked as
    ``open_fold`` checks it, the window chained into the row's head hash and the tail from it
    to the branch's head, the checkpoint resumed over the window. None when any of it does not
    hold, or on a fork (a chain of more than one segment): the run reads the whole chain."""
    try:
        read = await store.read_tail(branch_id)
    except ThreadsError:
        return None
    if read is None or read.branch.fork_at_seq is not None:
        return None
    checkpoint = _checkpoint_in(read.snapshot)
    if checkpoint is None:
        return None
    cut = read.snapshot.seq
    # the window: from the checkpoint's request (or the tail, when the row is before it); and
    # the bytes of the lines before it that the writer's ``SnapshotSchedule`` counts (those
    # after the last multiple of ``SNAPSHOT_EVERY``), so its rows fall where a writer holding
    # the whole chain puts them: their lengths only, never folded nor looked at
    start = min(checkpoint.seq, cut + 1)
    first = min(start, read.branch.head_seq // SNAPSHOT_EVERY * SNAPSHOT_EVERY + 1)
    lines: list[bytes] = []
    if first <= cut:
        try:
            lines = await store.read_lines(branch_id, first - 1, cut)
        except ThreadsError:
            return None
        if len(lines) != cut - first + 1:
            return None
    counted, before = lines[: start - first], lines[start - first :]
    fold = _restored(read, now_ms, before)
    started = None if fold is None else fold.thread_started
    if fold is None or started is None:
        return None
    fold.bytes_before = sum(len(line) + 1 for line in counted)
    with collector_paused():
        resumed = resume(checkpoint, started, fold.events)
    return None if resumed is None else Window(read.branch, fold, resumed)


def _chains(seq: int, previous: str, lines: list[Event], head: tuple[int, str]) -> bool:
    """Whether ``lines`` follow seq ``seq`` and hash ``previous``, link by link, to ``head``."""
    for event in lines:
        if event.seq != seq + 1 or event.prev_hash != previous:
            return False
        seq, previous = event.seq, event.hash
    return (seq, previous) == head
