"""Control items (``threads.store.control_items``) in a SQLite store's ``inbox`` table.

Queueing reads the thread's waiting items and inserts in one ``BEGIN IMMEDIATE`` transaction,
so two processes queueing one command for one thread queue it once.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from threads.store.control_items import (
    CONSUME,
    INSERT,
    PENDING,
    Command,
    ControlItem,
    consume_args,
    controls_in,
    insert_args,
    waiting_key,
)
from threads.store.sqlite.store import SQLiteStore


class SQLiteControls:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def queue_control(
        self, *, tenant_id: str, thread_id: str, principal: dict[str, Any], command: Command
    ) -> str:
        now = self.store.clock.now_ms()

        def queue(conn: sqlite3.Connection) -> str:
            waiting = waiting_key(conn.execute(PENDING, (thread_id,)), command)
            if waiting is not None:
                return waiting
            key, args = insert_args(tenant_id, thread_id, principal, command, now)
            conn.execute(INSERT, args)
            self.store.inbox_seen.clear()  # what appends read before this is out of date
            return key

        return await self.store._run(self.store._txn(queue))

    async def pending_controls(
        self, thread_id: str, *, as_of: tuple[str, int] | None = None
    ) -> list[ControlItem]:
        seen = self.store.inbox_seen.at(thread_id, as_of)
        if seen is not None:
            return seen

        def read(conn: sqlite3.Connection) -> list[ControlItem]:
            return controls_in(conn.execute(PENDING, (thread_id,)))

        return await self.store._read(read)

    async def consume_control(self, inbox_id: str, seq: int) -> bool:
        def consume(conn: sqlite3.Connection) -> bool:
            self.store.inbox_seen.clear()
            return conn.execute(CONSUME, consume_args(seq, inbox_id)).rowcount == 1

        return await self.store._run(self.store._txn(consume))
