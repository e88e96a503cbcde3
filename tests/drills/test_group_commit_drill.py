"""Crash drills for group commit: a real child process (``group_writer.py``) appends to many
branches at once on one store, groups forming as they queue, and dies by SIGKILL:

- wherever it is once the parent has read enough acknowledgements (groups in flight);
- at a named boundary: a group of two or more has run all its writes but not its COMMIT (SQLite:
  none of its appends may be stored), is somewhere in its one statement (Postgres: all of its
  appends are stored or none is), or its COMMIT returned but no caller was told (all of them
  must be stored);
- with one branch on SQLite, where each append commits in place on the event loop's thread:
  anywhere, after the append's writes but before its COMMIT, and after its COMMIT;
- on SQLite, while appends refused after their fence moved the head (a reused event id) make
  their groups roll back and run again with a savepoint per append: wherever it is.

The child reports each acknowledged append (``ack BRANCH SEQ HASH``, written after its await
returned) through its stdout pipe before it is killed. Asserted after every kill: each branch's
stored chain verifies (read_chain and a verified export), every acknowledged event is stored at
its seq with its hash (nobody was told "committed" for something not on disk), and what is
stored past the last acknowledgement chains on from it.
"""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from drill_harness import SUMMARY

from postgres_support import URL, drop_schema, fresh_schema, needs_postgres
from threads.log.verify import verify_export
from threads.store.protocol import Store
from threads.store.sqlite import sqlite
from threads.store.transfer import export_branch

pytestmark = pytest.mark.drill

CHILD = Path(__file__).with_name("group_writer.py")
BRANCHES = 16
APPENDS = 5_000  # per branch: a bound the child never reaches before it is killed
ACKS_BEFORE_KILL = 400  # the parent's kill comes after this many acks
ARMED_AFTER = 200  # a named boundary is armed after this many


class Child:
    """One ``group_writer.py`` process and what it said."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, str(CHILD), json.dumps(spec)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        self.acks: dict[str, dict[int, str]] = {}
        self.groups: list[int] = []
        self.in_place = 0  # appends that committed in place
        self.dying: list[tuple[str, int]] = []
        self.refused = 0  # appends refused after their fence (``late_refusals``)

    def lines(self) -> Iterator[str]:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            self._note(line)
            yield line

    def _note(self, line: str) -> None:
        kind, *rest = line.split()
        if kind == "ack":
            branch, seq, digest = rest
            self.acks.setdefault(branch, {})[int(seq)] = digest
        elif kind == "group":
            self.groups.append(int(rest[0]))
        elif kind == "in_place":
            self.in_place += 1
        elif kind == "refused":
            self.refused += 1
        elif kind == "dying":
            self.dying = [(m.split(":")[0], int(m.split(":")[1])) for m in rest]

    def finish(self) -> None:
        """Read what is left in the pipe (acks written before the kill count too), reap."""
        for _ in self.lines():
            pass
        _, stderr = self.proc.communicate(timeout=60)
        assert self.proc.returncode == -signal.SIGKILL, stderr.decode()[-2000:]


def spec_for(
    engine: str, where: dict[str, str], kill: str | None, branches: int = BRANCHES,
    late_refusals: int = 0,
) -> dict[str, Any]:
    return {
        "engine": engine, **where, "branches": branches, "appends": APPENDS, "kill": kill,
        "armed_after": ARMED_AFTER, "late_refusals": late_refusals,
    }


async def check_store(store: Store, child: Child) -> dict[str, int]:
    """The assertions of the module docstring; returns each branch's stored head seq."""
    heads: dict[str, int] = {}
    for root in await store.list_threads():
        chain = await store.read_chain(root.branch_id)  # log_corrupt if it doesn't chain
        stored = {e.seq: e.hash for e in chain.events}
        assert sorted(stored) == list(range(1, len(stored) + 1))
        for seq, digest in child.acks.get(root.branch_id, {}).items():
            assert stored.get(seq) == digest, f"acknowledged {root.branch_id}:{seq} is not stored"
        assert verify_export(await export_branch(store, root.branch_id)).head_verified
        heads[root.branch_id] = root.head_seq
    assert set(child.acks) <= set(heads)
    return heads


def run_drill(
    engine: str, where: dict[str, str], kill: str | None, reopen: Any, branches: int = BRANCHES,
    late_refusals: int = 0,
) -> Child:
    child = Child(spec_for(engine, where, kill, branches, late_refusals))
    solo = branches == 1
    seen = 0
    for line in child.lines():
        seen += line.startswith("ack")
        grouping = solo or max(child.groups, default=0) > 1
        if kill is None and seen >= ACKS_BEFORE_KILL and grouping:
            child.proc.kill()  # wherever it is: commits are happening all the time
            break
        assert line != "finished", "the child ran out of appends before it was killed"
    child.finish()
    if solo:
        assert not child.groups, "a lone writer's appends went to the store thread"
        assert child.in_place >= ARMED_AFTER, "it did not commit in place"
    else:
        assert max(child.groups) > 1, f"no group of two or more formed: {child.groups[:50]}"

    async def check() -> None:
        store = reopen()
        try:
            heads = await check_store(store, child)
            if kill in ("before_commit", "in_place_before_commit"):
                for branch, seq in child.dying:
                    assert heads[branch] == seq - 1, f"{branch}:{seq} was stored without COMMIT"
            if kill == "in_statement":
                stored = {heads[branch] - seq for branch, seq in child.dying}
                assert stored in ({-1}, {0}), f"the group was stored in part: {child.dying}"
                OUTCOMES.append(stored == {0})
            if kill in ("after_commit", "in_place_after_commit"):
                for branch, seq in child.dying:
                    assert heads[branch] >= seq, f"committed {branch}:{seq} is not stored"
        finally:
            await store.close()

    asyncio.run(check())
    acked = sum(len(a) for a in child.acks.values())
    SUMMARY.append(
        f"group commit drill [{engine}, kill {kill or 'by parent'}]: {acked} acks verified,"
        + (f" {child.in_place} appends committed in place" if solo else
           f" largest group {max(child.groups)}, {len(child.dying)} appends in the dying group")
    )
    return child


OUTCOMES: list[bool] = []  # in_statement kills on Postgres: was the dying group stored?


@pytest.mark.parametrize("kill", [None, "before_commit", "after_commit"])
def test_sqlite_group_commit_survives_sigkill(tmp_path: Path, kill: str | None) -> None:
    store_dir = tmp_path / "store"
    child = run_drill("sqlite", {"store": str(store_dir)}, kill, lambda: sqlite(store_dir))
    if kill is not None:
        assert len(child.dying) >= 2


def test_sqlite_groups_that_rerun_with_savepoints_survive_sigkill(tmp_path: Path) -> None:
    """Every tenth append of each branch is preceded by one refused after its fence (a reused
    event id): the groups holding those roll back and run again, a savepoint per append, while
    the parent's kill lands wherever it does."""
    store_dir = tmp_path / "store"
    child = run_drill("sqlite", {"store": str(store_dir)}, None, lambda: sqlite(store_dir),
                      late_refusals=10)
    assert child.refused >= BRANCHES
    SUMMARY.append(f"group commit drill [sqlite, late refusals]: {child.refused} appends refused"
                   " after their fence, their groups rerun with savepoints; acks verified")


@pytest.mark.parametrize("kill", [None, "in_place_before_commit", "in_place_after_commit"])
def test_sqlite_in_place_commit_survives_sigkill(tmp_path: Path, kill: str | None) -> None:
    store_dir = tmp_path / "store"
    child = run_drill("sqlite", {"store": str(store_dir)}, kill, lambda: sqlite(store_dir),
                      branches=1)
    if kill is not None:
        assert len(child.dying) == 1


IN_STATEMENT_KILLS = 6  # each at a random moment of a group's statement


@pytest.mark.parametrize("kill", [None, "in_statement", "after_commit"])
@needs_postgres
def test_postgres_group_commit_survives_sigkill(kill: str | None) -> None:
    from threads.store.postgres import postgres

    OUTCOMES.clear()
    for _ in range(IN_STATEMENT_KILLS if kill == "in_statement" else 1):
        schema = fresh_schema()
        try:
            child = run_drill(
                "postgres", {"url": URL, "schema": schema}, kill,
                lambda schema=schema: postgres(URL, schema=schema, max_size=2),
            )
            if kill is not None:
                assert len(child.dying) >= 2
        finally:
            asyncio.run(drop_schema(schema))
    if kill == "in_statement":
        SUMMARY.append(
            f"group commit drill [postgres, kill in_statement]: of {len(OUTCOMES)} dying groups,"
            f" {sum(OUTCOMES)} stored whole and {len(OUTCOMES) - sum(OUTCOMES)} not at all"
        )
