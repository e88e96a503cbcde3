"""Kills while threads start leave no thread without input (issue 28 item 7).

Worker processes start new threads on one SQLite store and are SIGKILLed right after the
branch is created (the boundary where a thread used to hold ``thread_started`` alone), right
after their first append, and at random moments while starting. Then ``threads ls`` lists only
threads whose log holds a ``user_input`` (none without), and ``threads verify --store`` passes.
``THREADS_EMPTY_DRILL_KILLS`` scales the random kills.
"""

from __future__ import annotations

import json
import os
import random
import time
from pathlib import Path

import pytest
from drill_harness import KILLED, STARTER, SUMMARY, Drill, branch_lines

from threads.cli.main import main
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

RANDOM_KILLS = int(os.environ.get("THREADS_EMPTY_DRILL_KILLS") or 6)


def with_input(store_dir: Path) -> set[str]:
    """The thread ids whose stored log holds a user_input."""
    out = set()
    for lines in branch_lines(store_dir).values():
        events = [json.loads(line) for line in lines]
        if any(e["type"] == "user_input" for e in events):
            out.add(str(events[0]["thread_id"]))
    return out


def test_no_kill_while_starting_leaves_a_listed_thread_without_input(
    service: FakeService, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    drill = Drill(tmp_path, service)
    fields = {"profile": "one_call", "tool": "look_up", "http_port": service.http_port}
    for kill in ({"created": True}, {"append_no": 1}):
        assert drill.run(input="go", kill=kill, **fields)["status"] == "killed"
    rng = random.Random(int(os.environ.get("THREADS_DRILL_SEED") or 7))
    for _ in range(RANDOM_KILLS):
        proc = drill.spawn(input="go", **fields)
        time.sleep(rng.uniform(0.0, 1.5))  # a random kill point, not a wait for a lease
        proc.kill()
        proc.communicate(timeout=60)
        assert proc.returncode in (KILLED, 0)
    capsys.readouterr()
    store = str(drill.store_dir)
    assert main(["ls", "--store", store, "--tenant", STARTER.tenant]) == 0
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines()[1:]}
    assert len(listed) >= 2  # the two killed at the named boundaries are there, with input
    assert listed <= with_input(drill.store_dir), listed - with_input(drill.store_dir)
    assert main(["verify", "--store", store]) == 0
    SUMMARY.append(
        f"empty-thread drill: {2 + RANDOM_KILLS} starts killed (after create, after the first"
        f" append, {RANDOM_KILLS} at random), {len(listed)} threads listed, 0 without input"
    )
