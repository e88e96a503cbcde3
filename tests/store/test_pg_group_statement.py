"""The one statement a Postgres group commits in (``threads.store.postgres.append``) judges each
member in SQL: it must pass exactly the members ``require_live`` and ``require_head`` pass, and
write nothing for any other.

Each case breaks one member of a group in one way, by the lease clock or by editing its rows
behind the store's back, and checks that this member gets the lone append's error from the group
itself (no member is handed to the lone append: a disagreement between the SQL and the Python
checks would show up as one), that nothing of it was written, and that the rest committed and
verify.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from test_group_commit import Writer, _has_artifact, assert_verifies, code_of, start_writers

from postgres_support import execute, fetch_one
from threads.clock import FakeClock
from threads.store.postgres import PostgresStore
from threads.store.postgres.controls import PostgresControls
from threads.store.postgres.group import GroupCommitter
from threads.store.protocol import PendingArtifact

pytestmark = pytest.mark.engines("postgres")  # the statement under test is Postgres's

TTL = 30_000
MEMBERS = 5
BROKEN = 2  # the member each case breaks


def _edit(sql: str) -> Callable[[PostgresStore, Writer, FakeClock], None]:
    def edit(store: PostgresStore, writer: Writer, _clock: FakeClock) -> None:
        assert execute(store.schema, sql, (writer.branch_id,)) == 1

    return edit


def _expire(by_ms: int) -> Callable[[PostgresStore, Writer, FakeClock], None]:
    """Its lease's expiry set ``by_ms`` after the lease clock's now (0: expires right now)."""

    def edit(store: PostgresStore, writer: Writer, clock: FakeClock) -> None:
        execute(store.schema, "UPDATE leases SET expires_at = %s WHERE branch_id = %s",
                (clock.now_ms() + by_ms, writer.branch_id))

    return edit


CASES: dict[str, tuple[Callable[[PostgresStore, Writer, FakeClock], None], str | None]] = {
    "expires this very ms": (_expire(0), "stale_epoch"),
    "expires one ms later": (_expire(1), None),
    "another holder": (_edit("UPDATE leases SET holder_id = 'intruder' WHERE branch_id = %s"),
                       "stale_epoch"),
    "a newer epoch": (_edit("UPDATE leases SET epoch = epoch + 1 WHERE branch_id = %s"),
                      "stale_epoch"),
    "branch read_only": (_edit("UPDATE branches SET state = 'read_only' WHERE branch_id = %s"),
                         "branch_not_runnable"),
    "head moved": (_edit("UPDATE branches SET head_seq = head_seq + 1 WHERE branch_id = %s"),
                   "seq_conflict"),
    "head hash differs": (
        _edit("UPDATE branches SET head_hash = repeat('0', 64) WHERE branch_id = %s"),
        "seq_conflict",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
async def test_the_statement_refuses_exactly_what_the_lone_checks_refuse(
    store: PostgresStore, clock: FakeClock, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pg = store
    writers = await start_writers(pg, clock, [TTL] * MEMBERS)
    breaking, code = CASES[case]
    breaking(pg, writers[BROKEN], clock)
    alone: list[Any] = []
    real_alone = GroupCommitter._run_alone

    async def recording(self: GroupCommitter, request: Any, *args: Any) -> None:
        alone.append(request)
        await real_alone(self, request, *args)

    monkeypatch.setattr(GroupCommitter, "_run_alone", recording)
    calls = []
    for n, writer in enumerate(writers):
        event = writer.next_event(f"message {n}")
        own = PendingArtifact(f"artifact of member {n}".encode(), "text/plain")
        calls.append(pg.append(writer.branch_id, [event], expected_seq=event.seq - 1,
                               lease=writer.lease, artifacts=[own]))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)

    assert alone == []  # every verdict came from the group's statement
    assert [code_of(o) for o in outcomes] == [
        code if n == BROKEN else None for n in range(MEMBERS)
    ]
    for n, writer in enumerate(writers):
        refused = n == BROKEN and code is not None
        assert await _has_artifact(pg, f"artifact of member {n}".encode()) == (not refused)
        if refused:
            writer.log.events.pop()
            stored = fetch_one(pg.schema, "SELECT count(*) FROM events WHERE branch_id = %s",
                               (writer.branch_id,))
            assert stored == (1,)  # thread_started only
        else:
            await assert_verifies(pg, writer)


async def test_a_member_without_a_lease_row_is_left_to_the_lone_append(
    store: PostgresStore, clock: FakeClock,
) -> None:
    """No lease row: the statement locks nothing of it, so it is not judged there; the lone
    append refuses it (``stale_epoch``) and the rest commit."""
    pg = store
    writers = await start_writers(pg, clock, [TTL] * MEMBERS)
    execute(pg.schema, "DELETE FROM leases WHERE branch_id = %s", (writers[BROKEN].branch_id,))
    calls = []
    for n, writer in enumerate(writers):
        event = writer.next_event(f"message {n}")
        calls.append(pg.append(writer.branch_id, [event], expected_seq=event.seq - 1,
                               lease=writer.lease))
    outcomes = await asyncio.gather(*calls, return_exceptions=True)
    assert [code_of(o) for o in outcomes] == [
        "stale_epoch" if n == BROKEN else None for n in range(MEMBERS)
    ]
    writers[BROKEN].log.events.pop()
    for writer in writers:
        if writer is not writers[BROKEN]:
            await assert_verifies(pg, writer)


async def test_the_statement_reads_each_members_pending_control_items(
    store: PostgresStore, clock: FakeClock,
) -> None:
    """With the inbox table there, a group's statement reads its threads' pending control
    items (oldest first) and the store notes them at the head each append made: the run's look
    at the next step boundary is then answered without a round trip."""
    pg = store
    writers = await start_writers(pg, clock, [TTL] * MEMBERS)
    controls = PostgresControls(pg)
    await controls.pending_controls(writers[0].log.header.thread_id)  # the table is there now
    assert pg.inbox_seen.active
    principal = {"issuer": "api", "subject": "alice", "tenant": "acme"}
    queued = [
        await controls.queue_control(tenant_id="acme", thread_id=writers[n].log.header.thread_id,
                                     principal=principal, command=command)
        for n, command in ((BROKEN, "cancel"), (BROKEN, "stop_when_idle"), (0, "cancel"))
    ]
    calls, heads = [], []
    for n, writer in enumerate(writers):
        event = writer.next_event(f"message {n}")
        heads.append((writer.branch_id, event.seq))
        calls.append(pg.append(writer.branch_id, [event], expected_seq=event.seq - 1,
                               lease=writer.lease))
    assert await asyncio.gather(*calls) == [None] * MEMBERS
    for n, writer in enumerate(writers):
        seen = pg.inbox_seen.at(writer.log.header.thread_id, heads[n])
        assert seen is not None  # noted: no store read needed
        want = {BROKEN: queued[:2], 0: queued[2:]}.get(n, [])
        assert [item.item_key for item in seen] == want


async def test_a_group_of_appends_without_events_checks_and_writes_nothing(
    store: PostgresStore, clock: FakeClock,
) -> None:
    """An append of no events still has its lease and head checked (a stale one is refused),
    and the statement, with nothing to insert and no thread to read the inbox of, runs."""
    pg = store
    writers = await start_writers(pg, clock, [TTL] * 3)
    await PostgresControls(pg).pending_controls(writers[0].log.header.thread_id)
    assert pg.inbox_seen.active
    execute(pg.schema, "UPDATE leases SET epoch = epoch + 1 WHERE branch_id = %s",
            (writers[1].branch_id,))
    outcomes = await asyncio.gather(
        *(pg.append(w.branch_id, [], expected_seq=1, lease=w.lease) for w in writers),
        return_exceptions=True,
    )
    assert [code_of(o) for o in outcomes] == [None, "stale_epoch", None]
    for writer in writers:
        await assert_verifies(pg, writer)
