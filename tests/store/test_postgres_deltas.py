"""Request artifacts kept as deltas on Postgres (``threads.store.postgres.deltas``): exact bytes
back, linear space, damage reported instead of wrong bytes, bases found by a process that did
not write them, stores written before the table still read, and a group whose members' bases
must be looked up (one of them damaged) committing as one.

Every test runs on the real local server, each in a schema of its own; a "cold" store is a
second ``PostgresStore`` on the same schema (a new process's view: no cache, nothing
remembered).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import pytest
from test_request_deltas import TURN_BYTES, TURNS, _write

from postgres_support import (
    POSTGRES_MARKS,
    drop_schema,
    execute,
    fetch_all,
    fetch_one,
    open_postgres,
)
from threads.cli.cmd_verify import verify_branch
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store.postgres import PostgresStore
from threads.store.postgres.group import GroupCommitter
from threads.store.protocol import PendingArtifact
from threads.store.request_deltas import REQUEST_MEDIA_TYPE
from threads.store.transfer import export_bundle
from threads.testing.sample_log import SampleLog

pytestmark = list(POSTGRES_MARKS)

Opener = Callable[[], PostgresStore]


@pytest.fixture
async def schema_stores() -> AsyncIterator[Opener]:
    """Opens stores on one fresh schema (the first creates it); all closed, schema dropped."""
    opened: list[PostgresStore] = []

    def open_one() -> PostgresStore:
        store = open_postgres(FakeClock(), opened[0].schema if opened else None)
        opened.append(store)
        return store

    yield open_one
    for store in opened:
        await store.close()
    if opened:
        await drop_schema(opened[0].schema)


def _rows(store: PostgresStore) -> list[tuple[Any, ...]]:
    """(sha256, base_sha256) of every request_deltas row, in insertion order."""
    return fetch_all(store.schema, "SELECT sha256, base_sha256 FROM request_deltas ORDER BY ctid")


def _one(store: PostgresStore, query: str) -> Any:
    row = fetch_one(store.schema, query)
    assert row is not None
    return row[0]


async def _expect(code: str, read: Coroutine[Any, Any, Any]) -> None:
    with pytest.raises(StoreError) as err:
        await read
    assert err.value.code == code


async def test_growing_requests_take_linear_space_and_read_back_exactly(
    schema_stores: Opener,
) -> None:
    store = schema_stores()
    requests = await _write(store, TURNS)
    for request in requests:
        assert await store.get_artifact(sha256_hex(request)) == request
    shas = [sha256_hex(r) for r in requests]
    assert _rows(store) == list(zip(shas, [None, *shas[:-1]], strict=True))
    assert _one(store, "SELECT count(*) FROM artifacts") == 0  # none kept whole
    # Kept whole, the 60 would take 30x the last one; as deltas, far less than it.
    assert _one(store, "SELECT sum(length(middle)) FROM request_deltas") <= len(requests[-1]) / 2
    cold = schema_stores()
    for request in reversed(requests):  # no cache to lean on: each rebuilt from the rows
        assert await cold.get_artifact(sha256_hex(request)) == request


@pytest.mark.parametrize(
    ("edit", "code"),
    [("UPDATE request_deltas SET middle = set_byte(middle, 0, get_byte(middle, 0) # 1)"
      " WHERE sha256 = %s", "artifact_corrupt"),
     ("UPDATE request_deltas SET prefix_bytes = prefix_bytes - 1 WHERE sha256 = %s",
      "artifact_corrupt"),
     ("DELETE FROM request_deltas WHERE sha256 = %s", "artifact_missing")],
    ids=["middle", "prefix_length", "deleted_base"],
)
async def test_a_damaged_delta_is_reported_by_every_reader_never_read_as_other_bytes(
    schema_stores: Opener, edit: str, code: str, capsys: pytest.CaptureFixture[str]
) -> None:
    store = schema_stores()
    log = SampleLog(FakeClock())
    await store.create_branch(log.header, tenant_id="acme")
    requests = await _write(store, 6, log=log)
    # The third request's row is edited behind the store's back (a delete drops the foreign
    # key the fourth request's row holds on it first, as a hand edit could).
    execute(store.schema, "ALTER TABLE request_deltas DROP CONSTRAINT"
            " request_deltas_base_sha256_fkey")
    assert execute(store.schema, edit, (sha256_hex(requests[2]),)) == 1
    cold = schema_stores()
    for request in requests[:2]:
        assert await cold.get_artifact(sha256_hex(request)) == request
    for request in requests[2:]:
        await _expect(code, cold.get_artifact(sha256_hex(request)))
    branch = await cold.get_branch(log.header.branch_id)
    assert not await verify_branch(cold, branch)
    assert code in capsys.readouterr().out
    await _expect(code, export_bundle(cold, branch.branch_id))  # names them, as every reader


async def test_a_request_is_based_on_the_one_another_process_wrote_before_it(
    schema_stores: Opener,
) -> None:
    log = SampleLog(FakeClock())
    first = schema_stores()
    await first.create_branch(log.header, tenant_id="acme")
    requests = await _write(first, 3, log=log)
    second = schema_stores()  # knows nothing of the branch: looks the base up in the table
    requests += await _write(second, 3, log=log)
    shas = [sha256_hex(r) for r in requests]
    assert _rows(second) == list(zip(shas, [None, *shas[:-1]], strict=True))
    for request in requests:
        assert await second.get_artifact(sha256_hex(request)) == request


async def test_a_store_that_kept_its_requests_whole_keeps_working(
    schema_stores: Opener,
) -> None:
    """Requests an earlier release wrote whole to ``artifacts`` (no ``request_deltas``): read
    from there, and the next requests go in as deltas beside them."""
    log = SampleLog(FakeClock())
    store = schema_stores()
    await store.create_branch(log.header, tenant_id="acme")
    old = await _write(store, 3, log=log)
    await store.close()
    execute(store.schema, "DROP TABLE request_deltas")
    for request in old:
        execute(store.schema, "INSERT INTO artifacts(sha256, media_type, bytes, data)"
                " VALUES (%s, %s, %s, %s)",
                (sha256_hex(request), REQUEST_MEDIA_TYPE, len(request), request))
    reopened = schema_stores()
    for request in old:
        assert await reopened.get_artifact(sha256_hex(request)) == request
    new = await _write(reopened, 3, log=log)
    shas = [sha256_hex(r) for r in new]
    assert _rows(reopened) == list(zip(shas, [None, *shas[:-1]], strict=True))
    cold = schema_stores()
    for request in old + new:
        assert await cold.get_artifact(sha256_hex(request)) == request


async def test_a_base_deleted_behind_the_stores_back_is_not_built_on(
    schema_stores: Opener,
) -> None:
    """The writer's cache says the base is there; the insert's foreign key says it is not: the
    append is planned again from the table and its request kept whole."""
    log = SampleLog(FakeClock())
    store = schema_stores()
    await store.create_branch(log.header, tenant_id="acme")
    requests = await _write(store, 3, log=log)
    gone = sha256_hex(requests[-1])
    assert execute(store.schema, "DELETE FROM request_deltas WHERE sha256 = %s", (gone,)) == 1
    (latest,) = await _write(store, 1, log=log)
    assert _rows(store)[-1] == (sha256_hex(latest), None)
    assert await schema_stores().get_artifact(sha256_hex(latest)) == latest
    await _expect("artifact_missing", store.get_artifact(gone))


async def test_a_group_finds_each_members_base_and_one_damaged_base_fails_no_one(
    schema_stores: Opener, monkeypatch: pytest.MonkeyPatch
) -> None:
    writer = schema_stores()
    logs = [SampleLog(FakeClock()) for _ in range(4)]
    for n, log in enumerate(logs):
        await writer.create_branch(log.header, tenant_id="acme")
        await _write(writer, 2, log=log, topic=f"branch {n} ")
    damaged = logs[1].artifacts[logs[1].events[-3].data["request_ref"]["sha256"]]
    execute(writer.schema, "UPDATE request_deltas SET middle = set_byte(middle, 0,"
            " get_byte(middle, 0) # 1) WHERE sha256 = %s", (sha256_hex(damaged),))

    store = schema_stores()  # a new process: every member's base is looked up in its group
    calls, requests = [], []
    for log in logs:
        lease = await store.acquire_lease(log.header.branch_id, "runner", 60_000)
        log.epoch = lease.epoch
        expected = log.events[-1].seq
        events = log.turn(text=("next question " * 100)[:TURN_BYTES])
        request = log.artifacts[events[1].data["request_ref"]["sha256"]]
        requests.append(request)
        calls.append(store.append(log.header.branch_id, events, expected_seq=expected,
                                  lease=lease,
                                  artifacts=[PendingArtifact(request, REQUEST_MEDIA_TYPE)]))
    sizes: list[int] = []
    real_commit = GroupCommitter._commit

    async def recording(self: GroupCommitter, group: Any) -> Any:
        sizes.append(len(group))
        return await real_commit(self, group)

    monkeypatch.setattr(GroupCommitter, "_commit", recording)
    assert await asyncio.gather(*calls) == [None] * 4
    assert sizes == [4]  # one transaction for all four
    bases = dict(_rows(store))
    for n, (log, request) in enumerate(zip(logs, requests, strict=True)):
        previous = log.events[-7].data["request_ref"]["sha256"]  # the turn before this one
        assert bases[sha256_hex(request)] == (None if n == 1 else previous)
        assert await schema_stores().get_artifact(sha256_hex(request)) == request
