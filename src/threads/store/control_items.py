"""Durable control items: a cancel asked of a thread that another process is running.

A control (today ``cancel``) that can't take the branch's lease because another process holds it
is queued as an ``inbox`` row instead of being refused: the row id the database assigns
(``inbox_id INTEGER PRIMARY KEY``), ``channel="api"``, ``installation_id="local"``, ``item_key =
delivery_id`` = a fresh UUIDv7, and ``item`` the canonical JSON of ``{kind:"control", principal,
address:<thread_id>, item_key, command}`` (the spellings the TypeScript implementation reads).
An item's ``inbox_id`` travels as the decimal text of that row id (``ControlItem.inbox_id``,
``Store.append(consumes=...)``). While an unconsumed item with the same command waits for a
thread, queueing again answers with that item, never a second one. The holder looks at each step
boundary and applies an item in the append that records it, setting ``consumed_seq`` by
compare-and-set (``consumed_seq IS NULL``) in that transaction: a lost compare-and-set rolls the
append back (``control_consumed``), so an item is applied once. Authority is checked before an
item is queued; applying never checks again.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from threads.errors import StoreError
from threads.log.canonical import canonical
from threads.log.event_types import Principal as WirePrincipal
from threads.log.ids import uuid7
from threads.log.json_types import JsonObject

CONTROL_CHANNEL = "api"
CONTROL_INSTALLATION = "local"
Command = Literal["cancel", "stop_when_idle"]

@dataclass(frozen=True, slots=True)
class ControlItem:
    inbox_id: str
    tenant_id: str
    thread_id: str
    item_key: str
    command: str
    principal: JsonObject
    received_at: int


def item_bytes(principal: WirePrincipal, thread_id: str, item_key: str, command: str) -> bytes:
    return canonical({
        "address": thread_id,
        "command": command,
        "item_key": item_key,
        "kind": "control",
        "principal": principal,
    })


def control_from_row(row: tuple[Any, ...]) -> ControlItem | None:
    """The control item of an inbox row; None for a row that is not one (another kind)."""
    inbox_id, tenant_id, thread_id, raw, received_at = row
    try:
        item = json.loads(bytes(raw))
    except ValueError:
        return None
    if not isinstance(item, dict) or item.get("kind") != "control":
        return None
    return ControlItem(
        str(inbox_id), str(tenant_id), str(thread_id), str(item.get("item_key")),
        str(item.get("command")), dict(item.get("principal") or {}), int(received_at),
    )


def controls_in(rows: Iterable[tuple[Any, ...]]) -> list[ControlItem]:
    """The control items among ``PENDING``'s rows."""
    items = (control_from_row(tuple(row)) for row in rows)
    return [item for item in items if item is not None]


class InboxViews:
    """What the transaction of a store's own append read of its thread's pending items, by
    branch and the head seq that append made, so the run's look at the step boundary after it
    (``pending_controls(as_of=...)``) costs no round trip; what another process queues after
    that read is seen at the next boundary. An append that rolls back leaves a view no fold
    asks about (its seq never becomes the head). ``active``: the engine's appends read the
    inbox (a Postgres store once it knows the table is there)."""

    def __init__(self, branches: int = 1024, *, active: bool = True) -> None:
        self._views: dict[str, tuple[int, str, list[ControlItem]]] = {}
        self._branches = branches
        self.active = active

    def note(self, branch_id: str, seq: int, thread_id: str, items: list[ControlItem]) -> None:
        self._views.pop(branch_id, None)
        self._views[branch_id] = (seq, thread_id, items)
        if len(self._views) > self._branches:
            del self._views[next(iter(self._views))]

    def at(self, thread_id: str, as_of: tuple[str, int] | None) -> list[ControlItem] | None:
        """The items the append that made ``as_of`` (branch, seq) the head read, if noted."""
        if as_of is None:
            return None
        view = self._views.get(as_of[0])
        if view is None or view[0] != as_of[1] or view[1] != thread_id:
            return None
        return list(view[2])

    def clear(self) -> None:
        """This process queued or consumed an item: what appends read before is out of date."""
        self._views.clear()


def by_thread(rows: Iterable[tuple[Any, ...]]) -> dict[str, list[ControlItem]]:
    """The control items among rows of ``INBOX_COLUMNS`` (oldest first), by thread."""
    pending: dict[str, list[ControlItem]] = {}
    for item in controls_in(rows):
        pending.setdefault(item.thread_id, []).append(item)
    return pending


def waiting_key(rows: Iterable[tuple[Any, ...]], command: str) -> str | None:
    """The key of an unconsumed item with ``command`` among ``PENDING``'s rows, if any."""
    return next((i.item_key for i in controls_in(rows) if i.command == command), None)


def insert_args(
    tenant_id: str, thread_id: str, principal: WirePrincipal, command: str, now: int
) -> tuple[str, tuple[Any, ...]]:
    """A fresh item's key and ``INSERT``'s arguments for it."""
    key = uuid7(now)
    item = item_bytes(principal, thread_id, key, command)
    return key, (tenant_id, key, key, thread_id, item, now)


def consume_args(seq: int, inbox_id: str) -> tuple[int, int]:
    """``CONSUME``'s arguments: the applying append's last seq, and the item's row id."""
    try:
        return seq, int(inbox_id)
    except ValueError:
        raise StoreError("invalid_argument", f"{inbox_id!r} is not an inbox id") from None


def lost_item(inbox_id: str) -> StoreError:
    return StoreError(
        "control_consumed",
        f"control item {inbox_id} was applied by another writer first; re-read the branch",
    )


class ControlItems(Protocol):
    """What a store engine provides for control items."""

    async def queue_control(
        self, *, tenant_id: str, thread_id: str, principal: WirePrincipal, command: Command
    ) -> str:
        """Queue ``command`` for the thread's holder; returns the item key (the waiting
        item's, when one with this command is already queued)."""
        ...

    async def pending_controls(
        self, thread_id: str, *, as_of: tuple[str, int] | None = None
    ) -> list[ControlItem]:
        """The thread's unconsumed items, oldest first. With ``as_of`` (a branch and the seq
        of its head) an engine may answer with what it read inside the transaction of its own
        append that made that seq the head, without a round trip."""
        ...

    async def consume_control(self, inbox_id: str, seq: int) -> bool:
        """Mark an item consumed without an append (it found nothing to apply to); False when
        another writer consumed it first."""
        ...
