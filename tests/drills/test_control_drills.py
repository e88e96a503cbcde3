"""Control drills: human controls across SIGKILLed worker processes.

(a) a crash while parked for approval, approval from another process, rerun: the call runs
once; (b) a crash after ``cancel_requested`` never runs the unstarted call, and a crash right
after the request that a cancel queued during a tool overtook never sends it; (c) randomized
(seeded; ``THREADS_DRILL_SEED`` replays) crashes between a budget check and its model request:
recorded spend (known usage + in-doubt attempts at their bound) never exceeds the limit, and a
stop's ``observed`` counts each attempt once.
"""

from __future__ import annotations

import os
import random
import sqlite3
from pathlib import Path
from typing import Any

import pytest
from drill_harness import (
    KILLED,
    LEASE_PAST_MS,
    STARTER,
    SUMMARY,
    Drill,
    call_keys,
    log_events,
)

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

ASK = ["send_email"]
INPUTS = ["go", "thanks"]
PRICE = [1, 3]  # nano-units per input / output token
BOUND = 200_000 * PRICE[0] + 1024 * PRICE[1]  # scripted model: window 200k, max output 1024
TRIALS = int(os.environ.get("THREADS_CONTROL_DRILL_TRIALS", "20"))


def email_key(drill: Drill) -> str:
    events = log_events(drill.store_dir)
    [key] = [k for k, (_, name) in call_keys(events).items() if name == "send_email"]
    return key


def applied(drill: Drill, key: str) -> int:
    return int(drill.service.client().count(key))


def types(drill: Drill) -> list[str]:
    return [e["type"] for e in log_events(drill.store_dir)]


def test_crash_while_parked_for_approval_then_approve_elsewhere(
    service: FakeService, tmp_path: Path
) -> None:
    drill = Drill(tmp_path, service)
    killed = drill.run(input="go", ask=ASK, kill={"type": "approval_requested", "nth": 1})
    assert killed["status"] == "killed"
    # the challenge and its park are one append, made once every call of the reply is
    # recorded and decided: the kill lands after both
    assert [e["type"] for e in log_events(drill.store_dir)][-2:] == [
        "approval_requested", "parked"
    ]
    thread = drill.thread_id()
    parked = drill.run(thread=thread, ask=ASK)
    assert parked["status"] == "parked"
    [[kind, challenge]] = parked["pending"]
    assert kind == "approval"
    key = email_key(drill)
    assert applied(drill, key) == 0
    drill.act(lambda t: t.approve(challenge, STARTER))  # another process than any worker
    killed = drill.run(thread=thread, ask=ASK,
                       kill={"type": "effect_commit", "tool": "send_email", "nth": 1})
    assert killed["status"] == "killed"
    assert drill.run(thread=thread, ask=ASK)["status"] == "completed"
    assert drill.run(thread=thread, input="thanks", ask=ASK)["status"] == "completed"
    assert applied(drill, key) == 1
    assert types(drill).count("effect_begin") >= 1
    assert drill.prefix_breaks == 0


@pytest.mark.parametrize("approved", [True, False])
def test_crash_after_cancel_never_runs_the_unstarted_call(
    service: FakeService, tmp_path: Path, approved: bool
) -> None:
    drill = Drill(tmp_path, service)
    parked = drill.run(input="go", ask=ASK)
    assert parked["status"] == "parked"
    [[_, challenge]] = parked["pending"]
    if approved:
        drill.act(lambda t: t.approve(challenge, STARTER))
    drill.act(lambda t: t.cancel(STARTER))
    thread = drill.thread_id()
    # die right after the first append that follows the barrier, then again on the next
    assert drill.run(thread=thread, ask=ASK, kill={"append_no": 1})["status"] == "killed"
    assert drill.run(thread=thread, ask=ASK)["status"] == "cancelled"
    assert drill.run(thread=thread, ask=ASK)["status"] == "completed"  # nothing left to do
    key = email_key(drill)
    assert applied(drill, key) == 0
    events = log_events(drill.store_dir)
    call_id = key.split(":", 1)[1]
    [res] = [e for e in events if e["type"] == "tool_result" and e["data"]["call_id"] == call_id]
    assert res["data"]["origin"] == "not_executed"
    assert [e["type"] for e in events][-2:] == ["cancelled", "turn_completed"]
    assert "effect_begin" not in [
        e["type"] for e in events if e["data"].get("call_id") == call_id
    ]


def test_crash_after_the_request_a_queued_cancel_overtook_never_sends_it(
    service: FakeService, tmp_path: Path
) -> None:
    """A cancel is queued from another process while the first tool runs; the worker dies
    right after the next ``model_request`` commits, before it sees the cancel there. The
    rerun finds that request open: it is abandoned as a crash and the cancel is recorded
    before any resend, so the model is never asked again and no later call runs."""
    drill = Drill(tmp_path, service)
    client = service.client()
    holder = drill.spawn(input="go", gate="queued-cancel",
                         kill={"type": "model_request", "nth": 2})
    client.await_waiting("queued-cancel")
    drill.act(lambda t: t.queue_cancel(STARTER))  # the holder's lease is live: queued
    client.open_gate("queued-cancel")
    holder.communicate(timeout=60)
    assert holder.returncode == KILLED
    drill.kills += 1
    drill.advance(LEASE_PAST_MS)
    at_kill = log_events(drill.store_dir)
    assert [e["type"] for e in at_kill][-2:] == ["tool_result", "model_request"]
    request = at_kill[-1]
    assert drill.run(thread=drill.thread_id())["status"] == "cancelled"

    events = log_events(drill.store_dir)
    after = events[len(at_kill):]
    assert [e["type"] for e in after] == [
        "model_attempt_abandoned", "cancel_requested", "cancelled", "turn_completed",
    ]
    assert after[0]["data"]["request_event_id"] == request["event_id"]
    assert after[0]["data"]["reason"] == "crash"
    assert [e["type"] for e in events].count("model_request") == 2  # no resend
    assert [name for _, name in call_keys(events).values()] == ["look_up"]
    with sqlite3.connect(drill.store_dir / "threads.db") as db:
        assert db.execute("SELECT count(*) FROM inbox WHERE consumed_seq IS NULL").fetchone() \
            == (0,)
    assert drill.prefix_breaks == 0


# ---- (c) budgets ---------------------------------------------------------------------------


def attempt_spend(events: list[dict[str, Any]]) -> int:
    """Spend as the log records it: a reported reply at its price, an unreported reply and an
    attempt in doubt (or still open) at its bound, a provably unsent attempt at zero."""
    total = 0
    for request in (e for e in events if e["type"] == "model_request"):
        ends = [e for e in events if e["data"].get("request_event_id") == request["event_id"]
                and e["type"] in ("model_response", "model_response_recovered",
                                  "model_attempt_abandoned")]
        end = ends[0] if ends else None
        if end is None or end["type"] == "model_attempt_abandoned":
            sent = end is None or end["data"]["provider_outcome"] != "not_sent"
            total += BOUND if sent else 0
            continue
        usage = end["data"]["usage"]
        inp, out = usage.get("input_tokens"), usage.get("output_tokens")
        total += BOUND if inp is None or out is None else inp * PRICE[0] + out * PRICE[1]
    return total


def random_kills(rng: random.Random) -> list[dict[str, Any] | None]:
    kills: list[dict[str, Any] | None] = []
    for _ in range(rng.randint(0, 4)):
        if rng.random() < 0.8:  # after the request is durable, before it is sent
            kills.append({"type": "model_request", "nth": rng.randint(1, 3)})
        else:
            kills.append({"append_no": rng.randint(1, 6)})
    return kills


def budget_trial(drill: Drill, limit: int, kills: list[dict[str, Any] | None]) -> str:
    spec = {"budget": {"max_cost_nanos": limit}, "price": PRICE}
    for _ in range(40):
        events = log_events(drill.store_dir)
        given = sum(1 for e in events if e["type"] == "user_input")
        open_turn = given > sum(1 for e in events if e["type"] == "turn_completed")
        if events and not open_turn and given == len(INPUTS):
            return "done"
        text = INPUTS[given] if not open_turn else None
        thread = drill.thread_id() if events else None
        result = drill.run(thread=thread, input=text, kill=kills.pop(0) if kills else None,
                           **spec)
        if result["status"] == "parked":
            for _, key in result["pending"]:
                # a park right after a takeover: the operator waits out the window in which
                # the killed holder could still be sending, as ``settle_park`` does
                drill.settle_park(key, drill.operator_decision)
    raise AssertionError("the budget trial did not settle within 40 worker runs")


@pytest.mark.timeout(400)
def test_randomized_crashes_never_overspend(service: FakeService, tmp_path: Path) -> None:
    seed = int(os.environ.get("THREADS_DRILL_SEED") or random.SystemRandom().randrange(2**32))
    print(f"control budget drill seed={seed}")
    rng = random.Random(seed)
    within = stops = kills = in_doubt = 0
    for trial in range(TRIALS):
        limit = rng.randint(2 * BOUND, 4 * BOUND)
        drill = Drill(tmp_path / f"t{trial}", service)
        budget_trial(drill, limit, random_kills(rng))
        events = log_events(drill.store_dir)
        spent = attempt_spend(events)
        assert spent <= limit, f"seed={seed} trial={trial}: spent {spent} > limit {limit}"
        for i, event in enumerate(events):
            if event["type"] == "budget_exceeded":
                stops += 1
                # observed = what was spent before the stop + one reservation, counted once
                assert event["data"]["observed"] == attempt_spend(events[:i]) + BOUND
        within += 1
        kills += drill.kills
        in_doubt += sum(
            1 for e in events
            if e["type"] == "model_attempt_abandoned" and e["data"]["provider_outcome"] == "unknown"
        )
        assert drill.prefix_breaks == 0
    line = (f"control budget drill: seed={seed} trials={TRIALS} within_limit={within}/{TRIALS}"
            f" sigkills={kills} in_doubt_attempts={in_doubt} budget_stops={stops}")
    SUMMARY.append(line)
    print(line)
    assert within == TRIALS
