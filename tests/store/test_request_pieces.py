"""Requests appended as a renderer's pieces (``RequestBytes``) are stored exactly as whole bytes
would be: the same ``request_deltas`` rows, read back byte for byte (warm and by a cold store),
on every engine. Pieces that name the wrong request, a wrong length or none are no shortcut:
the request is stored by comparing whole bytes, as when no pieces come.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from postgres_support import fetch_all, open_postgres
from threads.clock import FakeClock
from threads.log.hashing import sha256_hex
from threads.log.render import RenderCache, render
from threads.log.request_bytes import Extends, RequestBytes
from threads.store.postgres import PostgresStore
from threads.store.protocol import PendingArtifact, Store
from threads.store.request_deltas import REQUEST_MEDIA_TYPE
from threads.store.sqlite import SQLiteStore, sqlite
from threads.testing.sample_log import SampleLog

LONG_TURNS = 120
SIZES = (80, 1000, 6000, 40_000)  # past zlib's small window and its 32 KiB dictionary

StoreFactory = Callable[[], Store]  # the ``open_store`` fixture: a fresh, empty store


def _rows(store: Store) -> list[tuple[Any, ...]]:
    """Every request_deltas row (all columns), by sha256."""
    query = ("SELECT sha256, base_sha256, prefix_bytes, suffix_bytes, middle, codec, bytes"
             " FROM request_deltas")
    if isinstance(store, PostgresStore):
        rows = fetch_all(store.schema, query)
    else:
        assert isinstance(store, SQLiteStore)
        assert store.root is not None
        conn = sqlite3.connect(store.root / "threads.db")
        try:
            rows = conn.execute(query).fetchall()
        finally:
            conn.close()
    return sorted((*row[:4], bytes(row[4]), *row[5:]) for row in rows)


def _cold(store: Store, clock: FakeClock) -> Store:
    """A second store on the same data: a new process's view, nothing cached."""
    if isinstance(store, PostgresStore):
        return open_postgres(clock, store.schema)
    assert isinstance(store, SQLiteStore)
    assert store.root is not None
    return sqlite(store.root, clock=clock)


async def _conversation(
    stores: list[Store], turns: int, clock: FakeClock, as_sent: Any
) -> list[bytes]:
    """``turns`` turns of one thread appended to each store, the request of each turn as
    ``as_sent(store_index, turn, body, bodies_so_far)`` makes it; returns the requests."""
    log = SampleLog(clock)
    leases = []
    for store in stores:
        await store.create_branch(log.header, tenant_id="acme")
        leases.append(await store.acquire_lease(log.header.branch_id, "runner", 60_000))
    assert len({lease.epoch for lease in leases}) == 1
    log.epoch = leases[0].epoch
    started = log.started()
    cache, bodies, expected = RenderCache(), [], 0
    for turn in range(turns):
        events = [started] if turn == 0 else []
        events += log.turn(text=(f"question {turn} " * 4000)[: SIZES[turn % len(SIZES)]])
        body = render(started.data, log.events[:-3], cache=cache).body
        assert body.sha256 == events[-3].data["request_ref"]["sha256"]
        bodies.append(body)
        for index, store in enumerate(stores):
            await store.append(
                log.header.branch_id, events, expected_seq=expected, lease=leases[index],
                artifacts=[as_sent(index, turn, body, bodies)],
            )
        expected = events[-1].seq
    return [bytes(body) for body in bodies]


async def _reads_back(store: Store, clock: FakeClock, requests: list[bytes]) -> None:
    for request in requests:
        assert await store.get_artifact(sha256_hex(request)) == request
    cold = _cold(store, clock)
    try:
        for request in requests:  # in order: each rebuilt from its base's bytes and one row
            assert await cold.get_artifact(sha256_hex(request)) == request
    finally:
        await cold.close()


class _Unjoined(RequestBytes):
    """Pieces a store must not join while it writes them: it holds the base they extend (a
    store may keep them, and a read join them later)."""

    __slots__ = ()
    writing = True

    def __bytes__(self) -> bytes:
        assert not _Unjoined.writing, "the store joined a request whose base it holds"
        return RequestBytes.__bytes__(self)


def _whole(body: RequestBytes) -> PendingArtifact:
    return PendingArtifact(bytes(body), REQUEST_MEDIA_TYPE)


async def test_a_long_conversations_requests_store_and_rebuild_as_whole_bytes_would(
    open_store: StoreFactory, clock: FakeClock
) -> None:
    pieces, whole = open_store(), open_store()

    def as_sent(index: int, turn: int, body: RequestBytes, _: list[RequestBytes]) -> Any:
        assert (body.base is None) == (turn == 0)  # each after the first extends the last
        if index == 1:
            return _whole(body)
        if turn > 0:
            body = _Unjoined(body.parts, body.starts, body.count, body.size, body.sha256,
                             body.base)
        return PendingArtifact(body, REQUEST_MEDIA_TYPE, body.sha256)

    _Unjoined.writing = True
    try:
        requests = await _conversation([pieces, whole], LONG_TURNS, clock, as_sent)
    finally:
        _Unjoined.writing = False
    assert len(requests[-1]) > 1_000_000
    assert _rows(pieces) == _rows(whole)
    await _reads_back(pieces, clock, requests)


def _mangled(kind: str, body: RequestBytes, bodies: list[RequestBytes]) -> PendingArtifact:
    """``body`` sent with pieces whose ``base`` is not the branch's previous request's."""
    assert body.base is not None
    if kind == "absent":
        return _whole(body)
    if kind == "no_base":
        wrong = replace(body, base=None)
    elif kind == "older_base":  # a request of this branch, and its real pieces, but not the last
        older = bodies[-3]
        wrong = replace(body, base=Extends(older.sha256, older.size, older.count))
    elif kind == "unknown_base":  # rendered but never stored
        wrong = replace(body, base=Extends("f" * 64, body.base.size, body.base.count))
    else:
        assert kind == "wrong_size"
        wrong = replace(body, base=replace(body.base, size=body.base.size - 1))
    return PendingArtifact(wrong, REQUEST_MEDIA_TYPE, body.sha256)


@pytest.mark.parametrize("kind", ["absent", "no_base", "older_base", "unknown_base", "wrong_size"])
async def test_a_request_whose_pieces_name_no_or_another_base_still_stores_exactly(
    open_store: StoreFactory, clock: FakeClock, kind: str
) -> None:
    pieces, whole = open_store(), open_store()

    def as_sent(index: int, turn: int, body: RequestBytes, bodies: list[RequestBytes]) -> Any:
        if index == 1:
            return _whole(body)
        if turn in (4, 5):  # then the next turn extends a request stored the long way
            assert body.base is not None
            return _mangled(kind, body, bodies)
        return PendingArtifact(body, REQUEST_MEDIA_TYPE, body.sha256)

    requests = await _conversation([pieces, whole], 8, clock, as_sent)
    assert _rows(pieces) == _rows(whole)
    await _reads_back(pieces, clock, requests)
