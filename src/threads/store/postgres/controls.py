"""Control items (``threads.store.control_items``) in a Postgres store's ``inbox`` table.

The table is created on first use. Queueing takes a transaction-scoped advisory lock on the
thread first, so two hosts queueing one command for one thread queue it once. Once the table is
known to be there, grouped appends read their threads' pending items before their ``COMMIT``
(``threads.store.postgres.group``), and a look ``as_of`` such an append is answered from that read.
Other looks of many threads that wait at the same time are one query (``_Looks``): each is
answered by a read that started after it was asked.
"""

from __future__ import annotations

import asyncio
import weakref
from typing import Any

from threads.store.control_items import (
    CONSUME,
    INSERT,
    PENDING,
    PENDING_OF_ANY,
    Command,
    ControlItem,
    by_thread,
    consume_args,
    insert_args,
    sql,
    waiting_key,
)
from threads.store.layout import INBOX
from threads.store.postgres.provider_tables import connection, transaction
from threads.store.postgres.store import PostgresStore

_TABLES = (INBOX,)


class PostgresControls:
    def __init__(self, store: PostgresStore) -> None:
        self.store = store

    async def queue_control(
        self, *, tenant_id: str, thread_id: str, principal: dict[str, Any], command: Command
    ) -> str:
        now = self.store.clock.now_ms()
        async with transaction(self.store, _TABLES) as conn:
            await conn.execute(
                "SELECT pg_advisory_xact_lock(hashtext(%s))", (f"threads:inbox:{thread_id}",)
            )
            cursor = await conn.execute(sql(PENDING, "%s").encode(), (thread_id,))
            waiting = waiting_key(await cursor.fetchall(), command)
            if waiting is not None:
                return waiting
            key, args = insert_args(tenant_id, thread_id, principal, command, now)
            await conn.execute(sql(INSERT, "%s").encode(), args)
        self.store.inbox_seen.clear()  # what appends read before this is out of date
        return key

    async def pending_controls(
        self, thread_id: str, *, as_of: tuple[str, int] | None = None
    ) -> list[ControlItem]:
        seen = self.store.inbox_seen.at(thread_id, as_of)
        if seen is not None:
            return seen
        looks = _LOOKS.get(self.store)
        if looks is None:
            looks = _LOOKS[self.store] = _Looks(self.store)
        return await looks.look(thread_id)

    async def consume_control(self, inbox_id: str, seq: int) -> bool:
        async with connection(self.store, _TABLES) as conn:  # one compare-and-set
            cursor = await conn.execute(sql(CONSUME, "%s").encode(), consume_args(seq, inbox_id))
        self.store.inbox_seen.clear()
        return cursor.rowcount == 1


class _Looks:
    """Looks at the inbox that wait while one is being read are read together next: one
    statement (no BEGIN/COMMIT) for all their threads."""

    def __init__(self, store: PostgresStore) -> None:
        self.store = store
        self._waiting: dict[str, list[asyncio.Future[list[ControlItem]]]] = {}
        self._reader: asyncio.Task[None] | None = None

    async def look(self, thread_id: str) -> list[ControlItem]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[ControlItem]] = loop.create_future()
        self._waiting.setdefault(thread_id, []).append(future)
        if self._reader is None:
            self._reader = loop.create_task(self._read_waiting())
        return await future

    async def _read_waiting(self) -> None:
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, {}
                try:
                    async with connection(self.store, _TABLES) as conn:
                        cursor = await conn.execute(_PENDING_OF_ANY, (sorted(batch),))
                        pending = by_thread(await cursor.fetchall())
                    self.store.inbox_seen.active = True  # the table is there: appends read it
                except BaseException as exc:  # each look hears why
                    for futures in batch.values():
                        for future in futures:
                            if future.done():
                                continue
                            if isinstance(exc, Exception):
                                future.set_exception(exc)
                            else:
                                future.cancel()
                    if not isinstance(exc, Exception):
                        raise
                    continue
                for thread_id, futures in batch.items():
                    for future in futures:
                        if not future.done():
                            future.set_result(list(pending.get(thread_id, ())))
        finally:
            self._reader = None


_LOOKS: weakref.WeakKeyDictionary[PostgresStore, _Looks] = weakref.WeakKeyDictionary()
_PENDING_OF_ANY = sql(PENDING_OF_ANY, "%s").encode()
