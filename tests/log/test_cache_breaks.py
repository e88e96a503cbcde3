"""The ``cache_breaks`` rule (digest §1.9): a break is a turn response reading under 95% of the
previous one's cached tokens and at least 2,000 fewer; its likely cause is the first
``settings_changed``/``compacted``/``context_edited``/``tools_changed`` since the previous
response, else ``ttl_expired`` past the cache TTL, else ``unknown``. A thread without a context
policy projects none."""

from __future__ import annotations

import pytest

from compaction_log import CompactionLog
from threads.log.fold.cache_breaks import CacheBreaks

TTL = 300_000
STARTED = {"policy": {"context": {"cache_ttl_ms": TTL}}}  # what on_response reads of it


def judged(prev: int, now: int, *, cause: str | None = None, gap: int = 1_000) -> list[str]:
    breaks = CacheBreaks()
    breaks.on_response({"cache_read_tokens": prev}, "r1", 0, 10, STARTED)
    if cause is not None:
        breaks.on_cause(cause)  # type: ignore[arg-type]
    breaks.on_response({"cache_read_tokens": now}, "r2", 10 + gap, 20 + gap, STARTED)
    return [f"{b['request_event_id']}:{b['likely_cause']}" for b in breaks.breaks]


@pytest.mark.parametrize(("prev", "now", "broke"), [
    (100_000, 95_000, False),  # exactly 95%: 20*now == 19*prev
    (100_000, 94_999, True),
    (40_000, 38_000, False),  # 95% of it
    (39_999, 37_999, True),  # under 95% and exactly 2,000 fewer
    (30_000, 28_001, False),  # under 95%, 1,999 fewer
    (3_000, 0, True),
])
def test_a_break_is_a_drop_under_95_percent_and_of_2000_tokens(
    prev: int, now: int, broke: bool
) -> None:
    assert judged(prev, now) == (["r2:unknown"] if broke else [])


def test_the_first_cause_since_the_previous_response_is_named() -> None:
    breaks = CacheBreaks()
    breaks.on_cause("compacted")  # before any counted response: nothing to compare
    breaks.on_response({"cache_read_tokens": 9_000}, "r1", 0, 10, STARTED)
    breaks.on_cause("context_edited")
    breaks.on_cause("compacted")
    breaks.on_response({"cache_read_tokens": 100}, "r2", 20, 30, STARTED)
    breaks.on_response({"cache_read_tokens": 9_000}, "r3", 40, 50, STARTED)
    breaks.on_response({"cache_read_tokens": 100}, "r4", 50 + TTL + 1, 60 + TTL, STARTED)
    breaks.on_response({"cache_read_tokens": 9_000}, "r5", 70 + TTL, 80 + TTL, STARTED)
    breaks.on_response({"cache_read_tokens": 100}, "r6", 80 + 2 * TTL, 90 + 2 * TTL, STARTED)
    assert [(b["request_event_id"], b["likely_cause"]) for b in breaks.breaks] == [
        ("r2", "context_edited"), ("r4", "ttl_expired"), ("r6", "unknown"),  # TTL not passed
    ]


def test_a_response_without_a_cache_count_is_not_compared() -> None:
    breaks = CacheBreaks()
    breaks.on_response({"cache_read_tokens": 9_000}, "r1", 0, 10, STARTED)
    breaks.on_response({"cache_read_tokens": None}, "r2", 20, 30, STARTED)
    breaks.on_response({}, "r3", 40, 50, STARTED)
    breaks.on_response({"cache_read_tokens": 100}, "r4", 60, 70, STARTED)
    assert [b["request_event_id"] for b in breaks.breaks] == ["r4"]  # against r1


def test_without_a_context_policy_the_projection_is_null() -> None:
    log = CompactionLog()
    log.turn()
    assert log.read().projections()["cache_breaks"] is None
