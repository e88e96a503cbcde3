"""Group commit on Postgres: appends to different branches that wait at the same time commit in
one statement on one connection: one round trip and one transaction for the whole group.

The statement (``threads.store.postgres.append.GroupStatement``) locks every member's lease and
branch rows (``FOR UPDATE ... SKIP LOCKED``), judges each member by the checks a lone append
makes, writes the members that passed (artifacts, request deltas, events, heads) and reads their
threads' pending control items (``InboxViews``: the run's look at the next step boundary then
costs no round trip). A member refused there gets the error ``require_live`` / ``require_head``
name for its locked row. (Members whose request's base this process does not know yet cost the
group two more round trips before the statement, reading the base from the branch's head
unlocked: a base read from a head that then moved belongs to a member the statement refuses.)
Invariants: a refused member gets its own error and the others commit; a member whose rows
another session holds locked is not waited for in the group (it runs alone, where it waits as a
lone append always did); a group holds at most one append per branch, since a group's
reads do not see its own writes; when the group's statement fails (a constraint, a lost
connection) nothing of it was written, or, for a connection lost once it was sent, it may have
landed as a whole: every member is then settled by the lone append, told which, so each caller
hears its own outcome; no caller is answered before the statement holding its writes returned
(committed). Nothing waits for a group to fill: a group is whatever waited while the groups in
flight (at most ``IN_FLIGHT``, one connection each) committed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import psycopg

from threads.errors import NotFoundError, StoreError
from threads.store.control_items import InboxViews, by_thread
from threads.store.postgres.append import AppendRequest, GroupStatement
from threads.store.postgres.deltas import PostgresDeltas
from threads.store.rows import require_head, require_live

Conn = psycopg.AsyncConnection[tuple[Any, ...]]

MAX_GROUP = 64  # most appends in one transaction
IN_FLIGHT = 2  # groups committing at once (each on its own pooled connection)


# How a member left the group: committed (None), refused (its error), or to be run alone
# (``_Alone``: its rows were locked elsewhere, or the group's statement failed).
@dataclass(frozen=True, slots=True)
class _Alone:
    maybe_landed: bool  # the group's statement was sent, and the connection was lost after


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
        sent = False
        try:
            async with self._connection() as conn:
                planned = [p for r in requests if (p := r.requests) and p.rows is None]
                if planned:  # bases this process does not know: looked up for all at once
                    async with conn.pipeline() as pipeline:
                        await self._deltas.resolve(conn, pipeline, planned)
                reads_inbox = self._inbox.active
                statement = GroupStatement(requests, self._now(), reads_inbox)
                sent = True
                cursor = await conn.execute(statement.query, statement.params)
                rows = await cursor.fetchall()
        except (StoreError, psycopg.Error) as exc:
            lost = sent and isinstance(exc, StoreError) and exc.code == "store_unavailable"
            return [_Alone(lost)] * len(requests)
        heads, inbox = GroupStatement.read(rows)
        committed = []
        for index, request in enumerate(requests):
            locked = heads.get(request.branch_id)
            if locked is None:
                continue  # locked by another session, or never leased: alone
            row, passed = locked
            if passed:
                verdicts[index] = None
                committed.append(request)
            else:
                # The statement's checks are ``_judge``'s, so it names the refusal; were they
                # ever to disagree, the lone append judges (nothing of this member was written).
                verdicts[index] = _judge(request, row) or _Alone(False)
        self._committed(committed, inbox if reads_inbox else None)
        return verdicts

    def _committed(
        self, requests: list[AppendRequest], inbox: list[tuple[Any, ...]] | None
    ) -> None:
        """What the store remembers of appends that committed: their requests and heads, and
        the pending control items their statement read. Nothing here can undo a commit."""
        for request in requests:
            self._deltas.committed(request.branch_id, request.events, request.requests)
        if inbox is None:
            return
        pending = by_thread(inbox)
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
    except (StoreError, NotFoundError) as exc:
        return exc
    return None
