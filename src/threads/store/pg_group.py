"""Group commit on Postgres: appends to different branches that wait at the same time commit in
one transaction on one connection, in two round trips for the whole group.

Round trip 1 locks and reads every member's lease and branch rows (``FOR UPDATE ... SKIP
LOCKED``), and each member is judged by the checks a lone append makes (``require_live``,
``require_head``); round trip 2 writes the members that passed (artifacts, request deltas,
events, heads), reads their threads' pending control items (``InboxViews``: the run's look at
the next step boundary then costs no round trip) and commits. (A member whose request's base
this process does not know yet costs the group two more round trips between them:
``threads.store.postgres_deltas``.)
Invariants: a refused member gets its own error and the others commit; a member whose rows
another session holds locked is not waited for in the group (it runs alone, where it waits as a
lone append always did); a group holds at most one append per branch, since a group's
reads do not see its own writes; when the group's transaction fails (a constraint, a lost
connection) the members that passed are settled by the lone append, told whether the commit may
have landed, so each caller hears its own outcome; no caller is answered before the ``COMMIT``
holding its writes returned. Nothing waits for a group to fill: a group is whatever waited
while the groups in flight (at most ``IN_FLIGHT``, one connection each) committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import psycopg

from threads.errors import NotFound, StoreError
from threads.log.lines import Event
from threads.store.control_items import PENDING_OF_ANY, InboxViews, by_thread, sql
from threads.store.postgres_deltas import INSERT_DELTAS, Planned, PostgresDeltas
from threads.store.protocol import Lease, PendingArtifact
from threads.store.receipts import RunReceipt
from threads.store.rows import artifact_ref, event_rows, require_head, require_live

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

MAX_GROUP = 64  # most appends in one transaction
IN_FLIGHT = 2  # groups committing at once (each on its own pooled connection)

# The database's clock in Unix ms; ``COALESCE`` lets an injected test clock's reading win.
DB_NOW = "(extract(epoch from clock_timestamp()) * 1000)::bigint"
LEASE_NOW = f"COALESCE(%s::bigint, {DB_NOW})"
INSERT_EVENTS = (
    "INSERT INTO events(branch_id, seq, event_id, type, type_version, critical, epoch, line)"
    " VALUES (%s, %s, %s, %s, %s, %s, %s, %s)"
)
INSERT_ARTIFACT = (
    "INSERT INTO artifacts(sha256, media_type, bytes, data) VALUES (%s, %s, %s, %s)"
    " ON CONFLICT (sha256) DO NOTHING"
)
_LOCK_HEADS = (
    f"SELECT l.branch_id, l.holder_id, l.epoch, l.expires_at, {LEASE_NOW},"
    " b.head_seq, b.head_hash, b.state"
    " FROM leases l JOIN branches b ON b.branch_id = l.branch_id"
    " WHERE l.branch_id = ANY(%s) FOR UPDATE OF l, b SKIP LOCKED"
)
_PENDING_OF_ANY = sql(PENDING_OF_ANY, "%s")
_MOVE_HEADS = (
    "UPDATE branches b SET head_seq = v.seq, head_hash = v.hash"
    " FROM unnest(%s::text[], %s::bigint[], %s::text[]) AS v(branch_id, seq, hash)"
    " WHERE b.branch_id = v.branch_id"
)


@dataclass(frozen=True, slots=True)
class AppendRequest:
    """One ``Store.append`` call, as its arguments."""

    branch_id: str
    events: Sequence[Event]
    expected_seq: int
    lease: Lease
    artifacts: Sequence[PendingArtifact] = ()  # all but requests, which go in ``requests``
    receipt: RunReceipt | None = None
    consumes: Sequence[str] = ()  # inbox ids of control items this append applies
    finishes_fork: bool = False  # a new child's fork event: the branch is forking, not ready
    requests: Planned | None = None  # request artifacts, kept as deltas


def artifact_row(artifact: PendingArtifact) -> tuple[str, str, int, bytes]:
    ref = artifact_ref(artifact.data, artifact.media_type)
    return ref["sha256"], artifact.media_type, len(artifact.data), artifact.data


# How a member left the group: committed (None), refused (its error), or to be run alone
# (``_Alone``: its rows were locked elsewhere, or the group's transaction failed).
@dataclass(frozen=True, slots=True)
class _Alone:
    maybe_landed: bool  # the group's writes were sent, and the connection was lost after


_Verdict = BaseException | _Alone | None


class GroupCommitter:
    """Queues a store's appends and commits them in groups (see the module docstring)."""

    def __init__(
        self,
        connection: Callable[[], AbstractAsyncContextManager[Conn]],
        now: Callable[[], int | None],
        alone: Callable[[AppendRequest, bool], Awaitable[None]],
        deltas: PostgresDeltas,
        inbox: InboxViews,
    ) -> None:
        self._connection = connection  # a pooled connection; faults become coded errors
        self._now = now  # the injected lease clock's reading, None for the database's
        self._alone = alone  # the lone append: (request, maybe_landed)
        self._deltas = deltas
        self._inbox = inbox  # what each committed group read of its threads' pending items
        self._waiting: list[tuple[AppendRequest, asyncio.Future[None]]] = []
        self._committers: set[asyncio.Task[None]] = set()
        self._lone: set[asyncio.Task[None]] = set()  # appends the group handed back

    async def append(self, request: AppendRequest) -> None:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._waiting.append((request, future))
        if len(self._committers) < IN_FLIGHT:
            task = loop.create_task(self._commit_waiting())
            self._committers.add(task)
            task.add_done_callback(self._committers.discard)
        await future

    async def _commit_waiting(self) -> None:
        try:
            while self._waiting:
                group = self._take()
                try:
                    verdicts = await self._commit(group)
                except BaseException as exc:  # this task was cancelled or broke: tell them why
                    verdicts = [exc] * len(group)
                for (request, future), verdict in zip(group, verdicts, strict=True):
                    if isinstance(verdict, _Alone):
                        # Its own task: a lone append may wait on a lock; the next group must
                        # not.
                        task = asyncio.get_running_loop().create_task(
                            self._run_alone(request, future, verdict.maybe_landed)
                        )
                        self._lone.add(task)
                        task.add_done_callback(self._lone.discard)
                    else:
                        _settle(future, verdict)
        finally:
            # Out of the count the moment it stops looking (not in its done callback, which
            # runs later): an append queued in between must start a committer of its own.
            current = asyncio.current_task()
            if current is not None:
                self._committers.discard(current)

    async def _run_alone(
        self, request: AppendRequest, future: asyncio.Future[None], maybe_landed: bool
    ) -> None:
        try:
            await self._alone(request, maybe_landed)
        except BaseException as exc:
            _settle(future, exc)
        else:
            _settle(future, None)

    def _take(self) -> list[tuple[AppendRequest, asyncio.Future[None]]]:
        """The first waiting appends, at most one per branch and ``MAX_GROUP`` in all."""
        group: list[tuple[AppendRequest, asyncio.Future[None]]] = []
        rest: list[tuple[AppendRequest, asyncio.Future[None]]] = []
        branches: set[str] = set()
        for member in self._waiting:
            request = member[0]
            if len(group) < MAX_GROUP and request.branch_id not in branches:
                branches.add(request.branch_id)
                group.append(member)
            else:
                rest.append(member)
        self._waiting = rest
        return group

    async def _commit(
        self, group: list[tuple[AppendRequest, asyncio.Future[None]]]
    ) -> list[_Verdict]:
        requests = [request for request, _ in group]
        verdicts: list[_Verdict] = [_Alone(False)] * len(requests)
        passed: list[int] = []
        written = False
        inbox: psycopg.AsyncCursor[Any] | None = None
        try:
            async with (
                self._connection() as conn,
                conn.pipeline() as pipeline,
                conn.transaction(),
            ):
                cursor = await conn.execute(
                    _LOCK_HEADS, (self._now(), [r.branch_id for r in requests])
                )
                # Between the round trips the session is "idle in transaction": a host frozen
                # here loses its row locks to the server's idle timeout.
                await pipeline.sync()
                rows = {row[0]: row[1:] for row in await cursor.fetchall()}
                for index, request in enumerate(requests):
                    row = rows.get(request.branch_id)
                    if row is None:
                        continue  # locked by another session, or never leased: alone
                    verdicts[index] = _judge(request, row)
                    if verdicts[index] is None:
                        passed.append(index)
                if passed:
                    await self._deltas.resolve(
                        conn, pipeline, [p for i in passed if (p := requests[i].requests)]
                    )
                    written = True
                    await _write(conn, [requests[i] for i in passed])
                    if self._inbox.active:  # read before the COMMIT, in the same round trip
                        threads = sorted({requests[i].events[-1].thread_id
                                          for i in passed if requests[i].events})
                        inbox = await conn.execute(_PENDING_OF_ANY, (threads,))
        except (StoreError, psycopg.Error) as exc:
            lost = written and isinstance(exc, StoreError) and exc.code == "store_unavailable"
            for index in passed:
                verdicts[index] = _Alone(lost)
            return verdicts
        await self._committed([requests[i] for i in passed], inbox)
        return verdicts

    async def _committed(
        self, requests: list[AppendRequest], inbox: psycopg.AsyncCursor[Any] | None
    ) -> None:
        """What the store remembers of appends that committed: their requests and heads, and
        the pending control items their transaction read. Nothing here can undo a commit."""
        for request in requests:
            self._deltas.committed(request.branch_id, request.events, request.requests)
        if inbox is None:
            return
        try:
            rows = await inbox.fetchall()  # already here: the pipeline brought them
        except psycopg.Error:
            return  # not noted: the run's look asks the store
        pending = by_thread(rows)
        for request in requests:
            if request.events:
                head = request.events[-1]
                self._inbox.note(request.branch_id, head.seq, head.thread_id,
                                 pending.get(head.thread_id, []))


def _settle(future: asyncio.Future[None], error: BaseException | None) -> None:
    if future.cancelled():
        return
    if error is None:
        future.set_result(None)
    elif isinstance(error, asyncio.CancelledError):
        future.cancel()
    else:
        future.set_exception(error)


def _judge(request: AppendRequest, row: tuple[Any, ...]) -> BaseException | None:
    """``row`` = (holder_id, epoch, expires_at, now, head_seq, head_hash, state), locked."""
    try:
        require_live(row[:3], request.lease, int(row[3]))
        require_head(request.branch_id, row[4:], request.expected_seq, request.events)
    except (StoreError, NotFound) as exc:
        return exc
    return None


async def _write(conn: Conn, requests: list[AppendRequest]) -> None:
    """Round trip 2's statements: every passed member's artifacts, events and new head."""
    artifacts = {row[0]: row for r in requests for row in map(artifact_row, r.artifacts)}
    cursor = conn.cursor()
    if artifacts:
        await cursor.executemany(INSERT_ARTIFACT, sorted(artifacts.values()))
    deltas = {row[0]: row for r in requests if r.requests for row in r.requests.rows or ()}
    if deltas:  # in one order, as the artifacts: two groups never wait on each other in a loop
        await cursor.executemany(INSERT_DELTAS, [deltas[sha] for sha in sorted(deltas)])
    events = [row for r in requests for row in event_rows(r.branch_id, r.events)]
    if events:
        await cursor.executemany(INSERT_EVENTS, events)
    moved = [r for r in requests if r.events]
    if moved:
        await conn.execute(
            _MOVE_HEADS,
            (
                [r.branch_id for r in moved],
                [r.events[-1].seq for r in moved],
                [r.events[-1].hash for r in moved],
            ),
        )
