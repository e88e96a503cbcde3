"""The PostgreSQL store (``threads[postgres]``): many hosts share one store in one schema.

Same tables and bytes as the SQLite store (``threads.store.layout``): events keep their exact
line bytes (``bytea``), branches their head seq/hash, leases their epoch and expiry, artifacts
their bytes (kept in the database: there is no artifact directory), request artifacts as deltas
(``threads.store.postgres.deltas``). The schema is created on first use and versioned in
``meta`` (``threads.store.postgres.schema``).

What is Postgres's own here (the rest is ``threads.store.core.StoreCore``'s, written once for
both engines): the pool and its sessions' settings, running flows on a connection (``drive``)
and in which transaction (``_transact``), repeating what is safe to repeat after a lost
connection (``_reconnecting``), faults as codes (``pg_fault``); appends, grouped into one
statement (``threads.store.postgres.group``) or alone in a pipelined transaction that locks
the lease and branch rows; a lease's acquire under a lock timeout (ending frozen sessions that
hold its row); artifacts in the ``artifacts`` table.

Invariants: an append is one transaction that locks the branch's lease row (``FOR UPDATE``),
checks the lease and the expected head, then inserts artifacts and events and moves the head;
lease expiry is judged by the database clock (so hosts with skewed clocks agree), unless a test
clock was injected, whose reading is then passed in instead; stored bytes are never rewritten.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar, cast

try:
    import psycopg
    from psycopg import sql
    from psycopg_pool import AsyncConnectionPool
except ImportError as exc:  # pragma: no cover - exercised by the import test without the extra
    raise ImportError(
        "threads.store.postgres needs psycopg 3 and psycopg-pool;"
        " install them with: pip install 'threads[postgres]'"
    ) from exc

from threads.clock import SYSTEM_CLOCK, Clock
from threads.errors import StoreError
from threads.log.lines import Event
from threads.log.vocabulary import ArtifactRef
from threads.store import flows, statements
from threads.store.control_items import InboxViews, consume_args, lost_item
from threads.store.core import Append, StoreCore
from threads.store.faults import fault
from threads.store.flows import Access, ConstraintError, Flow
from threads.store.holder import holder_id as recorded_holder
from threads.store.identity import postgres_owner
from threads.store.layout import FOLD_SNAPSHOTS, REQUEST_DELTAS, RUN_RECEIPTS, Table
from threads.store.postgres.append import AppendRequest, artifact_row
from threads.store.postgres.deltas import INSERT_DELTAS, PostgresDeltas
from threads.store.postgres.group import Conn, GroupCommitter
from threads.store.postgres.schema import ensure, has_table, init_schema
from threads.store.protocol import (
    Lease,
    PendingArtifact,
)
from threads.store.receipts import (
    key_taken,
)
from threads.store.request_deltas import REQUEST_MEDIA_TYPE
from threads.store.rows import (
    artifact_missing,
    artifact_ref,
    duplicate_event,
    event_rows,
    require_head,
    require_live,
    stale_epoch,
    verified_artifact,
)
from threads.store.snapshot_row import PUT_POSTGRES as PUT_SNAPSHOT
from threads.store.statements import POSTGRES, Result

P = ParamSpec("P")
T = TypeVar("T")

IDLE_IN_TRANSACTION_MS = 5000  # the server ends a transaction left idle this long
LOCK_WAIT_MS = 2000  # how long acquiring a lease waits on a row lock before checking why
FROZEN_AFTER_MS = 5000  # a transaction waiting this long on its client belongs to a frozen host
_END_FROZEN = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE application_name = %s AND pid <> pg_backend_pid() AND wait_event = 'ClientRead'"
    " AND state IN ('active', 'idle in transaction')"
    " AND xact_start < now() - make_interval(secs => %s)"
)

INSERT_EVENTS = POSTGRES.render(statements.INSERT_EVENTS)
_INSERT_RECEIPT = POSTGRES.render(statements.INSERT_RECEIPT).encode()
_CONSUME = POSTGRES.render(statements.CONSUME).encode()
INSERT_ARTIFACT = (
    "INSERT INTO artifacts(sha256, media_type, bytes, data) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (sha256) DO NOTHING"
)

# Locks the lease row and the branch row together (the only statement that takes both).
_LEASE_AND_HEAD = POSTGRES.render(
    "SELECT l.holder_id, l.epoch, l.expires_at, {now}, b.head_seq, b.head_hash, b.state"
    " FROM leases l JOIN branches b ON b.branch_id = l.branch_id"
    " WHERE l.branch_id = ? FOR UPDATE OF l, b"
)
_DELTAS = ((REQUEST_DELTAS.name,), "")  # ``ensure_tables``'s key for request_deltas
_REPEATABLE = (Access.READ, Access.SCAN, Access.SNAPSHOT, Access.WRITE_AGAIN)


# ---- faults ---------------------------------------------------------------------------------


def pg_fault(exc: psycopg.Error) -> StoreError:
    """A database fault as its coded ``StoreError`` (never raw psycopg, never ``log_corrupt``)."""
    lines = str(exc).strip().splitlines()
    detail = f"Postgres: {lines[0] if lines else type(exc).__name__}"
    if isinstance(exc, psycopg.errors.InsufficientResources):  # disk full, out of memory
        return fault("store_full", detail)
    if isinstance(exc, psycopg.errors.ReadOnlySqlTransaction):
        return fault("store_read_only", detail)
    if isinstance(exc, psycopg.errors.InsufficientPrivilege):
        return fault("store_read_only", detail)
    return fault("store_unavailable", detail)


def _reconnecting(
    method: Callable[Concatenate[PostgresStore, P], Coroutine[Any, Any, T]],
) -> Callable[Concatenate[PostgresStore, P], Coroutine[Any, Any, T]]:
    """Run a method that is safe to repeat once more after a lost connection (a server
    restart, an ended backend): the pool first drops its dead connections. A second loss is
    ``store_unavailable``."""

    async def again(self: PostgresStore, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            return await method(self, *args, **kwargs)
        except StoreError as exc:
            if exc.code != "store_unavailable" or self._closed or not self._ready:
                raise
        await self._drop_dead_connections()
        return await method(self, *args, **kwargs)

    return again


# The cluster (its system identifier, set once by initdb) and the database this store lives in.
_PLACE = "SELECT (SELECT system_identifier FROM pg_control_system()), current_database()"


class PostgresStore(StoreCore):
    """See the module docstring. Create with ``threads.store.postgres.postgres(url)``."""

    dialect = POSTGRES

    def __init__(
        self,
        url: str,
        *,
        clock: Clock | None = None,
        schema: str | None = None,
        min_size: int = 1,
        max_size: int = 8,
    ) -> None:
        # ``clock`` drives the loop; lease expiry uses the injected clock only when there is one.
        self.clock: Clock = clock or SYSTEM_CLOCK
        self._lease_clock = clock
        self.schema = schema or "threads"
        self._identity: str | None = None  # owner_identity, read once
        self._url = url
        self._pool: AsyncConnectionPool[Conn] = AsyncConnectionPool(
            url,
            min_size=min_size,
            max_size=max_size,
            open=False,
            kwargs={"autocommit": True},
            configure=self._configure,
            name=f"threads-{self.schema}",
        )
        self._app = f"threads:{self.schema}"[:63]  # marks this schema's sessions
        self._ready = False
        # Tables known to be in place (``ensure_tables``): names, and a provider's DDL.
        self._tables: set[tuple[tuple[str, ...], str]] = set()
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._deltas = PostgresDeltas()
        self._last_put_request: str | None = None
        # Read by grouped appends once ``PostgresControls`` knows the inbox table is there.
        self.inbox_seen = InboxViews(active=False)
        self._groups = GroupCommitter(
            self._conn, self._lease_now, self._append_alone, self._deltas, self.inbox_seen
        )

    def __repr__(self) -> str:
        return f"PostgresStore(schema={self.schema!r})"  # the URL may carry a password

    # ---- plumbing ------------------------------------------------------------------------

    async def _configure(self, conn: Conn) -> None:
        await conn.execute(sql.SQL("SET search_path TO {}").format(sql.Identifier(self.schema)))
        # Every transaction here is a few round trips: a host frozen mid-transaction (a pause,
        # a stopped process) must not hold a branch's row locks against the other hosts.
        await conn.execute(
            f"SET idle_in_transaction_session_timeout = {IDLE_IN_TRANSACTION_MS}".encode()
        )
        await conn.execute("SELECT set_config('application_name', %s, false)", (self._app,))

    async def _open(self) -> AsyncConnectionPool[Conn]:
        if self._closed:
            raise StoreError("invalid_argument", "this store is closed; open it again")
        if not self._ready:
            async with self._open_lock:
                if not self._ready:
                    # One plain connection first: a server that is down fails fast with
                    # libpq's reason, instead of the pool retrying in the background.
                    async with await psycopg.AsyncConnection.connect(
                        self._url, autocommit=True, connect_timeout=10
                    ) as conn:
                        await self._configure(conn)
                        await init_schema(conn, self.schema)
                        await self._has_deltas(conn)
                    await self._pool.open(wait=True, timeout=30.0)
                    self._ready = True
        return self._pool

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        try:
            pool = await self._open()
            async with pool.connection() as conn:
                yield conn
        except psycopg.errors.LockNotAvailable:
            raise  # acquire_lease answers it (branch_busy)
        except (psycopg.OperationalError, psycopg.InternalError) as exc:
            raise pg_fault(exc) from None

    @asynccontextmanager
    async def _txn(self, *, snapshot: bool = False) -> AsyncIterator[Conn]:
        """One transaction; ``snapshot`` reads every statement from the same snapshot."""
        async with self._conn() as conn, conn.transaction():
            if snapshot:
                await conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
            yield conn

    async def _drop_dead_connections(self) -> None:
        try:
            await self._pool.check()
        except psycopg.Error as exc:
            raise pg_fault(exc) from None

    async def owner_identity(self) -> str:
        if self._identity is None:
            async with self._conn() as conn:
                row = await (await conn.execute(_PLACE)).fetchone()
            assert row is not None
            self._identity = postgres_owner(row[0], row[1], self.schema)
        return self._identity

    def _lease_now(self) -> int | None:
        """The injected clock's reading, or None: the database's clock decides."""
        return None if self._lease_clock is None else self._lease_clock.now_ms()

    async def _transact(
        self, access: Access, make: Callable[[], Flow[T]], tables: tuple[Table, ...] = ()
    ) -> T:
        """``make()``'s flow on a pooled connection: a ``SNAPSHOT`` in one read-only repeatable
        read transaction, a write in a transaction, a ``STATEMENT`` or a read as it comes
        (autocommit); ``tables`` created first when this store has not seen them. What is safe
        to repeat is run once more after a lost connection (``_reconnecting``)."""
        if tables:
            await self.ensure_tables(*tables)
        if access in _REPEATABLE:
            return await self._transact_again(access, make)
        return await self._transact_once(access, make)

    @_reconnecting
    async def _transact_again(self, access: Access, make: Callable[[], Flow[T]]) -> T:
        return await self._transact_once(access, make)

    async def _transact_once(self, access: Access, make: Callable[[], Flow[T]]) -> T:
        if access in (Access.WRITE, Access.WRITE_AGAIN, Access.SNAPSHOT):
            async with self._txn(snapshot=access is Access.SNAPSHOT) as conn:
                return await drive(conn, make())
        async with self._conn() as conn:
            return await drive(conn, make())

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool.close()

    # ---- appends ---------------------------------------------------------------------------

    async def _append_checked(self, append: Append) -> None:
        if append.requests:
            await self.ensure_tables(REQUEST_DELTAS)
        if append.snapshots:
            await self.ensure_tables(FOLD_SNAPSHOTS)
        branch_id, events = append.branch_id, append.events
        receipt, consumes, finishes_fork = append.receipt, append.consumes, append.finishes_fork
        request = AppendRequest(
            branch_id, events, append.expected_seq, append.lease, append.others, receipt,
            consumes, finishes_fork,
            self._deltas.plan(branch_id, events, append.requests) if append.requests else None,
            append.snapshots,
        )
        if receipt is None and not consumes and not finishes_fork:
            await self._groups.append(request)
            return
        # A receipt or a consumed control item can roll the append back after its writes, and
        # a fork's first append takes a branch that is not ready yet: each is judged in a
        # transaction of its own.
        if receipt is not None:
            await self._receipts()
        await self._append_alone(request, False)

    async def _append_alone(self, request: AppendRequest, maybe_landed: bool) -> None:
        """One append in a transaction of its own (after a group's transaction failed,
        ``maybe_landed`` says whether its commit may have landed before the connection was lost:
        the store is asked first)."""
        if maybe_landed:
            await self._drop_dead_connections()
            if await self._landed(request):
                return
        written = [False]  # set once the writes (and COMMIT) may have reached the server
        try:
            await self._append(request, written)
        except StoreError as exc:
            if exc.code != "store_unavailable" or self._closed:
                raise
            await self._drop_dead_connections()
            # Lost before any write was sent: nothing was committed. Lost after: ask the store
            # whether the batch landed (stale_epoch if another holder took over meanwhile).
            if written[0] and await self._landed(request):
                return
            await self._append(request, written)

    async def _landed(self, request: AppendRequest) -> bool:
        """After a connection was lost mid-append: did the batch commit? The lease is checked
        first, so while it holds nobody else can have moved the head."""
        events = request.events
        await self.check_lease(request.lease)
        branch = await self.get_branch(request.branch_id)
        if events and (branch.head_seq, branch.head_hash) == (events[-1].seq, events[-1].hash):
            return True
        if branch.head_seq == request.expected_seq:
            return False
        raise StoreError(
            "seq_conflict", "the branch moved while the connection was lost; re-read it"
        )

    async def _append(self, request: AppendRequest, written: list[bool]) -> None:
        try:
            try:
                await self._append_once(request, written)
            except psycopg.errors.ForeignKeyViolation:
                if request.requests is None:
                    raise
                # A request's base was deleted behind this store's back: plan it again from
                # the table (it is then kept whole). Nothing of the refused attempt committed.
                self._deltas.replan(request.requests)
                await self._append_once(request, written)
        except psycopg.IntegrityError:
            # The head check passed under the row locks, so no other writer's event holds
            # these seqs: an event_id of the batch is already on the branch.
            raise duplicate_event(request.branch_id) from None

    async def _append_once(self, request: AppendRequest, written: list[bool]) -> None:
        branch_id, events, lease = request.branch_id, request.events, request.lease
        # Pipelined: BEGIN + the locking read are one round trip, the writes + COMMIT another.
        async with self._conn() as conn, conn.pipeline() as pipeline, conn.transaction():
            cursor = await conn.execute(_LEASE_AND_HEAD, (self._lease_now(), branch_id))
            # Sync: between the round trips the session is "idle in transaction", so a host
            # frozen here loses its row locks after IDLE_IN_TRANSACTION_MS.
            await pipeline.sync()
            row = await cursor.fetchone()
            if row is None:  # no lease row: nobody ever held this branch
                raise stale_epoch(lease)
            require_live(row[:3], lease, int(row[3]))
            require_head(branch_id, row[4:], request.expected_seq, events,
                         state_needed="forking" if request.finishes_fork else "ready")
            if request.requests is not None:
                await self._deltas.resolve(conn, pipeline, [request.requests])
            written[0] = True
            for artifact in request.artifacts:
                await _insert_artifact(conn, artifact)
            if request.requests is not None:
                await cursor.executemany(INSERT_DELTAS, request.requests.rows or [])
            if events:
                await cursor.executemany(INSERT_EVENTS, event_rows(branch_id, events))
                last = events[-1]
                await conn.execute(  # a finished fork becomes ready with its fork event
                    "UPDATE branches SET head_seq = %s, head_hash = %s, state = 'ready'"
                    " WHERE branch_id = %s",
                    (last.seq, last.hash, branch_id),
                )
            if request.snapshots:
                await cursor.executemany(PUT_SNAPSHOT, [r.row() for r in request.snapshots])
            if request.receipt is not None:
                inserted = await conn.execute(_INSERT_RECEIPT, request.receipt.row())
                await pipeline.sync()
                if inserted.rowcount != 1:
                    raise key_taken(request.receipt)  # rolls the append back with it
            for inbox_id in request.consumes:
                consumed = await conn.execute(
                    _CONSUME, consume_args(events[-1].seq, inbox_id)
                )
                await pipeline.sync()
                if consumed.rowcount != 1:
                    raise lost_item(inbox_id)  # rolls the append back with it
        self._deltas.committed(branch_id, events, request.requests)

    # ---- idempotency receipts ------------------------------------------------------------

    async def _receipts(self) -> None:
        """Create ``run_receipts`` on first use: only a host needs it."""
        await self.ensure_tables(RUN_RECEIPTS)

    def _branch_created(self, branch_id: str, head_hash: str, events: Sequence[Event]) -> None:
        self._deltas.created(branch_id, head_hash, events)

    async def ensure_tables(self, *tables: Table, extra: str = "") -> None:
        """Create ``tables`` (and a provider's ``extra`` DDL) unless this open store already
        did: stores of this version that lack them get them in place
        (``threads.store.postgres.schema.ensure``)."""
        key = (tuple(t.name for t in tables), extra)
        if key in self._tables:
            return
        async with self._conn() as conn:
            await ensure(conn, self.schema, tables, extra)
        self._tables.add(key)

    async def _has_deltas(self, conn: Conn) -> bool:
        """Whether ``request_deltas`` is there (a store no request was written to since it
        came lacks it; reading never creates it)."""
        if _DELTAS not in self._tables and await has_table(conn, REQUEST_DELTAS):
            self._tables.add(_DELTAS)
        return _DELTAS in self._tables

    # ---- leases --------------------------------------------------------------------------

    @_reconnecting
    async def acquire_lease(self, branch_id: str, holder_id: str, ttl_ms: int) -> Lease:
        try:
            return await self._acquire(branch_id, recorded_holder(holder_id), ttl_ms)
        except psycopg.errors.LockNotAvailable:
            await self._end_frozen_sessions()
            raise StoreError(
                "branch_busy",
                "another session held this branch's row lock; it was checked, run again",
            ) from None

    async def _end_frozen_sessions(self) -> None:
        """End this schema's sessions whose transaction has waited on its client for longer
        than any of ours takes (a frozen or stopped host): their row locks go with them."""
        async with self._conn() as conn:
            await conn.execute(_END_FROZEN, (self._app, FROZEN_AFTER_MS / 1000))

    async def _acquire(self, branch_id: str, holder_id: str, ttl_ms: int) -> Lease:
        async with self._txn() as conn:
            await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}".encode())
            return await drive(
                conn, flows.acquire(self.dialect, branch_id, holder_id, ttl_ms, self._lease_now)
            )

    @_reconnecting
    async def release_lease(self, lease: Lease) -> None:
        if self._closed:
            return
        async with self._conn() as conn:  # one statement: its own transaction
            await drive(conn, flows.release(lease))

    # ---- artifacts -----------------------------------------------------------------------

    @_reconnecting
    async def put_artifact(self, data: bytes, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        if media_type != REQUEST_MEDIA_TYPE:
            async with self._conn() as conn:
                await _insert_artifact(conn, PendingArtifact(data, media_type))
            return ref
        # An import puts a log's requests in order: each is based on the one put before it.
        await self.ensure_tables(REQUEST_DELTAS)
        async with self._txn() as conn:
            await self._deltas.save(conn, data, self._last_put_request)
        self._deltas.cache.put(ref["sha256"], data)
        self._last_put_request = ref["sha256"]
        return ref

    @_reconnecting
    async def get_artifact(self, sha256: str) -> bytes:
        async with self._conn() as conn:
            if await self._has_deltas(conn):
                data = await self._deltas.load(conn, sha256)
                if data is not None:
                    return data
            cursor = conn.cursor(binary=True)
            await cursor.execute("SELECT data FROM artifacts WHERE sha256 = %s", (sha256,))
            row = await cursor.fetchone()
        if row is None:
            raise artifact_missing(sha256)
        return verified_artifact(sha256, row[0])

def postgres(
    url: str,
    *,
    clock: Clock | None = None,
    schema: str | None = None,
    min_size: int = 1,
    max_size: int = 8,
) -> PostgresStore:
    """The shared store: ``url`` is a libpq URL (``postgresql://user@host/db``); the tables live
    in ``schema`` (``threads`` by default). The pool opens on first use."""
    return PostgresStore(url, clock=clock, schema=schema, min_size=min_size, max_size=max_size)


# ---- helpers (each runs on a connection the caller holds) ----------------------------------


async def _insert_artifact(conn: Conn, artifact: PendingArtifact) -> None:
    await conn.execute(INSERT_ARTIFACT, artifact_row(artifact))


async def drive(conn: Conn, flow: Flow[T]) -> T:
    """Run ``flow`` (``threads.store.flows``) on ``conn``, each statement awaited in turn (in
    binary, so bytes come back as they are stored); a statement that breaks a key or a
    constraint ends it with ``ConstraintError``."""
    cursor = conn.cursor(binary=True)
    try:
        query = next(flow)
        while True:
            statement = POSTGRES.render(query.sql).encode()
            try:
                if query.many:
                    await cursor.executemany(statement, query.args)
                    result = Result([], cursor.rowcount)
                else:
                    await cursor.execute(statement, query.args)
                    found = await cursor.fetchall() if cursor.description is not None else []
                    result = Result(found, cursor.rowcount)
            except psycopg.IntegrityError as exc:
                raise ConstraintError(str(exc).strip().splitlines()[0]) from None
            query = flow.send(result)
    except StopIteration as done:
        return cast(T, done.value)
