"""Randomized crash drill: many threads, each driven to completion through a seeded series of
SIGKILLs at random appends or inside a random tool's execute. Replay a run with
``THREADS_DRILL_SEED=<seed>``; the seed is printed in the summary and in every failure.

Asserted per thread: no duplicate application at the service, no lost or rewritten event (each
rerun's log starts with the bytes of the one before), contiguous seqs, each tool message checked
against the service (``tool_message_problems``: an operator's ``assume_done`` stands only for an
application the service recorded, an executed result is the service's receipt for its key), and
the transcript of an uncrashed run (``assume_done`` in place of the result it vouches for). A turn
whose request was cut by crashes more than ``CRASH_RESENDS`` times in a row ends ``error`` by
design (the harness checks the log proves it); those threads skip only the transcript check.
"""

from __future__ import annotations

import os
import random
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    ASSUMED_DONE,
    SUMMARY,
    Drill,
    call_keys,
    duplicates,
    human_decisions,
    log_events,
    tool_message_problems,
    transcript,
)

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

MIN_KILLS = int(os.environ.get("THREADS_DRILL_KILLS") or 120)  # scale up for a longer run
KILLS_PER_THREAD = 10
PARALLEL = 2
INPUTS = ["go", "thanks"]
TOOL_NAMES = ["look_up", "charge_card", "refund", "transfer", "send_email"]
PROFILE = "every_class"  # one call of each effect class per turn


def kill_plan(rng: random.Random) -> list[dict[str, Any]]:
    plan: list[dict[str, Any]] = []
    for _ in range(KILLS_PER_THREAD):
        if rng.random() < 0.3:
            plan.append({"in_execute": rng.choice(TOOL_NAMES), "nth": 1})
        else:
            plan.append({"append_no": rng.randint(1, 10)})
    return plan


def one_thread(root: Path, service: FakeService, seed: int, index: int) -> dict[str, Any]:
    rng = random.Random(f"{seed}:{index}")
    drill = Drill(root / f"t{index}", service)
    drill.drive(INPUTS, kill_plan(rng), max_runs=KILLS_PER_THREAD + 10, profile=PROFILE)
    events = log_events(drill.store_dir)
    dupes = duplicates(drill)
    snapshot = service.client().snapshot()
    counts = snapshot["counts"]
    lost = drill.prefix_breaks
    if [e["seq"] for e in events] != list(range(1, len(events) + 1)):
        lost += 1
    unapplied = [
        name
        for key, (_, name) in call_keys(events).items()
        if name != "look_up" and counts.get(key, 0) != 1
    ]
    return {
        "kills": drill.kills,
        "dupes": dupes,
        "lost": lost,
        "unapplied": unapplied,
        "tool_messages": tool_message_problems(events, snapshot),
        "transcript": transcript(events),
        "assumed": len(human_decisions(events)),
        "parked": len(drill.parked_keys),
        "index": index,
        "resend_bound": drill.resend_bound_hits > 0,
    }


@pytest.mark.timeout(900)
def test_random_kills(service: FakeService, tmp_path: Path) -> None:
    seed = int(os.environ.get("THREADS_DRILL_SEED") or random.SystemRandom().randrange(2**32))
    where = f"(replay with THREADS_DRILL_SEED={seed})"
    baseline_drill = Drill(tmp_path / "baseline", service)
    baseline_drill.drive(INPUTS, [], profile=PROFILE)
    baseline = transcript(log_events(baseline_drill.store_dir))
    results: list[dict[str, Any]] = []
    index = 0
    with ThreadPoolExecutor(PARALLEL) as pool:
        while sum(r["kills"] for r in results) < MIN_KILLS:
            batch = [
                pool.submit(one_thread, tmp_path, service, seed, index + i)
                for i in range(PARALLEL * 2)
            ]
            index += len(batch)
            results.extend(f.result() for f in batch)
    kills = sum(r["kills"] for r in results)
    dupes = sum(sum(n - 1 for n in r["dupes"].values()) for r in results)
    lost = sum(r["lost"] for r in results)
    parked = sum(r["parked"] for r in results)
    bounded = sum(r["resend_bound"] for r in results)
    SUMMARY.append(
        f"drill: {kills} kills over {len(results)} threads, {dupes} duplicates,"
        f" {lost} lost events, {parked} parks settled by an operator, {bounded} turns stopped"
        f" by the crash-resend bound (seed {seed})"
    )
    assert dupes == 0, f"duplicate effects {where}"
    assert lost == 0, f"lost or rewritten events {where}"
    for r in results:
        assert r["unapplied"] == [], f"thread {r['index']}: effects not applied once {where}"
        assert r["tool_messages"] == [], f"thread {r['index']}: {r['tool_messages']} {where}"
        if r["resend_bound"]:
            continue  # the turn ended by design before its reply: no transcript to compare
        expected = list(baseline)
        got = r["transcript"]
        assert len(got) == len(expected), f"thread {r['index']}: transcript differs {where}"
        for mine, theirs in zip(got, expected, strict=True):
            # an operator's assume_done stands only in a tool message's place
            vouched = theirs[0] == "tool" and mine == ("tool", ASSUMED_DONE)
            assert mine == theirs or vouched, (
                f"thread {r['index']}: transcript differs {where}: {mine} != {theirs}"
            )


def test_repeated_crashes_after_a_request_stop_at_the_resend_bound(
    service: FakeService, tmp_path: Path
) -> None:
    """Three kills in a row right after the turn's model_request: the loop stops resending
    (the bound), the harness recognises that from the log, and nothing was applied twice."""
    drill = Drill(tmp_path / "bounded", service)
    after_request = {"type": "model_request", "tool": None, "nth": 1}
    outcome = drill.drive(INPUTS, [after_request] * 3, profile=PROFILE)
    assert outcome == {"status": "resend_bound"}
    assert drill.kills == 3
    events = log_events(drill.store_dir)
    assert [e["data"]["attempt"] for e in events if e["type"] == "model_request"] == [1, 2, 3]
    assert events[-1]["data"] == {"reason": "error"}
    assert duplicates(drill) == {}
