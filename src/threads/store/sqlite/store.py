"""The embedded SQLite store: a directory laid out as the reference lays it out, ``threads.db``
(the v6 tables and pragmas, ``threads.store.sqlite.schema``) and ``artifacts/sha256/`` (one file
per artifact, ``threads.store.artifact_files``), except that request artifacts are kept as
deltas in ``threads.db`` (``threads.store.request_deltas``). ``":memory:"`` keeps everything
in the process.

What is SQLite's own here (the rest is ``threads.store.core.StoreCore``'s, written once for
both engines): running flows on its connection (``drive``) and where (``_transact``); the store
thread, and the in-place paths beside it; the append, committed with its artifact files and
grouped with others (``threads.store.sqlite.group_commit``), behind a one-statement fence;
artifact files and ``materialize_requests``; acquiring and releasing a lease in place.

All SQLite work runs on one dedicated thread per store so the event loop is never blocked by
it, with one exception: the append of a process's only writer, when nothing else is queued, is
committed in place on the caller's thread (no hand-off; its artifact files are put there first,
unless they are larger than ``IN_PLACE_FILE_BYTES``), on a connection of its own, and only if
no other process holds the write lock (``begin_at_once``); otherwise it queues like any other.
A run's short reads (``Access.READ``) and its lease's acquire and release (``_write``) go in
place the same way.

Invariants: an append checks the lease, the expected head and the branch state (one ``UPDATE``
that moves the head only when all hold, and answers whether a control item waits for the
thread; each check on its own to name a refusal) before its other writes, inside a ``BEGIN
IMMEDIATE`` transaction that appends to other branches queued with it share (one fsync for all
of them; a refusal after that ``UPDATE`` is undone by a savepoint: see ``group_commit``);
stored line bytes are never rewritten; lease expiry is judged by the store's clock, never by
the holder's.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar, cast

from threads.clock import SYSTEM_CLOCK, Clock
from threads.errors import NotFoundError, StoreError
from threads.log.hashing import sha256_hex
from threads.log.lines import Event
from threads.log.vocabulary import ArtifactRef
from threads.store import flows
from threads.store import statements as sql
from threads.store.artifact_files import ArtifactFiles, make_store_dirs
from threads.store.control_items import InboxViews, consume_args, controls_in, lost_item
from threads.store.core import Append, StoreCore
from threads.store.faults import fault, os_fault, sqlite_fault
from threads.store.flows import Access, ConstraintError, Flow
from threads.store.holder import holder_id as recorded_holder
from threads.store.identity import sqlite_owner
from threads.store.layout import FOLD_SNAPSHOTS, Table
from threads.store.protocol import (
    Lease,
)
from threads.store.request_deltas import (
    REQUEST_MEDIA_TYPE,
    Body,
    Latest,
    LatestRequests,
    RequestCache,
)
from threads.store.rows import (
    artifact_missing,
    artifact_ref,
    duplicate_event,
    event_rows,
    require_head,
    verified_artifact,
)
from threads.store.snapshot_row import PUT as PUT_SNAPSHOT
from threads.store.snapshot_row import StoredSnapshot
from threads.store.sqlite import deltas as sqlite_deltas
from threads.store.sqlite.group_commit import (
    Write,
    begin_at_once,
    commit_begun,
    commit_group,
    in_transaction,
)
from threads.store.sqlite.schema import (
    configure,
    create_deltas_table,
    create_snapshots_table,
    has_deltas_table,
    has_snapshots_table,
    init_schema,
)
from threads.store.sqlite.worker import Outcome, StoreThread
from threads.store.statements import SQLITE, Result

T = TypeVar("T")

DEFAULT_BUSY_TIMEOUT_MS = 30_000  # how long a write waits for another writer's lock
# The most artifact bytes an append commits in place puts on the loop's thread; a larger
# output is written by the store thread, so the loop never waits for more than a short write.
IN_PLACE_FILE_BYTES = 64 * 1024



class SQLiteStore(StoreCore):
    """See the module docstring. Create with ``threads.sqlite(path)``."""

    dialect = SQLITE

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        clock: Clock | None = None,
        busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
    ) -> None:
        self.clock: Clock = clock or SYSTEM_CLOCK
        self.busy_timeout_ms = busy_timeout_ms
        self.memory = str(path) == ":memory:"
        self.root = None if self.memory else Path(path)
        self._worker = StoreThread("threads-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._here: sqlite3.Connection | None = None  # appends in place (``_here_connection``)
        self._closed = False
        self._files = None if self.root is None else ArtifactFiles(self.root)
        self._in_memory: dict[str, bytes] = {}  # the artifacts of a ":memory:" store
        self._requests = RequestCache()
        self._latest = LatestRequests()  # touched under the store thread's lock only
        # Leases taken through this store and not released: (branch, holder, epoch). With at
        # most one, an append has no group to join, and commits in place (``_commit_here``).
        self._writers: set[tuple[str, str, int]] = set()
        self._deltas_ready = False
        self._snapshots_ready = False  # fold_snapshots is known to exist
        self._last_put_request: str | None = None
        self.inbox_seen = InboxViews()  # read in each append's transaction

    def __repr__(self) -> str:
        return f"SQLiteStore({':memory:' if self.root is None else str(self.root)!r})"

    # ---- plumbing ------------------------------------------------------------------------

    def _connect(self) -> sqlite3.Connection:
        if self._conn is not None:
            return self._conn
        if self.root is None:
            conn = sqlite3.connect(":memory:", isolation_level=None, check_same_thread=False)
        else:
            make_store_dirs(self.root)
            assert self._files is not None
            self._files.sweep(self.clock.now_ms())  # temp files of puts a crash cut short
            conn = sqlite3.connect(
                self.root / "threads.db",
                isolation_level=None,
                timeout=self.busy_timeout_ms / 1000,
                check_same_thread=False,
            )
        try:
            configure(conn, on_disk=self.root is not None, busy_timeout_ms=self.busy_timeout_ms)
            self._deltas_ready = init_schema(conn)
        except BaseException:
            conn.close()  # an unusable store keeps no connection open
            raise
        self._conn = conn
        return conn

    def _here_connection(self) -> sqlite3.Connection:
        """The connection of appends committed in place: on disk a second one that never waits
        for a lock (busy timeout 0), so its ``BEGIN IMMEDIATE`` answers at once while another
        process holds the write lock; ``":memory:"`` has only the one (and no other process)."""
        conn = self._connect()
        if self.root is None:
            return conn
        if self._here is None:
            here = sqlite3.connect(
                self.root / "threads.db", isolation_level=None, timeout=0, check_same_thread=False
            )
            try:
                configure(here, on_disk=True, busy_timeout_ms=0)
            except BaseException:
                here.close()
                raise
            self._here = here
        return self._here

    def _here_or_none(self) -> sqlite3.Connection | None:
        """The in-place connection, or None when it can't be opened here (a lock met while
        opening it, say): the caller then leaves the work to the store thread's path."""
        try:
            return self._here_connection()
        except Exception:
            return None

    def _require_open(self) -> None:
        if self._closed:
            raise StoreError("invalid_argument", "this store is closed; open it again")

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._require_open()
        return await self._worker.run(lambda: self._guarded(fn))

    async def _read(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """``fn``, a short read a run makes (a row or a few), run in place on the caller's
        thread while nothing is queued or running on the store thread (no hand-off), on the
        in-place connection, which never waits for a lock: if it meets one (a checkpoint
        restarting the WAL, another process recovering it), the read goes to the store thread
        like any other."""
        self._require_open()
        answer = self._worker.here(lambda: self._read_here(fn))
        if answer is None:
            return await self._run(fn)
        await asyncio.sleep(0)  # the loop's other tasks get the turn a hand-off gave
        return answer[0]

    async def _write(self, fn: Callable[[sqlite3.Connection], T], *, alone: bool) -> T:
        """``fn`` in a write transaction of its own: in place as ``_read`` runs a read when the
        process holds no other lease through this store (``alone``: nothing it could have
        shared a commit with), else, or while another process holds the write lock, on the
        store thread."""
        self._require_open()
        done = await self._done_here(lambda: self._begun_here(fn)) if alone else None
        if done is None:
            return await self._run(self._txn(fn))
        return cast(T, done[0])

    async def _done_here(self, job: Callable[[], Outcome | None]) -> tuple[object] | None:
        """``job``'s result when it ran in place (its error raised, coded), or None when it
        could not run here and the caller must hand its work to the store thread."""
        outcome = self._worker.here(job)
        if outcome is None:
            return None
        await asyncio.sleep(0)  # the loop's other tasks get the turn a hand-off gave
        result, error = outcome
        if error is not None:
            raise self._coded(error)
        return (result,)

    def _read_here(self, fn: Callable[[sqlite3.Connection], T]) -> tuple[T] | None:
        conn = self._here_or_none()
        if conn is None:
            return None
        try:
            return (fn(conn),)
        except sqlite3.Error as exc:
            if sqlite_fault(exc).code == "store_busy":
                return None
            raise self._coded(exc) from None

    def _guarded(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``fn`` on the connection; faults of the environment become coded errors."""
        try:
            return fn(self._connect())
        except BaseException as exc:
            coded = self._coded(exc)
            if coded is exc:
                raise
            raise coded from None

    def _coded(self, exc: BaseException) -> BaseException:
        """A fault of the environment as its coded error. An ``IntegrityError`` is left to the
        caller, for which it means a conflict; anything else not SQLite's or the OS's is kept."""
        if isinstance(exc, sqlite3.IntegrityError) or not isinstance(exc, sqlite3.Error | OSError):
            return exc
        if isinstance(exc, OSError):
            return os_fault(exc)
        error = sqlite_fault(exc)
        if error.code == "store_unavailable" and not self._writable():
            error = fault("store_read_only", f"SQLite: {exc}")
        return error

    def _commit_appends(self, appends: list[tuple[Sequence[bytes], Write]]) -> list[Outcome]:
        """The store thread's batch for appends (see ``threads.store.sqlite.group_commit``): each
        append's artifact files are put (durable) first, outside the transaction, and an
        append whose files can't be put fails alone, before its events are written."""
        try:
            conn = self._connect()
        except BaseException as exc:
            return [(None, self._coded(exc))] * len(appends)
        outcomes: list[Outcome] = [(None, None)] * len(appends)
        writes: list[Write] = []
        members: list[int] = []
        for index, (files, write) in enumerate(appends):
            try:
                self._put_files(files)
            except BaseException as exc:  # no file, no events that name it
                outcomes[index] = (None, self._coded(exc))
                continue
            writes.append(write)
            members.append(index)
        committed = commit_group(conn, writes) if writes else []
        for index, outcome in zip(members, committed, strict=True):
            outcomes[index] = self._answer(outcome)
        return outcomes

    def _commit_here(self, files: Sequence[bytes], write: Write) -> Outcome | None:
        """``write`` committed on the calling thread in a transaction of its own, as the store
        thread would commit it alone (``files`` put first, outside it); None, with nothing
        committed, while another process holds the write lock or the connection can't be
        opened here (the append then goes to the store thread, which waits for the lock, or
        names the fault; a file already put is found there)."""
        try:
            self._put_files(files)
        except BaseException as exc:  # no file, no events that name it
            return None, self._coded(exc)
        outcome = self._begun_here(write)
        return None if outcome is None else self._answer(outcome)

    def _begun_here(self, fn: Callable[[sqlite3.Connection], T]) -> Outcome | None:
        """``fn`` committed (or rolled back) in a transaction of its own on the in-place
        connection; None, with nothing begun, while another process holds the write lock or
        the connection can't be opened here."""
        conn = self._here_or_none()
        if conn is None:
            return None
        try:
            if not begin_at_once(conn):
                return None
        except BaseException as exc:
            return None, self._coded(exc)
        return commit_begun(conn, fn)

    def _answer(self, outcome: Outcome) -> Outcome:
        """What an append's caller hears of its write's outcome; a commit is noted first (see
        ``LatestRequests``)."""
        result, error = outcome
        if error is None and result is not None:
            self._latest.record(result)
        return None, None if error is None else self._coded(error)

    def _branch_created(self, branch_id: str, head_hash: str, events: Sequence[Event]) -> None:
        """Nothing to note: an append finds a new branch's latest request by a query."""

    async def owner_identity(self) -> str:
        return sqlite_owner(self)

    def _lease_now(self) -> int:
        return self.clock.now_ms()  # lease expiry is judged by the store's clock

    async def _transact(
        self, access: Access, make: Callable[[], Flow[T]], tables: tuple[Table, ...] = ()
    ) -> T:
        """``make()``'s flow on the store thread: a ``READ`` in place when it can (``_read``),
        a ``SNAPSHOT`` in one deferred transaction, a write in a ``BEGIN IMMEDIATE`` one. Every
        table of the layout is in ``threads.db`` already, but for ``fold_snapshots``, which a
        store the reference wrote lacks until it is first used."""

        def job(conn: sqlite3.Connection) -> T:
            return drive(conn, make())

        if FOLD_SNAPSHOTS in tables and not self._snapshots_ready:
            self._snapshots_ready = await self._run(has_snapshots_table)
            if not self._snapshots_ready:
                if access not in (Access.WRITE, Access.WRITE_AGAIN):
                    raise NotFoundError("this store holds no fold snapshots yet")
                return await self._run(self._txn(lambda conn: _creating_snapshots(conn, job)))
        if access is Access.READ:
            return await self._read(job)
        if access is Access.SCAN:
            return await self._run(job)
        if access is Access.SNAPSHOT:
            return await self._run(self._txn(job, begin="BEGIN"))
        return await self._run(self._txn(job))

    def _writable(self) -> bool:
        """Whether the store's directory can take files (the WAL and shared-memory files
        SQLite creates beside the database even to read it)."""
        return self.root is None or os.access(self.root, os.W_OK)

    def _txn(
        self, fn: Callable[[sqlite3.Connection], T], *, begin: str = "BEGIN IMMEDIATE"
    ) -> Callable[[sqlite3.Connection], T]:
        return lambda conn: in_transaction(conn, fn, begin)

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True

        def shut() -> None:
            for conn in (self._here, self._conn):
                if conn is not None:
                    conn.close()
            self._conn = self._here = None

        await self._worker.run(shut)
        self._worker.stop()

    # ---- appends ---------------------------------------------------------------------------

    async def _append_checked(self, append: Append) -> None:
        branch_id, events, expected_seq = append.branch_id, append.events, append.expected_seq
        lease, requests, receipt = append.lease, append.requests, append.receipt
        others = [a.data for a in append.others]

        def write(conn: sqlite3.Connection) -> Latest | None:
            state = "forking" if append.finishes_fork else "ready"  # a finished fork: ready
            # The fence first: refused there, the append has changed no row (group_commit).
            head_hash, inbox_quiet = _fence(conn, lease, expected_seq, events,
                                            state_needed=state, now=self.clock.now_ms())
            before = self._latest.at(branch_id, head_hash)
            saved: list[str] = []
            if requests:
                if before is not None:
                    base, held = before.sha256, before.held
                else:
                    base, held = sqlite_deltas.previous_request(conn, branch_id), False
                saved = [
                    self._save_request(conn, r.content, base, base_held=held, sha256=r.sha256)
                    for r in requests
                ]
            try:
                _insert_events(conn, event_rows(branch_id, events))
            except sqlite3.IntegrityError:
                raise duplicate_event(branch_id) from None
            if append.snapshots:
                self._put_snapshots(conn, append.snapshots)
            if receipt is not None:
                drive(conn, flows.insert_receipt(receipt))
            for inbox_id in append.consumes:
                if conn.execute(sql.CONSUME, consume_args(events[-1].seq, inbox_id)).rowcount != 1:
                    raise lost_item(inbox_id)  # rolls the append back with it
            if not events:
                return None
            self._note_inbox(conn, branch_id, events[-1], inbox_quiet)
            return LatestRequests.after(before, events, saved)

        self._require_open()
        in_place = len(self._writers) <= 1 and sum(map(len, others)) <= IN_PLACE_FILE_BYTES
        if in_place and await self._done_here(lambda: self._commit_here(others, write)):
            return
        # ``others`` are put by the batch, durable before the transaction holding ``write``.
        await self._worker.run_grouped((others, write), self._commit_appends)

    def _note_inbox(
        self, conn: sqlite3.Connection, branch_id: str, head: Event, quiet: bool
    ) -> None:
        """Read the thread's pending control items inside the append's transaction, so the
        run's look at the step boundary that follows costs no round trip (``quiet``: the fence
        saw none waiting, in this transaction, so there is nothing to read). Keyed by the head
        seq: an append that rolls back leaves an entry no fold will ask about."""
        items = [] if quiet else controls_in(conn.execute(sql.PENDING, (head.thread_id,)))
        self.inbox_seen.note(branch_id, head.seq, head.thread_id, items)

    # ---- leases --------------------------------------------------------------------------

    async def acquire_lease(self, branch_id: str, holder_id: str, ttl_ms: int) -> Lease:
        holder = recorded_holder(holder_id)
        now = self._lease_now

        def acquire(conn: sqlite3.Connection) -> Lease:
            return drive(conn, flows.acquire(self.dialect, branch_id, holder, ttl_ms, now))

        lease = await self._write(acquire, alone=not self._writers)
        self._writers.add((lease.branch_id, lease.holder_id, lease.epoch))
        return lease

    async def release_lease(self, lease: Lease) -> None:
        self._writers.discard((lease.branch_id, lease.holder_id, lease.epoch))
        if not self._closed:

            def release(conn: sqlite3.Connection) -> None:
                drive(conn, flows.release(lease))

            await self._write(release, alone=not self._writers)

    # ---- artifacts -----------------------------------------------------------------------

    async def put_artifact(self, data: bytes, media_type: str) -> ArtifactRef:
        if media_type == REQUEST_MEDIA_TYPE:  # an import puts a log's requests in order
            base, self._last_put_request = self._last_put_request, sha256_hex(data)
            await self._run(self._txn(lambda conn: self._save_request(conn, data, base)))
        else:
            await self._run(lambda _conn: self._put_files([data]))
        return artifact_ref(data, media_type)

    async def get_artifact(self, sha256: str) -> bytes:
        def fetch(conn: sqlite3.Connection) -> bytes:
            if self._files is not None:
                data = self._files.get(sha256)
            else:
                data = self._in_memory.get(sha256)
            if data is None and self._has_deltas(conn):
                data = sqlite_deltas.load(conn, self._requests, sha256)
            if data is None:
                raise artifact_missing(sha256)
            return verified_artifact(sha256, data)

        return await self._run(fetch)

    async def materialize_requests(self) -> int:
        """Write every request artifact kept as a delta out as a full file at its reference
        path (``threads materialize``); returns how many files were written."""

        def write(conn: sqlite3.Connection) -> int:
            if self._files is None:
                raise StoreError("invalid_argument", "an in-memory store keeps no artifact files")
            if not self._has_deltas(conn):
                return 0
            written = 0
            for sha256 in sqlite_deltas.stored(conn):
                if not self._files.holds(sha256):
                    data = sqlite_deltas.load(conn, self._requests, sha256)
                    assert data is not None
                    self._files.put(data)
                    written += 1
            return written

        return await self._run(write)

    def _put_files(self, blobs: Sequence[bytes]) -> None:
        for data in blobs:
            if self._files is not None:
                self._files.put(data)
            else:
                self._in_memory.setdefault(sha256_hex(data), data)

    def _put_snapshots(
        self, conn: sqlite3.Connection, snapshots: Sequence[StoredSnapshot]
    ) -> None:
        """Put fold snapshot rows in the caller's transaction; a store the reference wrote
        lacks the table until then (created in that transaction: it rolls back with it)."""
        if not self._snapshots_ready and not has_snapshots_table(conn):
            create_snapshots_table(conn)
        conn.executemany(PUT_SNAPSHOT, [s.row() for s in snapshots])

    def _has_deltas(self, conn: sqlite3.Connection) -> bool:
        """Whether ``request_deltas`` exists. A store the reference wrote lacks it until a
        request of ours (in this process or another) creates it, so it is looked up again
        until it is there."""
        if not self._deltas_ready:
            self._deltas_ready = has_deltas_table(conn)
        return self._deltas_ready

    def _save_request(
        self,
        conn: sqlite3.Connection,
        data: Body,
        base: str | None,
        *,
        base_held: bool = False,
        sha256: str | None = None,
    ) -> str:
        if not self._deltas_ready:  # created in this write's transaction: it may roll back
            create_deltas_table(conn)
        return sqlite_deltas.save(
            conn, self._requests, data, base, base_held=base_held, sha256=sha256
        )

def sqlite(
    path: str | os.PathLike[str] = ".threads",
    *,
    clock: Clock | None = None,
    busy_timeout_ms: int = DEFAULT_BUSY_TIMEOUT_MS,
) -> SQLiteStore:
    """The embedded store: a directory (``threads.db`` + ``artifacts/``), or ``":memory:"``.
    A write waits up to ``busy_timeout_ms`` for another process's write lock (then
    ``store_busy``); reads never wait for one."""
    return SQLiteStore(path, clock=clock, busy_timeout_ms=busy_timeout_ms)


# ---- helpers running on the store thread ---------------------------------------------------


# The whole fence of an append in one statement: the lease is live at ``now`` with its holder
# and epoch, the head is the expected one and the branch takes appends; then the head moves
# (and a finished fork becomes ready: setting the state costs as much again, so only then).
# It answers whether a control item waits for the thread (``sql.PENDING``'s rows exist), so
# an append whose thread has none reads no inbox rows.
_FENCED = (
    " WHERE branch_id = ?3 AND head_seq = ?4 AND head_hash = ?5 AND state = ?6"
    " AND EXISTS (SELECT 1 FROM leases WHERE branch_id = ?3 AND holder_id = ?7 AND epoch = ?8"
    " AND expires_at > ?9)"
    f" RETURNING EXISTS (SELECT 1 FROM inbox WHERE thread_id = ?10 AND {sql.WAITING})"
)
_MOVE_HEAD = {
    "ready": "UPDATE branches SET head_seq = ?1, head_hash = ?2" + _FENCED,
    "forking": "UPDATE branches SET head_seq = ?1, head_hash = ?2, state = 'ready'" + _FENCED,
}


def _fence(
    conn: sqlite3.Connection,
    lease: Lease,
    expected_seq: int,
    events: Sequence[Event],
    *,
    state_needed: str,
    now: int,
) -> tuple[str, bool]:
    """Check an append's lease, head and branch state and move the head to its last event;
    returns the head hash the append follows, and whether no control item waits for its
    thread (False: not known). When the one-statement fence refuses (or there are no events),
    each check runs on its own, so the refusal is the exact one."""
    branch_id = lease.branch_id
    if events and events[0].seq == expected_seq + 1:
        first, last = events[0], events[-1]
        args = (last.seq, last.hash, branch_id, expected_seq, first.prev_hash, state_needed,
                lease.holder_id, lease.epoch, now, first.thread_id)
        moved = conn.execute(_MOVE_HEAD[state_needed], args).fetchone()
        if moved is not None:
            return first.prev_hash, not moved[0]
    _check_lease(conn, lease, now)
    row = conn.execute(sql.HEAD, (branch_id,)).fetchone()
    require_head(branch_id, row, expected_seq, events, state_needed=state_needed)
    if events:  # the checks above are the fence on their own: a refusal named, or the move
        last = events[-1]
        conn.execute(sql.MOVE_HEAD, (last.seq, last.hash, branch_id))
    return str(row[1]), False


def _insert_events(conn: sqlite3.Connection, rows: list[tuple[object, ...]]) -> None:
    """``rows`` inserted into ``events``: up to ``EVENTS_AT_ONCE`` in one statement (an
    append's usual one to three), more one by one."""
    if 0 < len(rows) <= sql.EVENTS_AT_ONCE:
        conn.execute(sql.insert_events(len(rows)), [v for row in rows for v in row])
    else:
        conn.executemany(sql.INSERT_EVENTS, rows)


def _check_lease(conn: sqlite3.Connection, lease: Lease, now: int) -> None:
    drive(conn, flows.check_lease(lease, lambda: now))


def _creating_snapshots(conn: sqlite3.Connection, job: Callable[[sqlite3.Connection], T]) -> T:
    """``job`` in the caller's transaction once ``fold_snapshots`` is created in it (a store
    the reference wrote lacks it until its first snapshot)."""
    create_snapshots_table(conn)
    return job(conn)


def drive(conn: sqlite3.Connection, flow: Flow[T]) -> T:
    """Run ``flow`` (``threads.store.flows``) on ``conn``, in the transaction the caller holds;
    a statement that breaks a key or a constraint ends it with ``ConstraintError``."""
    try:
        query = next(flow)
        while True:
            statement = SQLITE.render(query.sql)
            try:
                if query.many:
                    cursor = conn.executemany(statement, query.args)
                    result = Result([], cursor.rowcount)
                else:
                    cursor = conn.execute(statement, query.args)
                    result = Result(cursor.fetchall(), cursor.rowcount)
            except sqlite3.IntegrityError as exc:
                raise ConstraintError(str(exc)) from None
            query = flow.send(result)
    except StopIteration as done:
        return cast(T, done.value)
