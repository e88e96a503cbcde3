"""Group commit on SQLite: appends to different branches that queued up together on the store
thread commit in one transaction, so one fsync makes all of them durable.

Invariants: each append keeps every check it makes alone (lease and epoch, expected head,
branch state) and runs them and its writes after the appends before it in the group, exactly as
if it ran alone right after them; a refused append gets its own error while the others commit,
and nothing of it is committed. Its writes begin with the fence, the statement that moves its
branch's head, so an append refused there has changed no row (``total_changes``) and leaves
nothing to undo; one refused after changing rows (a reused event id) has the group run again
with each append inside its own savepoint, where it is rolled back alone. Savepoints are thus
paid for only by a group that needs one (two statements per append otherwise). When the
transaction as a whole fails (its ``COMMIT``, or a fault SQLite answers by rolling everything
back) nothing of the group was committed, and each append runs again in a transaction of its
own, so every caller hears its own outcome. No caller is answered before the ``COMMIT``
holding its writes returned (``synchronous=FULL``: the WAL is on disk).

An append with no group to join (the process's only writer, nothing queued) commits on its
caller's thread instead (``begin_at_once`` + ``commit_begun``), on a connection of its own that
never waits for a lock: the same write in a transaction of its own, begun only if no other
process holds the write lock (else it waits its turn on the store thread, so the caller's event
loop never waits for another process).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from threads.store.faults import sqlite_fault
from threads.store.sqlite.worker import Outcome

T = TypeVar("T")

Write = Callable[[sqlite3.Connection], Any]


def in_transaction(
    conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T], begin: str
) -> T:
    """Run ``fn`` in one transaction opened with ``begin``; committed, or rolled back."""
    conn.execute(begin)
    return _committed(conn, fn)


def _committed(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
    """``fn`` run in the transaction open on ``conn``, then committed; rolled back if either
    raises."""
    try:
        result = fn(conn)
        conn.execute("COMMIT")
    except BaseException:
        # A failed COMMIT (busy, disk full, I/O error) leaves the transaction open: roll it
        # back, or every later BEGIN on this connection fails.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
    return result


def begin_at_once(conn: sqlite3.Connection) -> bool:
    """``BEGIN IMMEDIATE`` on a connection that never waits for a lock (busy timeout 0): False,
    with nothing begun, while another connection holds the write lock."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as exc:
        if sqlite_fault(exc).code == "store_busy":
            return False
        raise
    return True


def commit_begun(conn: sqlite3.Connection, write: Write) -> Outcome:
    """``write`` in the transaction ``begin_at_once`` opened: its outcome, committed or rolled
    back."""
    try:
        return _committed(conn, write), None
    except BaseException as exc:  # handed to that append's caller
        return None, exc


def commit_group(conn: sqlite3.Connection, writes: Sequence[Write]) -> list[Outcome]:
    """Run ``writes`` in order in one ``BEGIN IMMEDIATE`` transaction; one outcome (result or
    exception) per write. A write that fails having changed no row (its fence refused) is
    answered with its error and the group goes on: there is nothing of it to undo. One that
    fails after changing rows (a reused event id) can only be undone by a savepoint, so the
    group is rolled back and runs again with each write in its own (``_in_savepoint``)."""
    if len(writes) == 1:
        return [_alone(conn, writes[0])]
    outcomes = _grouped(conn, writes, _plainly)
    if outcomes is None:
        outcomes = _grouped(conn, writes, _each_in_savepoint)
    assert outcomes is not None  # ``_each_in_savepoint`` always answers
    return outcomes


def _grouped(
    conn: sqlite3.Connection,
    writes: Sequence[Write],
    run: Callable[[sqlite3.Connection, Sequence[Write]], list[Outcome] | None],
) -> list[Outcome] | None:
    """``run`` the group inside one ``BEGIN IMMEDIATE`` ... ``COMMIT``; None (rolled back)
    when ``run`` says the group needs savepoints. When the transaction as a whole fails,
    nothing of it was committed and each write runs again alone."""
    try:
        conn.execute("BEGIN IMMEDIATE")
    except BaseException as exc:  # busy past the timeout, I/O: no write of the group ran
        return [(None, exc)] * len(writes)
    try:
        outcomes = run(conn, writes)
        conn.execute("COMMIT" if outcomes is not None else "ROLLBACK")
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        return [_alone(conn, write) for write in writes]
    return outcomes


def _plainly(conn: sqlite3.Connection, writes: Sequence[Write]) -> list[Outcome] | None:
    """Each write in turn, no savepoints: None as soon as one fails having changed rows."""
    outcomes: list[Outcome] = []
    for write in writes:
        changes = conn.total_changes
        try:
            outcomes.append((write(conn), None))
        except Exception as exc:
            if not conn.in_transaction:  # SQLite rolled the whole transaction back
                raise
            if conn.total_changes != changes:
                return None
            outcomes.append((None, exc))
    return outcomes


def _each_in_savepoint(conn: sqlite3.Connection, writes: Sequence[Write]) -> list[Outcome]:
    """Each write in its savepoint: a refused one is rolled back to it, alone."""
    return [_in_savepoint(conn, write) for write in writes]


def _in_savepoint(conn: sqlite3.Connection, write: Write) -> Outcome:
    conn.execute("SAVEPOINT one_append")
    try:
        result = write(conn)
    except Exception as exc:
        if not conn.in_transaction:  # SQLite rolled the whole transaction back (full, I/O)
            raise
        conn.execute("ROLLBACK TO one_append")
        conn.execute("RELEASE one_append")
        return None, exc
    conn.execute("RELEASE one_append")
    return result, None


def _alone(conn: sqlite3.Connection, write: Write) -> Outcome:
    try:
        return in_transaction(conn, write, "BEGIN IMMEDIATE"), None
    except BaseException as exc:  # handed to that append's caller
        return None, exc
