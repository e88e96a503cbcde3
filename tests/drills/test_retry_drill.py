"""Retry drill: a worker is SIGKILLed right after ``retry_scheduled`` is durable (the provider
answered 429 with Retry-After); a fresh worker, started before the recorded ``not_before``,
waits it out on the store's clock before resending (attempt 2), and the turn completes."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from drill_harness import LEASE_PAST_MS, Drill, log_events

from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

RETRY_AFTER_MS = 5_000


def test_a_restarted_run_waits_for_the_recorded_retry(service: FakeService, tmp_path: Path) -> None:
    drill = Drill(tmp_path, service)
    fields = {"profile": "rate_limited", "retry_after_ms": RETRY_AFTER_MS}
    killed = drill.run(input="go", kill={"type": "retry_scheduled", "nth": 1}, **fields)
    assert killed["status"] == "killed"
    [state] = drill.at_kill
    assert state.last_type == "retry_scheduled"
    assert state.last is not None
    not_before = state.last["data"]["not_before"]
    # The harness moved the clock past the dead holder's lease; a holder that died on this host
    # is taken over at once, so move it back: the restart then comes before not_before.
    drill.advance(-LEASE_PAST_MS)
    started = time.time_ns() // 1_000_000 + drill.offset_ms
    assert started < not_before, "the restart came too late to show the wait"
    # the new process's model answers at once: any wait is the recorded one
    result = drill.run(thread=drill.thread_id(), input=None, profile="rate_limited")
    assert result["status"] == "completed"
    assert result["output"] == "all done"
    events = log_events(drill.store_dir)
    requests = [e for e in events if e["type"] == "model_request"]
    assert [r["data"]["attempt"] for r in requests] == [1, 2]
    assert requests[1]["time"] >= not_before  # nothing was sent before the recorded time
    assert [e["type"] for e in events].count("retry_scheduled") == 1
