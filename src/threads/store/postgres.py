"""The PostgreSQL store (``threads[postgres]``): many hosts share one store in one schema.

Same tables and bytes as the SQLite store: events keep their exact line bytes (``bytea``),
branches their head seq/hash, leases their epoch and expiry, artifacts their bytes (all kept in
the database, there is no artifact directory), request artifacts as deltas
(``threads.store.postgres_deltas``). The schema is created on first use and versioned
in ``meta`` (a newer or older version is ``unsupported_format``).
Invariants: an append is one transaction that locks the branch's lease row (``FOR UPDATE``),
checks the lease and the expected head, then inserts artifacts and events and moves the head;
lease expiry is judged by the database clock (so hosts with skewed clocks agree), unless a test
clock was injected, whose reading is then passed in instead; stored bytes are never rewritten.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine, Sequence
from contextlib import asynccontextmanager
from typing import Any, Concatenate, ParamSpec, TypeVar

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
from threads.errors import NotFoundError, StoreError
from threads.log.lines import Event, Header
from threads.store.control_items import CONSUME, InboxViews, lost_item
from threads.store.control_items import sql as sql_for
from threads.store.faults import fault
from threads.store.holder import holder_id as recorded_holder
from threads.store.pg_append import LEASE_NOW, AppendRequest, artifact_row
from threads.store.pg_group import Conn, GroupCommitter
from threads.store.postgres_deltas import DDL as DELTAS_DDL
from threads.store.postgres_deltas import INSERT_DELTAS, PostgresDeltas
from threads.store.protocol import (
    ArtifactRef,
    BranchInfo,
    Chain,
    Lease,
    LeaseState,
    PendingArtifact,
    Segment,
    StoredRow,
)
from threads.store.receipts import (
    RECEIPT_COLUMNS,
    UNFINISHED_RECEIPTS,
    RunReceipt,
    key_taken,
    receipt_from_row,
    receipts_ddl,
)
from threads.store.request_deltas import REQUEST_MEDIA_TYPE
from threads.store.rows import (
    BRANCH_COLUMNS,
    SCHEMA_VERSION,
    artifact_missing,
    artifact_ref,
    branch_from_row,
    dropped_ref_text,
    duplicate_event,
    event_rows,
    free_roots,
    free_roots_query,
    next_epoch,
    require_batch,
    require_first_events,
    require_free,
    require_head,
    require_live,
    resolved_chain,
    same_segment,
    segment_head,
    stale_epoch,
    stored_row,
    unsupported_schema,
    verified_artifact,
)

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

_DDL = """
CREATE TABLE meta (
  key text PRIMARY KEY,
  value text NOT NULL
);
CREATE TABLE threads (
  thread_id text PRIMARY KEY,
  tenant_id text NOT NULL
);
CREATE TABLE branches (
  branch_id text PRIMARY KEY,
  thread_id text NOT NULL REFERENCES threads(thread_id),
  tenant_id text NOT NULL,
  parent_branch_id text REFERENCES branches(branch_id),
  fork_at_seq bigint,
  header_line bytea NOT NULL,
  state text NOT NULL CHECK (state IN
    ('forking','ready','inspection_only','read_only','corrupt','fork_failed')),
  head_seq bigint NOT NULL,
  head_hash text NOT NULL,
  head_verified boolean NOT NULL DEFAULT true,
  dropped_ref text,
  created bigint GENERATED ALWAYS AS IDENTITY  -- listing order (SQLite's rowid)
);
CREATE INDEX branches_by_thread ON branches(thread_id);
CREATE TABLE events (
  branch_id text NOT NULL REFERENCES branches(branch_id),
  seq bigint NOT NULL,
  event_id text NOT NULL,
  type text NOT NULL,
  type_version integer NOT NULL,
  critical integer NOT NULL,
  epoch bigint NOT NULL,
  line bytea NOT NULL,
  PRIMARY KEY (branch_id, seq),
  UNIQUE (branch_id, event_id)
);
CREATE TABLE leases (
  branch_id text PRIMARY KEY,
  holder_id text NOT NULL,
  epoch bigint NOT NULL,
  expires_at bigint NOT NULL
);
CREATE TABLE artifacts (
  sha256 text PRIMARY KEY,
  media_type text NOT NULL,
  bytes bigint NOT NULL,
  data bytea NOT NULL
);
"""

_RECEIPTS_DDL = receipts_ddl("text", "bigint")

INSERT_EVENTS = (
    "INSERT INTO events(branch_id, seq, event_id, type, type_version, critical, epoch, line)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_ARTIFACT = (
    "INSERT INTO artifacts(sha256, media_type, bytes, data) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (sha256) DO NOTHING"
)

_LEASE = f"SELECT holder_id, epoch, expires_at, {LEASE_NOW} FROM leases WHERE branch_id = %s"
_LEASE_FOR_UPDATE = _LEASE + " FOR UPDATE"
# Locks the lease row and the branch row together (the only statement that takes both).
_LEASE_AND_HEAD = (
    f"SELECT l.holder_id, l.epoch, l.expires_at, {LEASE_NOW}, b.head_seq, b.head_hash, b.state"
    " FROM leases l JOIN branches b ON b.branch_id = l.branch_id"
    " WHERE l.branch_id = %s FOR UPDATE OF l, b"
)
# Roots a worker may claim (see ``Store.list_free_threads``).
_FREE_ROOTS = free_roots_query(LEASE_NOW, "created")


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


class PostgresStore:
    """See the module docstring. Create with ``threads.store.postgres.postgres(url)``."""

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
        self._tables: set[str] = set()  # additive DDL known to be in place (``ensure_tables``)
        self._closed = False
        self._open_lock = asyncio.Lock()
        self._deltas = PostgresDeltas()
        self._last_put_request: str | None = None
        # Read by grouped appends once ``PostgresControls`` knows the inbox table is there.
        self.inbox_seen = InboxViews(active=False)
        self._groups = GroupCommitter(
            self._conn, self._now, self._append_alone, self._deltas, self.inbox_seen
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
                        await _init_schema(conn, self.schema)
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

    def _now(self) -> int | None:
        """The injected clock's reading, or None: the database's clock decides."""
        return None if self._lease_clock is None else self._lease_clock.now_ms()

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        await self._pool.close()

    # ---- branches ------------------------------------------------------------------------

    async def create_branch(
        self,
        header: Header,
        *,
        tenant_id: str,
        parent_branch_id: str | None = None,
        fork_at_seq: int | None = None,
        state: str = "ready",
        events: Sequence[Event] = (),
        receipt: RunReceipt | None = None,
    ) -> None:
        head_seq, head_hash = require_first_events(header, fork_at_seq, events)
        if receipt is not None:
            await self._receipts()
        try:
            async with self._txn() as conn:
                if parent_branch_id is None:
                    await conn.execute(
                        "INSERT INTO threads(thread_id, tenant_id) VALUES (%s, %s)",
                        (header.thread_id, tenant_id),
                    )
                await conn.execute(
                    "INSERT INTO branches(branch_id, thread_id, tenant_id, parent_branch_id,"
                    " fork_at_seq, header_line, state, head_seq, head_hash, head_verified)"
                    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, true)",
                    (
                        header.branch_id,
                        header.thread_id,
                        tenant_id,
                        parent_branch_id,
                        fork_at_seq,
                        header.line,
                        state,
                        head_seq,
                        head_hash,
                    ),
                )
                if events:
                    await conn.cursor().executemany(
                        INSERT_EVENTS, event_rows(header.branch_id, events)
                    )
                if receipt is not None:
                    await _insert_receipt(conn, None, receipt)
        except psycopg.IntegrityError:
            raise StoreError(
                "seq_conflict", f"branch {header.branch_id} already exists; open it instead"
            ) from None
        self._deltas.created(header.branch_id, head_hash, events)

    @_reconnecting
    async def get_branch(self, branch_id: str) -> BranchInfo:
        async with self._conn() as conn:
            return await _branch(conn, branch_id)

    @_reconnecting
    async def root_branch(self, thread_id: str) -> BranchInfo:
        rows = await self._branches("thread_id = %s AND parent_branch_id IS NULL", (thread_id,))
        if not rows:
            raise NotFoundError(f"no thread {thread_id} in this store")
        return rows[0]

    @_reconnecting
    async def list_branches(self, thread_id: str) -> list[BranchInfo]:
        return await self._branches("thread_id = %s", (thread_id,))

    @_reconnecting
    async def list_threads(self, tenant_id: str | None = None) -> list[BranchInfo]:
        if tenant_id is None:
            return await self._branches("parent_branch_id IS NULL", ())
        return await self._branches("parent_branch_id IS NULL AND tenant_id = %s", (tenant_id,))

    @_reconnecting
    async def list_free_threads(self) -> list[BranchInfo]:
        async with self._conn() as conn:
            cursor = await conn.execute(_FREE_ROOTS, (self._now(),))
            return free_roots(await cursor.fetchall())

    async def _branches(self, where: str, args: tuple[Any, ...]) -> list[BranchInfo]:
        query = f"SELECT {BRANCH_COLUMNS} FROM branches WHERE {where} ORDER BY created"
        async with self._conn() as conn:
            cursor = await conn.execute(query.encode(), args)
            return [branch_from_row(row) for row in await cursor.fetchall()]

    @_reconnecting
    async def set_branch_state(self, branch_id: str, state: str) -> None:
        async with self._conn() as conn:
            await conn.execute(
                "UPDATE branches SET state = %s WHERE branch_id = %s", (state, branch_id)
            )

    # ---- appends and reads ---------------------------------------------------------------

    async def append(
        self,
        branch_id: str,
        events: Sequence[Event],
        *,
        expected_seq: int,
        lease: Lease,
        artifacts: Sequence[PendingArtifact] = (),
        receipt: RunReceipt | None = None,
        consumes: Sequence[str] = (),
        finishes_fork: bool = False,
    ) -> None:
        require_batch(branch_id, lease, events)
        requests = [a for a in artifacts if a.media_type == REQUEST_MEDIA_TYPE]
        if requests:
            await self.ensure_tables(DELTAS_DDL)
        request = AppendRequest(
            branch_id, events, expected_seq, lease,
            [a for a in artifacts if a.media_type != REQUEST_MEDIA_TYPE], receipt,
            tuple(consumes), finishes_fork,
            self._deltas.plan(branch_id, events, requests) if requests else None,
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
            cursor = await conn.execute(_LEASE_AND_HEAD, (self._now(), branch_id))
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
            if request.receipt is not None:
                await _insert_receipt(conn, pipeline, request.receipt)
            for inbox_id in request.consumes:
                consumed = await conn.execute(
                    sql_for(CONSUME, "%s").encode(), (events[-1].seq, inbox_id)
                )
                await pipeline.sync()
                if consumed.rowcount != 1:
                    raise lost_item(inbox_id)  # rolls the append back with it
        self._deltas.committed(branch_id, events, request.requests)

    # ---- idempotency receipts ------------------------------------------------------------

    async def _receipts(self) -> None:
        """Create ``run_receipts`` on first use: only a host needs it."""
        await self.ensure_tables(_RECEIPTS_DDL)

    async def ensure_tables(self, ddl: str) -> None:
        """Create the tables of ``ddl`` (``IF NOT EXISTS``, under the schema's advisory lock)
        unless this open store already did: stores of this version that lack them get them in
        place (nothing migrates)."""
        if ddl in self._tables:
            return
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))",
                               (f"threads:{self.schema}",))
            await conn.execute(ddl.encode())
        self._tables.add(ddl)

    async def _has_deltas(self, conn: Conn) -> bool:
        """Whether ``request_deltas`` is there (a store no request was written to since it
        came lacks it; reading never creates it)."""
        if DELTAS_DDL not in self._tables:
            cursor = await conn.execute("SELECT to_regclass('request_deltas') IS NOT NULL")
            row = await cursor.fetchone()
            if row is not None and row[0]:
                self._tables.add(DELTAS_DDL)
        return DELTAS_DDL in self._tables

    async def get_receipt(
        self, tenant_id: str, operation: str, idempotency_key: str
    ) -> RunReceipt | None:
        await self._receipts()
        async with self._conn() as conn:
            cursor = await conn.execute(
                f"SELECT {RECEIPT_COLUMNS} FROM run_receipts WHERE tenant_id = %s"
                " AND operation = %s AND idempotency_key = %s".encode(),
                (tenant_id, operation, idempotency_key),
            )
            row = await cursor.fetchone()
        return None if row is None else receipt_from_row(row)

    async def unfinished_receipts(self) -> list[RunReceipt]:
        await self._receipts()
        async with self._conn() as conn:
            cursor = await conn.execute(UNFINISHED_RECEIPTS.encode())
            return [receipt_from_row(r) for r in await cursor.fetchall()]

    async def _stored_chain(
        self, branch_id: str
    ) -> tuple[BranchInfo, list[tuple[BranchInfo, bytes, list[bytes]]]]:
        """The resolved chain's stored bytes, segment by segment, in one snapshot, unchecked."""
        async with self._txn(snapshot=True) as conn:
            target = await _branch(conn, branch_id)
            lineage: list[tuple[BranchInfo, int | None]] = [(target, None)]
            while lineage[-1][0].parent_branch_id is not None:
                child = lineage[-1][0]
                assert child.parent_branch_id is not None
                lineage.append((await _branch(conn, child.parent_branch_id), child.fork_at_seq))
            stored = [await _stored_segment(conn, info, cut) for info, cut in reversed(lineage)]
        return target, stored

    @_reconnecting
    async def read_chain(self, branch_id: str) -> Chain:
        return resolved_chain(*await self._stored_chain(branch_id))

    @_reconnecting
    async def stored_rows(self, branch_id: str) -> list[StoredRow]:
        async with self._conn() as conn:
            cursor = conn.cursor(binary=True)
            await cursor.execute(
                "SELECT seq, event_id, type, type_version, critical, epoch, line FROM events"
                " WHERE branch_id = %s ORDER BY seq",
                (branch_id,),
            )
            return [stored_row(row) for row in await cursor.fetchall()]

    @_reconnecting
    async def stored_lines(self, branch_id: str) -> tuple[BranchInfo, list[bytes]]:
        target, stored = await self._stored_chain(branch_id)
        return target, [line for _, header, lines in stored for line in (header, *lines)]

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
        now_param = self._now()
        async with self._txn() as conn:
            await conn.execute(f"SET LOCAL lock_timeout = {LOCK_WAIT_MS}".encode())
            branch = await _branch(conn, branch_id)
            # A row to lock even for the first holder, so racing acquirers queue on it.
            await conn.execute(
                "INSERT INTO leases(branch_id, holder_id, epoch, expires_at)"
                " VALUES (%s, '', 0, 0) ON CONFLICT (branch_id) DO NOTHING",
                (branch_id,),
            )
            row, now = await _lease_row(conn, branch_id, now_param, lock=True)
            require_free(row, holder_id, now)
            lease_epoch = row[1] if row is not None else 0
            epoch = next_epoch(lease_epoch, await _chain_epoch(conn, branch))
            lease = Lease(branch_id, holder_id, epoch, now + ttl_ms)
            await conn.execute(
                "UPDATE leases SET holder_id = %s, epoch = %s, expires_at = %s"
                " WHERE branch_id = %s",
                (holder_id, epoch, lease.expires_at, branch_id),
            )
        return lease

    @_reconnecting
    async def read_lease(self, branch_id: str) -> LeaseState | None:
        now_param = self._now()
        async with self._conn() as conn:
            row, now = await _lease_row(conn, branch_id, now_param, lock=False)
        if row is None or row[0] == "":  # '' is the placeholder row a first acquire locks
            return None
        return LeaseState(branch_id, row[0], int(row[1]), int(row[2]), now)

    @_reconnecting
    async def renew_lease(self, lease: Lease, ttl_ms: int) -> Lease:
        now_param = self._now()
        async with self._txn() as conn:
            row, now = await _lease_row(conn, lease.branch_id, now_param, lock=True)
            require_live(row, lease, now)
            renewed = Lease(lease.branch_id, lease.holder_id, lease.epoch, now + ttl_ms)
            await conn.execute(
                "UPDATE leases SET expires_at = %s WHERE branch_id = %s",
                (renewed.expires_at, lease.branch_id),
            )
        return renewed

    @_reconnecting
    async def check_lease(self, lease: Lease) -> None:
        now_param = self._now()
        async with self._conn() as conn:
            row, now = await _lease_row(conn, lease.branch_id, now_param, lock=False)
        require_live(row, lease, now)

    @_reconnecting
    async def release_lease(self, lease: Lease) -> None:
        if self._closed:
            return
        async with self._conn() as conn:
            # Keep the row (and its epoch) so the next holder's epoch still increases.
            await conn.execute(
                "UPDATE leases SET expires_at = 0"
                " WHERE branch_id = %s AND holder_id = %s AND epoch = %s",
                (lease.branch_id, lease.holder_id, lease.epoch),
            )

    # ---- artifacts -----------------------------------------------------------------------

    @_reconnecting
    async def put_artifact(self, data: bytes, media_type: str) -> ArtifactRef:
        ref = artifact_ref(data, media_type)
        if media_type != REQUEST_MEDIA_TYPE:
            async with self._conn() as conn:
                await _insert_artifact(conn, PendingArtifact(data, media_type))
            return ref
        # An import puts a log's requests in order: each is based on the one put before it.
        await self.ensure_tables(DELTAS_DDL)
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

    # ---- import --------------------------------------------------------------------------

    async def store_segment(
        self,
        segment: Segment,
        *,
        tenant_id: str,
        parent_branch_id: str | None,
        head_verified: bool,
        dropped_ref: ArtifactRef | None,
        state: str = "ready",
    ) -> bool:
        header = segment.header
        async with self._txn() as conn:
            # Concurrent imports of one branch queue here, so the loser compares, not collides.
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (header.branch_id,))
            cursor = conn.cursor(binary=True)
            await cursor.execute(
                "SELECT header_line FROM branches WHERE branch_id = %s", (header.branch_id,)
            )
            row = await cursor.fetchone()
            if row is not None:
                stored = await _lines(conn, header.branch_id, None)
                return same_segment(segment, bytes(row[0]), stored)
            if parent_branch_id is None:
                await conn.execute(
                    "INSERT INTO threads(thread_id, tenant_id) VALUES (%s, %s)"
                    " ON CONFLICT (thread_id) DO NOTHING",
                    (header.thread_id, tenant_id),
                )
            last_seq, last_hash = segment_head(segment)
            await conn.execute(
                "INSERT INTO branches(branch_id, thread_id, tenant_id, parent_branch_id,"
                " fork_at_seq, header_line, state, head_seq, head_hash, head_verified,"
                " dropped_ref) VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (
                    header.branch_id,
                    header.thread_id,
                    tenant_id,
                    parent_branch_id,
                    segment.fork_at_seq,
                    header.line,
                    state,
                    last_seq,
                    last_hash,
                    head_verified,
                    dropped_ref_text(dropped_ref),
                ),
            )
            if segment.events:
                await cursor.executemany(
                    INSERT_EVENTS, event_rows(header.branch_id, segment.events)
                )
        return True


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


async def _init_schema(conn: Conn, schema: str) -> None:
    """Create the schema's tables once (hosts racing here queue on an advisory lock), or
    refuse a schema another version of threads wrote. A schema that is already set up is only
    read: opening a store never waits on (or takes) a lock a writer could hold."""
    if await _schema_version(conn, schema) == SCHEMA_VERSION:
        return
    async with conn.transaction():
        await conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (f"threads:{schema}",))
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        version = await _schema_version(conn, schema)
        if version is None:
            await conn.execute((_DDL + DELTAS_DDL).encode())  # one round trip for all of it
            await conn.execute(
                "INSERT INTO meta(key, value) VALUES ('schema_version', %s)", (str(SCHEMA_VERSION),)
            )
            return
        if version != SCHEMA_VERSION:
            raise unsupported_schema(version)


async def _schema_version(conn: Conn, schema: str) -> int | None:
    """The schema's recorded version, or None when it has no ``meta`` table yet."""
    cursor = await conn.execute(
        "SELECT 1 FROM information_schema.tables WHERE table_schema = %s AND table_name = 'meta'",
        (schema,),
    )
    if await cursor.fetchone() is None:
        return None
    cursor = await conn.execute("SELECT value FROM meta WHERE key = 'schema_version'")
    row = await cursor.fetchone()
    return int(row[0]) if row is not None else 0


async def _insert_receipt(
    conn: Conn, pipeline: psycopg.AsyncPipeline | None, receipt: RunReceipt
) -> None:
    cursor = await conn.execute(
        f"INSERT INTO run_receipts({RECEIPT_COLUMNS})"
        " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT DO NOTHING".encode(),
        receipt.row(),
    )
    if pipeline is not None:
        await pipeline.sync()
    if cursor.rowcount != 1:
        raise key_taken(receipt)  # rolls the append back with it


async def _branch(conn: Conn, branch_id: str) -> BranchInfo:
    cursor = await conn.execute(
        f"SELECT {BRANCH_COLUMNS} FROM branches WHERE branch_id = %s".encode(), (branch_id,)
    )
    row = await cursor.fetchone()
    if row is None:
        raise NotFoundError(f"no branch {branch_id} in this store")
    return branch_from_row(row)


async def _lease_row(
    conn: Conn, branch_id: str, now: int | None, *, lock: bool
) -> tuple[tuple[Any, ...] | None, int]:
    """The lease row (holder_id, epoch, expires_at), and "now" as the lease clock reads it (the
    injected clock's ``now``, else the database's). No row: (None, 0), which no lease passes."""
    query = _LEASE_FOR_UPDATE if lock else _LEASE
    cursor = await conn.execute(query, (now, branch_id))
    row = await cursor.fetchone()
    if row is None:
        return None, 0
    return row[:3], int(row[3])


async def _chain_epoch(conn: Conn, branch: BranchInfo) -> int:
    cursor = await conn.execute(
        "SELECT epoch FROM events WHERE branch_id = %s ORDER BY seq DESC LIMIT 1",
        (branch.branch_id,),
    )
    row = await cursor.fetchone()
    if row is not None:
        return int(row[0])
    if branch.parent_branch_id is None:
        return 0
    cursor = await conn.execute(
        "SELECT epoch FROM events WHERE branch_id = %s AND seq <= %s ORDER BY seq DESC LIMIT 1",
        (branch.parent_branch_id, branch.fork_at_seq),
    )
    row = await cursor.fetchone()
    return 0 if row is None else int(row[0])


async def _insert_artifact(conn: Conn, artifact: PendingArtifact) -> None:
    await conn.execute(INSERT_ARTIFACT, artifact_row(artifact))


async def _lines(conn: Conn, branch_id: str, through_seq: int | None) -> list[bytes]:
    cursor = conn.cursor(binary=True)
    if through_seq is None:
        await cursor.execute(
            "SELECT line FROM events WHERE branch_id = %s ORDER BY seq", (branch_id,)
        )
    else:
        await cursor.execute(
            "SELECT line FROM events WHERE branch_id = %s AND seq <= %s ORDER BY seq",
            (branch_id, through_seq),
        )
    return [bytes(line) for (line,) in await cursor.fetchall()]


async def _stored_segment(
    conn: Conn, info: BranchInfo, cut: int | None
) -> tuple[BranchInfo, bytes, list[bytes]]:
    cursor = conn.cursor(binary=True)
    await cursor.execute("SELECT header_line FROM branches WHERE branch_id = %s", (info.branch_id,))
    row = await cursor.fetchone()
    assert row is not None
    return info, bytes(row[0]), await _lines(conn, info.branch_id, cut)
