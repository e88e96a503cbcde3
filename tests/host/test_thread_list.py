"""``GET /v1/threads`` folds a thread only when its head moved since the last listing: the
list of a store of long threads costs a fold per changed thread, not the whole store per call
(``threads.host.summaries``). The app runs in process (httpx's ASGI transport) over a real
SQLite store whose ``read_chain`` calls are counted."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import httpx
import pytest
from pydantic import BaseModel

import threads.host.summaries as summaries_module
import threads.store.fold_open as fold_open
from threads import Permissions, agent, tool
from threads.cli.cmd_ls import thread_row
from threads.clock import SystemClock
from threads.host.app import host
from threads.host.summaries import Summaries
from threads.log.fold import reduce
from threads.principal import Principal
from threads.store.protocol import Store
from threads.store.transfer import import_log
from threads.testing.sample_log import USER, SampleLog
from threads.testing.scripted import call, say, scripted_model, use

pytestmark = pytest.mark.timeout(60)

ALICE = Principal(issuer="test", tenant="acme", subject="alice")


async def stored_thread(store: Store, turns: int = 3) -> SampleLog:
    log = SampleLog(SystemClock())
    log.started()
    for _ in range(turns):
        log.turn()
    await import_log(store, log.export(), tenant_id="acme")
    return log


def client(store: Store) -> httpx.AsyncClient:
    bot = agent(name="demo", model=scripted_model([say("hi")]))
    app = host(store, [bot], authenticate=lambda _request: ALICE)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://host")


async def listed(http: httpx.AsyncClient) -> dict[str, dict[str, Any]]:
    response = await http.get("/v1/threads")
    assert response.status_code == 200, response.text
    return {row["thread_id"]: row for row in response.json()}


async def test_a_second_listing_folds_no_thread_whose_head_did_not_move(
    store: Store, chain_reads: list[str]
) -> None:
    logs = [await stored_thread(store) for _ in range(3)]
    chain_reads.clear()
    async with client(store) as http:
        first = await listed(http)
        assert sorted(chain_reads) == sorted(log.header.branch_id for log in logs)
        chain_reads.clear()
        assert await listed(http) == first
        assert chain_reads == []  # the old code read all three again
    assert {row["status"] for row in first.values()} == {"idle"}
    assert {row["agent"] for row in first.values()} == {"demo"}


async def test_a_thread_whose_head_moved_is_folded_again_and_shows_its_new_status(
    store: Store, chain_reads: list[str]
) -> None:
    moved, still = await stored_thread(store), await stored_thread(store)
    chain_reads.clear()
    async with client(store) as http:
        before = await listed(http)
        assert before[moved.header.thread_id]["status"] == "idle"
        lease = await store.acquire_lease(moved.header.branch_id, "writer", 60_000)
        moved.epoch = lease.epoch
        opened = moved.add("user_input", {"source": "api", "text": "one more"}, USER)
        await store.append(
            moved.header.branch_id, [opened], expected_seq=opened.seq - 1, lease=lease
        )
        chain_reads.clear()
        after = await listed(http)
        assert chain_reads == [moved.header.branch_id]
        assert after[moved.header.thread_id]["status"] == "in_turn"
        assert after[moved.header.thread_id]["head_seq"] == opened.seq
        assert after[still.header.thread_id] == before[still.header.thread_id]


@pytest.mark.engines("sqlite")  # damages a line through a second SQLite connection
async def test_an_unreadable_thread_is_not_kept_and_is_read_again_next_time(
    store: Store, chain_reads: list[str], tmp_path: Path
) -> None:
    log = await stored_thread(store)
    db = sqlite3.connect(tmp_path / "store" / "threads.db")
    seq, good = db.execute(
        "SELECT seq, line FROM events WHERE branch_id = ? ORDER BY seq LIMIT 1 OFFSET 2",
        (log.header.branch_id,),
    ).fetchone()
    damaged = bytes(good).replace(b'"seq":', b'"seq" :', 1)
    with db:
        db.execute("UPDATE events SET line = ? WHERE branch_id = ? AND seq = ?",
                   (damaged, log.header.branch_id, seq))
    chain_reads.clear()
    async with client(store) as http:
        assert (await listed(http))[log.header.thread_id]["status"] == "unreadable"
        with db:
            db.execute("UPDATE events SET line = ? WHERE branch_id = ? AND seq = ?",
                       (good, log.header.branch_id, seq))
        assert (await listed(http))[log.header.thread_id]["status"] == "idle"
        assert chain_reads == [log.header.branch_id] * 2
    db.close()


async def test_the_summaries_keep_a_bounded_number_of_threads(
    store: Store, chain_reads: list[str]
) -> None:
    logs = [await stored_thread(store, turns=1) for _ in range(3)]
    roots = [await store.root_branch(log.header.thread_id) for log in logs]
    chain_reads.clear()
    summaries = Summaries(entries=2)
    for root in roots:
        await summaries.of(store, root)
    await summaries.of(store, roots[2])  # kept
    await summaries.of(store, roots[0])  # the oldest was dropped: read again
    assert chain_reads == [r.branch_id for r in roots] + [roots[0].branch_id]


async def test_a_thread_mid_turn_is_listed_from_its_fold_snapshot(
    store: Store, chain_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 4)  # the import puts one at its head
    log = await stored_thread(store)
    lease = await store.acquire_lease(log.header.branch_id, "writer", 60_000)
    log.epoch = lease.epoch
    opened = log.add("user_input", {"source": "api", "text": "one more"}, USER)
    await store.append(log.header.branch_id, [opened], expected_seq=opened.seq - 1, lease=lease)
    root = await store.root_branch(log.header.thread_id)
    chain_reads.clear()
    summary = await Summaries().of(store, root)
    row = await thread_row(store, root, store.clock.now_ms())  # ``threads ls``
    assert chain_reads == []  # no listing row mid-turn: the snapshot and the line after it
    whole = Summaries().summarize(reduce(log.header, log.events, now_ms=0))
    assert summary == whole
    assert (summary.status, summary.first_input, summary.updated_at) == (
        "in_turn", "What is in README.md?", opened.time
    )
    assert row.cells[1:4] == ("demo", "acme", "in_turn")


async def test_a_thread_waiting_on_a_person_is_summarized_from_its_whole_log(
    store: Store, chain_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 1)  # a fold row with every append

    class Mail(BaseModel):
        to: str

    async def send(args: Mail) -> str:
        return "sent"

    send_email = tool(name="send_email", description="Mail.", input=Mail, execute=send)
    bot = agent(
        name="demo", model=scripted_model([use(call("send_email", "c1", to="x@example.com"))]),
        tools=[send_email], permissions=Permissions(ask=("send_email",)),
    )
    result = await bot.run("mail x", store=store, principal=ALICE)
    assert result.status == "parked"
    root = await store.root_branch(result.thread.id)
    assert await store.read_tail(root.branch_id) is not None
    chain_reads.clear()
    summary = await Summaries().of(store, root)
    # the approval it waits on is read from its ``approval_requested``: the whole log
    assert chain_reads == [root.branch_id]
    (approval,) = summary.waiting.approvals
    assert (approval.call_id, approval.requested_by) == ("c1", ALICE)
    assert approval.requested_at > 0

    async def no_listing(store: Store, branch_id: str) -> None:
        return None

    # without a listing row: the snapshot says it waits on a person, so the log is read too
    monkeypatch.setattr(summaries_module, "read_listing", no_listing)
    chain_reads.clear()
    assert await Summaries().of(store, root) == summary
    assert chain_reads == [root.branch_id]
