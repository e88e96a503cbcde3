"""Request artifacts kept as deltas: exact bytes back, linear space, damage found, and the
reference form written out by ``threads materialize``.

The delta rule is checked on random pairs (prefix, suffix, middle edits, empties); the store
side on a thread whose requests grow turn by turn, read back warm, cold (a new process's view:
a fresh store on the same directory) and in reverse order.
"""

from __future__ import annotations

import asyncio
import random
import sqlite3
from pathlib import Path

import pytest
from test_reference_layout import check_layout, write_ts_store

from shared_data import TS_LOGS, needs_ts_logs
from threads.cli.main import main
from threads.clock import FakeClock
from threads.errors import StoreError
from threads.log.hashing import sha256_hex
from threads.store.protocol import Lease, PendingArtifact, Store
from threads.store.receipts import RunReceipt
from threads.store.request_deltas import RAW_BELOW_BYTES, REQUEST_MEDIA_TYPE, apply, delta
from threads.store.sqlite import sqlite
from threads.testing.sample_log import SampleLog

TURNS = 60
TURN_BYTES = 1000


def _pairs() -> list[tuple[bytes, bytes]]:
    rng = random.Random(15)
    pairs = [(b"", b""), (b"", b"abc"), (b"abc", b""), (b"abc", b"abc"), (b"aaaa", b"aa"),
             (b"aa", b"aaaa"), (b"abcabc", b"abc"), (b"xyz", b"abc")]
    for _ in range(300):
        base = bytes(rng.choice(b"ab\n{}") for _ in range(rng.randrange(0, 60)))
        cut, keep = sorted(rng.randrange(0, len(base) + 1) for _ in range(2))
        middle = bytes(rng.choice(b"abc") for _ in range(rng.randrange(0, 20)))
        pairs.append((base, base[:cut] + middle + base[keep:]))
    for size in (RAW_BELOW_BYTES - 1, RAW_BELOW_BYTES, 3 * RAW_BELOW_BYTES):  # long middles
        base = bytes(rng.choice(b"ab\n{}") for _ in range(5000))
        middle = bytes(rng.choice(b"abc") for _ in range(size))
        pairs.append((base, base[:100] + middle + base[200:]))
    return pairs


def test_a_delta_rebuilds_exactly_the_bytes_it_was_made_from() -> None:
    for base, data in _pairs():
        d = delta("0" * 64, base, data)
        assert apply(base, d) == data, (base, data)
        middle_bytes = len(data) - d.prefix_bytes - d.suffix_bytes
        # compressed only when long enough to be worth zlib's setup (and it saves a tenth)
        assert d.codec == ("zlib" if middle_bytes >= RAW_BELOW_BYTES else "raw"), middle_bytes
        assert d.prefix_bytes + d.suffix_bytes <= min(len(base), len(data))
        if d.codec == "raw":
            assert len(d.middle) == middle_bytes


async def _write(
    store: Store, turns: int, *, topic: str = "", log: SampleLog | None = None
) -> list[bytes]:
    """``turns`` turns on ``log``'s branch (a new thread when None), each a ~TURN_BYTES
    question, appended with the Render v1 request its model_request names (as the run loop
    appends it); returns the requests."""
    if log is None:
        log = SampleLog(FakeClock())
        await store.create_branch(log.header, tenant_id="acme")
    lease = await store.acquire_lease(log.header.branch_id, "runner", 60_000)
    log.epoch = lease.epoch
    expected = log.events[-1].seq if log.events else 0
    requests = []
    for turn in range(turns):
        events = [] if log.events else [log.started()]
        events += log.turn(text=(f"{topic}question {turn} " * 100)[:TURN_BYTES])
        sha256 = events[-3].data["request_ref"]["sha256"]
        request = log.artifacts[sha256]
        await store.append(log.header.branch_id, events, expected_seq=expected, lease=lease,
                           artifacts=[PendingArtifact(request, REQUEST_MEDIA_TYPE, sha256)])
        expected = events[-1].seq
        requests.append(request)
    return requests


def _kept_bytes(root: Path) -> int:
    conn = sqlite3.connect(root / "threads.db")
    try:
        return int(conn.execute("SELECT sum(length(middle)) FROM request_deltas").fetchone()[0])
    finally:
        conn.close()


async def test_growing_requests_take_linear_space_and_read_back_exactly(
    tmp_path: Path,
) -> None:
    store = sqlite(tmp_path / "s")
    try:
        requests = await _write(store, TURNS)
        for request in requests:
            assert await store.get_artifact(sha256_hex(request)) == request
    finally:
        await store.close()
    # Each request adds a turn; kept whole, the 60 would take 30x the last one. Compressed
    # against their bases the new bytes take far less than the last request itself.
    assert _kept_bytes(tmp_path / "s") <= len(requests[-1]) * 0.5
    cold = sqlite(tmp_path / "s")
    try:
        for request in reversed(requests):  # no cache to lean on: each rebuilt from the rows
            assert await cold.get_artifact(sha256_hex(request)) == request
    finally:
        await cold.close()


def _edit(root: Path, sql: str) -> None:
    conn = sqlite3.connect(root / "threads.db")
    try:
        with conn:
            assert conn.execute(sql).rowcount == 1
    finally:
        conn.close()


@pytest.mark.parametrize(
    ("sql", "code"),
    [("UPDATE request_deltas SET middle = CAST('#' || substr(middle, 2) AS BLOB)"
      " WHERE rowid = 3", "artifact_corrupt"),
     ("UPDATE request_deltas SET prefix_bytes = prefix_bytes - 1 WHERE rowid = 3",
      "artifact_corrupt"),
     ("DELETE FROM request_deltas WHERE rowid = 3", "artifact_missing")],
    ids=["middle", "prefix_length", "deleted_base"],
)
async def test_a_damaged_delta_fails_every_request_built_on_it(
    tmp_path: Path, sql: str, code: str
) -> None:
    store = sqlite(tmp_path / "s")
    requests = await _write(store, 6)
    await store.close()
    _edit(tmp_path / "s", sql)
    store = sqlite(tmp_path / "s")
    try:
        for request in requests[:2]:
            assert await store.get_artifact(sha256_hex(request)) == request
        for request in requests[2:]:
            with pytest.raises(Exception) as err:
                await store.get_artifact(sha256_hex(request))
            assert getattr(err.value, "code", None) == code
    finally:
        await store.close()


async def test_a_request_is_based_on_its_own_branchs_previous_one(tmp_path: Path) -> None:
    store = sqlite(tmp_path / "s")
    try:
        await _write(store, 3)
        await _write(store, 3, topic="other ")
    finally:
        await store.close()
    conn = sqlite3.connect(tmp_path / "s" / "threads.db")
    rows = conn.execute("SELECT sha256, base_sha256 FROM request_deltas ORDER BY rowid").fetchall()
    conn.close()
    shas = [sha for sha, _ in rows]
    assert [base for _, base in rows] == [None, shas[0], shas[1], None, shas[3], shas[4]]


def test_materialize_writes_the_reference_form(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "s"

    async def write() -> list[bytes]:
        store = sqlite(root)
        requests = await _write(store, 5)
        await store.close()
        return requests

    requests = asyncio.run(write())
    assert main(["materialize", "--store", str(root)]) == 0
    assert "5 request artifact(s) written" in capsys.readouterr().out
    for request in requests:  # what a reader of the reference layout opens
        sha256 = sha256_hex(request)
        assert (root / "artifacts" / "sha256" / sha256[:2] / sha256).read_bytes() == request
    assert main(["materialize", "--store", str(root)]) == 0
    assert "0 request artifact(s) written" in capsys.readouterr().out
    check_layout(root)


@needs_ts_logs()
async def test_a_refused_first_request_in_a_threads_ts_directory_loses_nothing(
    tmp_path: Path,
) -> None:
    """Our table is created inside the append that first needs it: refused, it rolls back
    with the append, and the next append creates it again."""
    root = tmp_path / "ts"
    write_ts_store(root, TS_LOGS[0].read_bytes(), {}, "acme")
    clock = FakeClock()
    store = sqlite(root, clock=clock)
    try:
        log, lease, receipt = await _started_with_receipt(store, clock)
        events = log.turn()
        request = log.artifacts[events[1].data["request_ref"]["sha256"]]
        pending = [PendingArtifact(request, REQUEST_MEDIA_TYPE)]
        with pytest.raises(Exception) as err:  # refused after the request (and table) went in
            await store.append(log.header.branch_id, events, expected_seq=1, lease=lease,
                               artifacts=pending, receipt=receipt)
        assert getattr(err.value, "code", None) == "idempotency_key_reused"
        with pytest.raises(Exception) as err:
            await store.get_artifact(sha256_hex(request))
        assert getattr(err.value, "code", None) == "artifact_missing"
        await store.append(log.header.branch_id, events, expected_seq=1, lease=lease,
                           artifacts=pending)
        assert await store.get_artifact(sha256_hex(request)) == request
    finally:
        await store.close()
    check_layout(root)


async def _started_with_receipt(
    store: Store, clock: FakeClock
) -> tuple[SampleLog, Lease, RunReceipt]:
    """A new thread on ``store``, its lease held, started by an append that took a run
    receipt (appending with that receipt again is refused: ``idempotency_key_reused``)."""
    log = SampleLog(clock)
    await store.create_branch(log.header, tenant_id="acme")
    lease = await store.acquire_lease(log.header.branch_id, "runner", 60_000)
    log.epoch = lease.epoch
    receipt = RunReceipt("acme", "start_run", "k1", "api/acme/alice", "0" * 64,
                         log.header.thread_id, log.header.branch_id, "r", 1)
    await store.append(log.header.branch_id, [log.started()], expected_seq=0, lease=lease,
                       receipt=receipt)
    return log, lease, receipt


def _bases(root: Path) -> dict[str, str | None]:
    conn = sqlite3.connect(root / "threads.db")
    try:
        return dict(conn.execute("SELECT sha256, base_sha256 FROM request_deltas").fetchall())
    finally:
        conn.close()


async def test_a_requests_base_is_the_branchs_previous_one_whoever_appended_it(
    tmp_path: Path,
) -> None:
    """Two processes' stores take turns on one branch: each request is based on the one
    before it, though the store writing it did not see that one written."""
    clock = FakeClock()
    stores = [sqlite(tmp_path / "s", clock=clock), sqlite(tmp_path / "s", clock=clock)]
    try:
        log = SampleLog(clock)
        await stores[0].create_branch(log.header, tenant_id="acme")
        requests, expected = [], 0
        for turn in range(4):
            store = stores[turn % 2]
            lease = await store.acquire_lease(log.header.branch_id, f"runner-{turn}", 60_000)
            log.epoch = lease.epoch
            events = ([log.started()] if turn == 0 else []) + log.turn(text=f"question {turn}")
            request = log.artifacts[events[-3].data["request_ref"]["sha256"]]
            await store.append(log.header.branch_id, events, expected_seq=expected, lease=lease,
                               artifacts=[PendingArtifact(request, REQUEST_MEDIA_TYPE)])
            await store.release_lease(lease)
            expected = events[-1].seq
            requests.append(sha256_hex(request))
    finally:
        for store in stores:
            await store.close()
    bases = _bases(tmp_path / "s")
    assert [bases[sha] for sha in requests] == [None, *requests[:-1]]


async def test_a_refused_append_leaves_no_base_behind(tmp_path: Path) -> None:
    """A request written by an append that was then refused is not there to be a base: its
    events appended again without it (here through another store object on the directory),
    the next request is kept whole, and reads back."""
    clock = FakeClock()
    store, other = sqlite(tmp_path / "s", clock=clock), sqlite(tmp_path / "s", clock=clock)
    try:
        log, lease, receipt = await _started_with_receipt(store, clock)
        first = log.turn()
        refused = log.artifacts[first[1].data["request_ref"]["sha256"]]
        with pytest.raises(StoreError) as err:  # the receipt is taken: all of it rolls back
            await store.append(log.header.branch_id, first, expected_seq=1, lease=lease,
                               artifacts=[PendingArtifact(refused, REQUEST_MEDIA_TYPE)],
                               receipt=receipt)
        assert err.value.code == "idempotency_key_reused"
        await other.append(log.header.branch_id, first, expected_seq=1, lease=lease)
        second = log.turn()
        request = log.artifacts[second[1].data["request_ref"]["sha256"]]
        await store.append(log.header.branch_id, second, expected_seq=first[-1].seq,
                           lease=lease, artifacts=[PendingArtifact(request, REQUEST_MEDIA_TYPE)])
        assert await store.get_artifact(sha256_hex(request)) == request
    finally:
        await store.close()
        await other.close()
    assert _bases(tmp_path / "s") == {sha256_hex(request): None}
