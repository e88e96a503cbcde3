"""Control items (``threads.store.controls``) in a Postgres store: what differs from SQLite's.

Once the inbox table is known to be there, grouped appends read their threads' pending items
before their ``COMMIT`` (``threads.store.postgres.group``), and a look ``as_of`` such an append
is answered from that read. Other looks of many threads that wait at the same time are one query
(``_Looks``): each is answered by a read that started after it was asked.
"""

from __future__ import annotations

import asyncio
import weakref

from threads.store.control_items import ControlItem, by_thread
from threads.store.controls import StoreControls
from threads.store.layout import INBOX
from threads.store.postgres.provider_tables import connection
from threads.store.postgres.store import PostgresStore
from threads.store.statements import PENDING_OF_ANY, POSTGRES

_TABLES = (INBOX,)


class PostgresControls(StoreControls):
    """``StoreControls``, with looks that wait together read in one query (``_Looks``)."""

    store: PostgresStore

    def __init__(self, store: PostgresStore) -> None:
        super().__init__(store)

    async def _look(self, thread_id: str) -> list[ControlItem]:
        looks = _LOOKS.get(self.store)
        if looks is None:
            looks = _LOOKS[self.store] = _Looks(self.store)
        return await looks.look(thread_id)


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
_PENDING_OF_ANY = POSTGRES.render(PENDING_OF_ANY).encode()
