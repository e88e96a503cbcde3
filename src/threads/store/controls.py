"""Control items in a store's ``inbox`` table (``threads.store.control_items`` says what they
are), for every engine: ``StoreControls``, the view ``threads.store.capabilities.controls_of``
gives of a store.
"""

from __future__ import annotations

from threads.log.event_types import Principal as WirePrincipal
from threads.store import flows, statements
from threads.store.control_items import (
    Command,
    ControlItem,
    consume_args,
    controls_in,
    insert_args,
    waiting_key,
)
from threads.store.core import StoreCore
from threads.store.flows import Access, Flow
from threads.store.layout import INBOX
from threads.store.statements import Dialect, Query

_TABLES = (INBOX,)


def _queue(
    dialect: Dialect, thread_id: str, *, tenant_id: str, principal: WirePrincipal,
    command: str, now: int,
) -> Flow[str]:
    if dialect.locks:  # two hosts queueing one command for one thread queue it once
        yield Query(statements.ADVISORY_LOCK, (f"threads:inbox:{thread_id}",))
    waiting = waiting_key((yield from flows.rows(statements.PENDING, thread_id)), command)
    if waiting is not None:
        return waiting
    key, args = insert_args(tenant_id, thread_id, principal, command, now)
    yield Query(statements.INSERT_CONTROL, args)
    return key


def _pending(thread_id: str) -> Flow[list[ControlItem]]:
    return controls_in((yield from flows.rows(statements.PENDING, thread_id)))


class StoreControls:
    """A store's control items in its ``inbox`` table (a Postgres store creates the table on
    first use). Queueing reads the thread's waiting items and inserts in one write transaction
    (SQLite's ``BEGIN IMMEDIATE``; an advisory lock on the thread first on Postgres), so two
    processes queueing one command for one thread queue it once. An engine may look at the
    inbox its own way (``_look``)."""

    def __init__(self, store: StoreCore) -> None:
        self.store = store

    async def queue_control(
        self, *, tenant_id: str, thread_id: str, principal: WirePrincipal, command: Command
    ) -> str:
        now, dialect = self.store.clock.now_ms(), self.store.dialect
        key = await self.store._transact(
            Access.WRITE,
            lambda: _queue(dialect, thread_id, tenant_id=tenant_id, principal=principal,
                           command=command, now=now),
            _TABLES,
        )
        self.store.inbox_seen.clear()  # what appends read before this is out of date
        return key

    async def pending_controls(
        self, thread_id: str, *, as_of: tuple[str, int] | None = None
    ) -> list[ControlItem]:
        seen = self.store.inbox_seen.at(thread_id, as_of)
        if seen is not None:
            return seen
        return await self._look(thread_id)

    async def _look(self, thread_id: str) -> list[ControlItem]:
        return await self.store._transact(Access.READ, lambda: _pending(thread_id), _TABLES)

    async def consume_control(self, inbox_id: str, seq: int) -> bool:
        args = consume_args(seq, inbox_id)
        changed = await self.store._transact(
            Access.STATEMENT, lambda: flows.changed(statements.CONSUME, *args), _TABLES
        )
        self.store.inbox_seen.clear()
        return changed == 1
