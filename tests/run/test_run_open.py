"""A continuing run opened from the fold row and the lines from its request checkpoint on
(``threads.run.run_open``) writes exactly what it writes after reading the whole chain: for
random threads (turns of replies, read-only and effectful calls, two calls in one reply,
rate-limited retries, a fallback after an overloaded model, a parked approval, a turn a crash
left open) and a random continuing turn, the lines appended and the outcome are the same with
the row and without it (ids made deterministic, on copies of one store). And when the row does
not hold (damaged, another fold code's, a head not in the chain, a tail that does not chain),
the run reads every line and behaves as before."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import threads.run.runner as runner
import threads.store.fold_open as fold_open
from run_open_support import (
    GATED,
    KINDS,
    NOW,
    WIDE_STEPS,
    Reads,
    bot,
    continued_both_ways,
    run,
    same_ids,
)
from threads import FakeClock, open_thread, sqlite
from threads.cli.cmd_verify import verify_branch
from threads.log.fold.saved import RestoredFold, SnapshotShortError
from threads.log.lines import Event
from threads.log.render import render
from threads.log.vocabulary import data_of
from threads.principal import LOCAL_OPERATOR
from threads.store.control_items import Command
from threads.store.protocol import Store

pytestmark = pytest.mark.timeout(300)


async def build(
    root: Path, turns: list[list[str]], park: bool, open_turn: bool, kind: str = "plain",
    decide: str | None = None,
) -> str:
    """A thread of ``turns`` by an agent of ``kind`` (a parked approval after them when
    ``park``; a turn the run left open after its model request, its script run out, when
    ``open_turn``). ``decide``: a turn that parks on an approval has it decided so
    (``approve``, ``deny``) and is run on to its end; else it stays parked."""
    thread_id = None
    with same_ids(b"build"):
        for n in range(len(turns)):
            spec = bot(turns[: n + 1], kind)
            result = await run(root, spec, f"turn {n}", thread_id)
            assert not isinstance(result, str), result
            thread_id = result.thread.id
            if decide is not None and result.status == "parked":
                await decide_all(root, thread_id, decide)
                await run(root, spec, None, thread_id)
        assert thread_id is not None
        if park:
            # parks on the approval (unless a fallback model answers instead)
            await run(root, bot([*turns, ["wire"]], kind), "wire it", thread_id)
        if open_turn:  # the script runs out
            await run(root, bot(turns[:-1], kind), "unanswered", thread_id)
    return thread_id


async def decide_all(root: Path, thread_id: str, decide: str) -> None:
    """Every approval pending on the thread granted or denied, by the operator."""
    store = sqlite(root, clock=FakeClock(NOW))
    try:
        handle = await open_thread(store, thread_id)
        for pending in await handle.pending_approvals():
            if decide == "approve":
                await handle.approve(pending.challenge_id, LOCAL_OPERATOR)
            else:
                await handle.deny(pending.challenge_id, LOCAL_OPERATOR, "not now")
    finally:
        await store.close()


turns_strategy = st.lists(st.lists(st.sampled_from(WIDE_STEPS), max_size=3), min_size=1,
                          max_size=4)


@settings(max_examples=80, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    turns=turns_strategy, last=st.lists(st.sampled_from(WIDE_STEPS), max_size=4),
    every=st.sampled_from([1, 2, 3, 5, 7, 512]), park=st.booleans(), open_turn=st.booleans(),
    host=st.booleans(), every_bytes=st.sampled_from([900, 2500, 4000, 1 << 20]),
    kind=st.sampled_from(KINDS), queued=st.sampled_from([None, "cancel", "stop_when_idle"]),
    change=st.sampled_from([None, "mode", "settings", "spare"]),
    decide=st.sampled_from([None, "approve", "deny"]),
)
async def test_a_run_from_the_row_writes_what_a_run_from_the_chain_writes(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch,
    turns: list[list[str]], last: list[str], every: int, park: bool, open_turn: bool,
    host: bool, every_bytes: int, kind: str, queued: Command | None, change: str | None,
    decide: str | None,
) -> None:
    tmp_path = tmp_path_factory.mktemp("runs")
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", every)
    monkeypatch.setattr(fold_open, "SNAPSHOT_BYTES", every_bytes)
    reads = Reads(monkeypatch)
    thread_id = await build(tmp_path / "base", turns, park, open_turn, kind, decide)
    served, _, _ = await continued_both_ways(tmp_path, thread_id, [*turns, last], reads,
                                             host=host, kind=kind, queued=queued,
                                             change=change)
    assert not (served and kind in GATED)  # an agent the row must not serve read the chain


async def test_a_quiet_thread_continues_from_the_row_without_reading_the_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, ["look", "rate"]],
                                               reads)
    assert served
    assert not isinstance(row, str)
    assert row.status == "completed"


@pytest.mark.parametrize("decide", ["approve", "deny"])
async def test_an_approval_decided_turns_ago_does_not_keep_the_thread_off_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, decide: str
) -> None:
    """``fold.approvals`` keeps every approval the thread ever asked: one whose call is closed
    (granted and run, or denied) is history, and the run opens from the row as on a thread
    that never asked one, writing the same lines."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    turns = [["wire"], ["look"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False, decide=decide)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, ["look"]], reads)
    assert served
    assert not isinstance(row, str)
    assert row.status == "completed"


@pytest.mark.parametrize(("every_bytes", "turns", "last"), [
    (4000, [["two", "two"], ["look"]], ["two", "look"]),
    (2500, [["put"], ["look", "look"], ["two"]], ["put", "put", "look"]),
])
async def test_rows_put_by_bytes_fall_where_a_run_from_the_chain_puts_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every_bytes: int, turns: list[list[str]],
    last: list[str],
) -> None:
    """The writer counts the bytes of every line after the last multiple of SNAPSHOT_EVERY
    (``SnapshotSchedule.of``): a window that began after it, at the checkpoint's request,
    counted fewer, and put its next row at another append than a run holding the chain."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_BYTES", every_bytes)
    reads = Reads(monkeypatch)
    thread_id = await build(tmp_path / "base", turns, False, False)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, last], reads)
    assert served
    assert not isinstance(row, str)
    assert row.status == "completed"


async def test_a_host_run_of_a_turn_whose_input_is_written_continues_from_the_row(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # rows every 5 events: the last before the input is a run's, with its checkpoint (a row
    # the host's append put would have none, and the run would read every line)
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 5)
    reads = Reads(monkeypatch)
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, ["look"]], reads,
                                               host=True)
    assert served
    assert not isinstance(row, str)
    assert row.status == "completed"


async def test_a_fallback_after_the_row_reads_the_chain_and_writes_the_same(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    turns = [["look"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    # the settings_changed a fallback appends ends the checkpoint's use: the fold is read whole
    served, row, _ = await continued_both_ways(
        tmp_path, thread_id, [*turns, ["overloaded", "look"]], reads
    )
    assert not served
    assert not isinstance(row, str)
    assert row.status == "completed"


def _damage(root: Path, damage: str) -> None:
    with sqlite3.connect(root / "threads.db") as db:
        seq, body = db.execute(
            "SELECT seq, body FROM fold_snapshots WHERE kind = 'fold'"
        ).fetchone()
        if damage == "body":  # a byte of the checkpoint's compressed request
            db.execute("UPDATE fold_snapshots SET body = ? WHERE kind = 'fold'",
                       (bytes(body[:-3]) + b"\0\0\0",))
        elif damage == "fold_code":
            db.execute("UPDATE fold_snapshots SET fold_code = 'other' WHERE kind = 'fold'")
        elif damage == "head":
            db.execute("UPDATE fold_snapshots SET head_hash = ? WHERE kind = 'fold'", ("0" * 64,))
        elif damage == "window":  # a byte of the line at the row's cut, inside the window
            (line,) = db.execute("SELECT line FROM events WHERE seq = ?", (seq,)).fetchone()
            damaged = bytes(line).replace(b'"seq":', b'"seq": ', 1)
            db.execute("UPDATE events SET line = ? WHERE seq = ?", (damaged, seq))
        elif damage == "tail":  # the line after the row no longer chains from it
            (line,) = db.execute("SELECT line FROM events WHERE seq = ?", (seq + 1,)).fetchone()
            damaged = bytes(line).replace(b'"prev_hash":"', b'"prev_hash":"0', 1)
            db.execute("UPDATE events SET line = ? WHERE seq = ?", (damaged, seq + 1))


@pytest.mark.parametrize("damage", ["none", "body", "fold_code", "head", "window", "tail"])
async def test_a_row_that_does_not_hold_makes_the_run_read_every_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, damage: str
) -> None:
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    base = tmp_path / "base"
    turns = [["look", "put"], ["two"]]
    thread_id = await build(base, turns, False, False)
    _damage(base, damage)
    served, row, _chain = await continued_both_ways(tmp_path, thread_id, [*turns, ["look"]],
                                                   reads)
    assert served == (damage == "none")
    assert not isinstance(row, str)
    # a broken chain stops the run whichever way it opens
    assert row.status == ("failed" if damage in ("window", "tail") else "completed")



@pytest.mark.parametrize(("every", "every_bytes"), [(3, 1 << 20), (512, 900)])
async def test_an_event_whose_rule_needs_an_older_line_is_folded_on_the_whole_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, every: int, every_bytes: int
) -> None:
    """Should a rule need a line before the window mid-run (``SnapshotShortError``), the
    writer reads the chain whole, folds the events it holds back on it, then the new ones:
    played here by the first ``effect_begin`` a restored fold is given, which follows a held
    reply and its call. Also when the window holds every line (a thread shorter than
    ``SNAPSHOT_EVERY`` with a row put by bytes): the state restored from the row is still
    not the whole fold's."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", every)
    monkeypatch.setattr(fold_open, "SNAPSHOT_BYTES", every_bytes)
    reads = Reads(monkeypatch)
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = await build(tmp_path / "base", turns, False, False)
    real = RestoredFold.extend
    raised: list[int] = []

    def short(fold: RestoredFold, events: Iterable[Event]) -> None:
        events = list(events)
        if not raised and any(e.type == "effect_begin" for e in events):
            raised.append(events[0].seq)
            raise SnapshotShortError("played")
        real(fold, events)

    monkeypatch.setattr(RestoredFold, "extend", short)
    served, row, _ = await continued_both_ways(tmp_path, thread_id, [*turns, ["put", "look"]],
                                               reads)
    assert raised
    assert not served  # the chain was read, mid-run
    assert not isinstance(row, str)
    assert row.status == "completed"


async def test_on_either_engine_a_quiet_thread_continues_from_the_row(
    store: Store, chain_reads: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The row, the window before its cut and the tail read on SQLite and on Postgres; the
    requests the run sends are the whole log's."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = None
    for n in range(len(turns)):
        result = await bot(turns[: n + 1]).run(f"turn {n}", thread=thread_id, store=store)
        thread_id = result.thread.id
    assert thread_id is not None
    branch = await store.root_branch(thread_id)
    chain_reads.clear()
    result = await bot([*turns, ["look"]]).run("and now", thread=thread_id, store=store)
    assert result.status == "completed"
    assert chain_reads == []
    events = (await store.read_chain(branch.branch_id)).events
    requests = [at for at, e in enumerate(events)
                if e.type == "model_request" and e.seq > branch.head_seq]
    assert len(requests) == 2
    for at in requests:
        sent = data_of(events[at], "model_request")["request_ref"]["sha256"]
        assert sent == render(events[0].data, events[:at]).sha256


async def test_a_damaged_line_before_the_window_is_not_seen_by_the_run_but_verify_finds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Documented: a run from the row reads no line before the checkpoint's request, so a byte
    changed in the first input goes unnoticed by it; ``threads verify`` (every line read and
    checked) still names that line, and so does a run that reads the chain."""
    monkeypatch.setattr(fold_open, "SNAPSHOT_EVERY", 3)
    reads = Reads(monkeypatch)
    base = tmp_path / "base"
    turns = [["look", "put"], ["two"], ["say"]]
    thread_id = await build(base, turns, False, False)
    with sqlite3.connect(base / "threads.db") as db:
        (line,) = db.execute("SELECT line FROM events WHERE seq = 2").fetchone()
        assert b'"turn 0"' in bytes(line)
        db.execute("UPDATE events SET line = ? WHERE seq = 2",
                   (bytes(line).replace(b'"turn 0"', b'"turn 9"'),))
    with same_ids(b"continue"):
        before = reads.chains
        result = await run(base, bot([*turns, ["look"]]), "and now", thread_id)
        assert reads.chains == before  # served from the row
        assert not isinstance(result, str)
        assert result.status == "completed"
    store = sqlite(base, clock=FakeClock(NOW))
    try:
        branch = await store.root_branch(thread_id)
        capsys.readouterr()
        assert not await verify_branch(store, branch)
        assert "seq 2" in capsys.readouterr().out
    finally:
        await store.close()
    # a run that reads the chain stops on it
    monkeypatch.setattr(runner, "window_serves", lambda *a, **k: False)
    failed = await run(base, bot([*turns, ["look"], ["say"]]), "again", thread_id)
    assert not isinstance(failed, str)
    assert failed.status == "failed"
