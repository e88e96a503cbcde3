"""Drill child for group commit: many branches appending at once on one store, in one process.

``python group_writer.py SPEC`` with SPEC as JSON: ``engine`` (``sqlite`` | ``postgres``),
``store`` (directory) or ``url`` + ``schema``, ``branches``, ``appends`` (per branch, a bound:
the parent kills us long before), and ``kill``: ``null`` (the parent SIGKILLs us whenever it
likes), ``"before_commit"`` (SQLite: die once a group of two or more has run every write of its
transaction but not its COMMIT), ``"in_statement"`` (Postgres, whose group is one statement: die
at a random moment of it) or ``"after_commit"`` (die once such a group's COMMIT returned,
before any of its callers is told); with one branch, SQLite commits each append in place (on the
event loop's thread) and ``"in_place_before_commit"`` / ``"in_place_after_commit"`` die around
that COMMIT instead. A kill boundary is armed once ``armed_after`` appends were acknowledged.
``late_refusals`` (optional, N > 0): before every N-th append, each branch first asks for an
event that reuses its ``thread_started``'s event id, refused only after its fence moved the
head (SQLite: its group rolls back and runs again with a savepoint per append); it prints
``refused BRANCH SEQ`` once told so.

Every line goes to stdout the moment it is true, unbuffered: ``ack BRANCH SEQ HASH`` after the
append of that event returned to its caller (so it is durable, by the store's promise),
``group N`` when a group of N appends starts committing, ``in_place`` when one append commits
in place, and ``dying BRANCH:SEQ ...`` with the members of the group (or the append) we are
about to die in.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import signal
import sys
from typing import Any

from threads.clock import SYSTEM_CLOCK
from threads.errors import StoreError
from threads.log.lines import Event, encode_event
from threads.store.protocol import Store
from threads.testing.sample_log import USER, SampleLog

TTL_MS = 600_000


ACKED = [0]  # appends acknowledged so far
ARMED_AFTER = [0]  # a kill boundary is armed once this many were


def say(line: str) -> None:
    os.write(1, (line + "\n").encode())


def armed(kill: str | None, size: int) -> bool:
    return kill is not None and size >= 2 and ACKED[0] >= ARMED_AFTER[0]


def die(members: list[str]) -> None:
    say("dying " + " ".join(members))
    os.kill(os.getpid(), signal.SIGKILL)


def member_names(events: list[Any]) -> list[str]:
    return [f"{e.branch_id}:{e.seq}" for e in events]


def watch_sqlite(kill: str | None) -> None:
    """Report groups and die at the asked boundary, around SQLite's group step."""
    import threads.store.sqlite.store as engine

    real = engine.commit_group

    def group(conn: Any, writes: list[Any]) -> Any:
        say(f"group {len(writes)}")
        if not armed(kill, len(writes)):
            return real(conn, writes)
        names = [w.members for w in writes]
        if kill == "before_commit":
            def last(c: Any, write: Any = writes[-1]) -> Any:
                result = write(c)
                die([n for ns in names for n in ns])  # every write ran; no COMMIT yet
                return result

            writes = [*writes[:-1], last]
        outcomes = real(conn, writes)
        die([n for ns in names for n in ns])  # committed; nobody told
        return outcomes

    engine.commit_group = group
    real_in_place = engine.commit_begun

    def in_place(conn: Any, write: Any) -> Any:
        say("in_place")
        if not (kill or "").startswith("in_place_") or ACKED[0] < ARMED_AFTER[0]:
            return real_in_place(conn, write)
        names = appending.get()
        if kill == "in_place_before_commit":
            def last(c: Any) -> Any:
                result = write(c)
                die(names)  # every write of the append ran; no COMMIT yet
                return result

            return real_in_place(conn, last)
        outcome = real_in_place(conn, write)
        die(names)  # committed; its caller not told
        return outcome

    engine.commit_begun = in_place

    # Tag each append's write closure with its events' names, for ``dying``.
    appending: contextvars.ContextVar[list[str]] = contextvars.ContextVar("appending")
    real_append = engine.SQLiteStore.append
    real_grouped = engine.StoreThread.run_grouped

    async def append(self: Any, branch_id: str, events: Any, **kwargs: Any) -> None:
        appending.set(member_names(list(events)))  # this task's own context
        await real_append(self, branch_id, events, **kwargs)

    def grouped(self: Any, item: Any, batch: Any) -> Any:
        _files, write = item  # the append's artifact files, and its write closure
        write.members = appending.get()
        return real_grouped(self, item, batch)

    engine.SQLiteStore.append = append  # type: ignore[method-assign]
    engine.StoreThread.run_grouped = grouped  # type: ignore[method-assign]


def watch_postgres(kill: str | None) -> None:
    """Report groups and die at the asked boundary around Postgres's group statement:
    ``in_statement`` dies from a timer thread a random 0-2 ms after the statement starts
    (sent or not yet, running, committed or not; a statement back sooner waits for it), so the
    parent sees a group either wholly stored or not at all; ``after_commit`` once it returned
    committed."""
    import random
    import threading

    import threads.store.postgres.group as group_module

    real_commit = group_module.GroupCommitter._commit
    real_statement = group_module.GroupStatement
    starting = threading.Event()

    def die_soon(names: list[str]) -> None:
        starting.wait()
        threading.Event().wait(random.uniform(0, 0.002))
        die(names)

    class Statement(real_statement):  # type: ignore[misc, valid-type]
        def __init__(self, *args: Any) -> None:
            super().__init__(*args)
            starting.set()  # the group's statement is sent next

    async def commit(self: Any, group: list[Any]) -> Any:
        say(f"group {len(group)}")
        names = [n for request, _ in group for n in member_names(list(request.events))]
        killer = None
        if kill == "in_statement" and armed(kill, len(group)):
            starting.clear()  # set again by this group's statement (or the other in flight)
            killer = threading.Thread(target=die_soon, args=(names,), daemon=True)
            killer.start()
        verdicts = await real_commit(self, group)
        if killer is not None:
            # The statement returned before the kill: no caller of the group is told, and so
            # none of its branches appends again, until the kill has come (a timer held up
            # past the whole statement would otherwise let later groups commit first).
            starting.set()
            killer.join()
        if kill == "after_commit" and armed(kill, len(group)) and not any(verdicts):
            die(names)
        return verdicts

    group_module.GroupCommitter._commit = commit  # type: ignore[method-assign]
    group_module.GroupStatement = Statement  # type: ignore[misc]


def open_store(spec: dict[str, Any]) -> Store:
    if spec["engine"] == "sqlite":
        from threads.store.sqlite import sqlite

        return sqlite(spec["store"])
    from threads.store.postgres import postgres

    return postgres(spec["url"], schema=spec["schema"], min_size=4, max_size=4)


def reusing_first_id(log: SampleLog, event: Event) -> Event:
    """``event`` (same seq, chain and data) under the event id of the branch's first event."""
    return encode_event(
        seq=event.seq, event_id=log.events[0].event_id, thread_id=event.thread_id,
        branch_id=event.branch_id, epoch=event.epoch, type=event.type, time=event.time,
        actor=event.actor, prev_hash=event.prev_hash, data=event.data,
    )


async def write_branch(
    store: Store, n: int, appends: int, late_refusals: int = 0
) -> None:
    log = SampleLog(SYSTEM_CLOCK)
    await store.create_branch(log.header, tenant_id="drill")
    lease = await store.acquire_lease(log.header.branch_id, f"group-writer-{n}", TTL_MS)
    log.epoch = lease.epoch
    event = log.started()
    for i in range(appends):
        if late_refusals and i % late_refusals == late_refusals - 1:
            doomed = reusing_first_id(log, event)
            try:
                await store.append(
                    log.header.branch_id, [doomed], expected_seq=event.seq - 1, lease=lease
                )
            except StoreError as exc:
                if exc.code != "invalid_argument":
                    raise
                say(f"refused {event.branch_id} {event.seq}")
            else:
                raise AssertionError("an event reusing an event id was stored")
        await store.append(log.header.branch_id, [event], expected_seq=event.seq - 1, lease=lease)
        say(f"ack {event.branch_id} {event.seq} {event.hash}")
        ACKED[0] += 1
        event = log.add("user_input", {"source": "api", "text": f"message {i} of {n}"}, USER)


async def main(spec: dict[str, Any]) -> None:
    ARMED_AFTER[0] = spec["armed_after"]
    (watch_sqlite if spec["engine"] == "sqlite" else watch_postgres)(spec["kill"])
    store = open_store(spec)
    late = spec.get("late_refusals", 0)
    writers = [write_branch(store, n, spec["appends"], late) for n in range(spec["branches"])]
    await asyncio.gather(*writers)
    await store.close()
    say("finished")


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
