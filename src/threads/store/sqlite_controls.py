"""Control items (``threads.store.control_items``) in a SQLite store's ``inbox`` table.

Queueing reads the thread's waiting items and inserts in one ``BEGIN IMMEDIATE`` transaction,
so two processes queueing one command for one thread queue it once.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from threads.log.ids import uuid7
from threads.store.control_items import (
    CONSUME,
    INSERT,
    PENDING,
    Command,
    ControlItem,
    control_from_row,
    item_bytes,
)
from threads.store.sqlite import SQLiteStore


class SQLiteControls:
    def __init__(self, store: SQLiteStore) -> None:
        self.store = store

    async def queue_control(
        self, *, tenant_id: str, thread_id: str, principal: dict[str, Any], command: Command
    ) -> str:
        now = self.store.clock.now_ms()

        def queue(conn: sqlite3.Connection) -> str:
            for row in conn.execute(PENDING, (thread_id,)):
                waiting = control_from_row(tuple(row))
                if waiting is not None and waiting.command == command:
                    return waiting.item_key
            key = uuid7(now)
            conn.execute(INSERT, (
                uuid7(now), tenant_id, key, key, thread_id,
                item_bytes(principal, thread_id, key, command), now,
            ))
            return key

        return await self.store._run(self.store._txn(queue))

    async def pending_controls(self, thread_id: str) -> list[ControlItem]:
        def read(conn: sqlite3.Connection) -> list[ControlItem]:
            items = (control_from_row(tuple(r)) for r in conn.execute(PENDING, (thread_id,)))
            return [i for i in items if i is not None]

        return await self.store._run(read)

    async def consume_control(self, inbox_id: str, seq: int) -> bool:
        def consume(conn: sqlite3.Connection) -> bool:
            return conn.execute(CONSUME, (seq, inbox_id)).rowcount == 1

        return await self.store._run(self.store._txn(consume))
