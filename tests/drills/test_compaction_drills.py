"""Compaction crash drills (issue 32 item 3): a worker process is SIGKILLed right after each
durable boundary of a compaction (the operator's ``compaction_requested``, the summarizer's
``model_request``, its ``model_response``, the ``compacted`` that stores the summary), for a
threshold compaction and a requested one, and (in a chat whose tool results an extension
redacts and the run clears) after a result's append with its guardrail edit and after the first
clear; then the thread is run again in a fresh process.

Each case pins where the kill landed (the last durable event, read right after the SIGKILL),
then asserts: the old log is a byte prefix of the new one; every summarizer reply is used by
exactly one outcome (one summary per compaction, never a second request for a reply the log
holds); no request the log shows answered was sent again; the thread replays and reads; the
conversation equals an uncrashed run's; and one more run appends nothing.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from drill_harness import SUMMARY, Drill, log_events

from threads import open_thread
from threads.store.sqlite import SQLiteStore
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

WORKER = Path(__file__).with_name("compaction_worker.py")
TURNS = 5  # at ~190 tokens a turn, the 600-token threshold is passed by the fourth
INPUTS = [f"message {i} " + "words " * 60 for i in range(TURNS)]
MANUAL_AT = 2  # the operator asks after this many turns (of three: no threshold then)

KILLS: dict[str, tuple[dict[str, Any], str]] = {  # kill point, the last durable event then
    "after_compaction_requested": ({"type": "compaction_requested", "nth": 1},
                                   "compaction_requested"),
    "after_summarizer_request": ({"type": "model_request", "purpose": "compaction", "nth": 1},
                                 "model_request"),
    "after_summarizer_response": ({"type": "model_response", "side": True, "nth": 1},
                                  "model_response"),
    "after_summary": ({"type": "compacted", "nth": 1}, "compacted"),
    # with tools: the first result's append, whose guardrail edit is in it (a result is held
    # for the next append, so the next request closes that batch); the first clear
    "after_guardrail_edit": ({"type": "context_edited", "reason": "guardrail", "nth": 1},
                             "model_request"),
    "after_clear": ({"type": "context_edited", "reason": "threshold", "nth": 1},
                    "context_edited"),
}
EDITS = ("after_guardrail_edit", "after_clear")
MATRIX = [
    *[("threshold", b) for b in KILLS if b not in ("after_compaction_requested", *EDITS)],
    *[("requested", b) for b in KILLS if b not in EDITS],
    *[("tools", b) for b in (*EDITS, "after_summarizer_response", "after_summary")],
]


def chat(drill: Drill, mode: str, kill: dict[str, Any] | None) -> None:
    """The whole chat, one worker run per turn (a requested compaction in a run of its own);
    the kill point is armed until it fires, and a killed run is simply run again."""
    fields: dict[str, Any] = {"threshold": mode != "requested", "tools": mode == "tools"}
    armed = kill
    steps: list[tuple[str | None, bool]] = [(text, False) for text in INPUTS]
    if mode == "requested":
        steps = [*steps[:MANUAL_AT], (None, True), steps[MANUAL_AT]]
    for text, compact in steps:
        thread = drill.thread_id() if log_events(drill.store_dir) else None
        result = drill.run(thread=thread, input=text, kill=armed, compact=compact, **fields)
        if result["status"] == "killed":
            armed = None
            result = drill.run(thread=drill.thread_id(), input=None, **fields)
        assert result["status"] == "completed", result


def conversation(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    side = {e["event_id"] for e in events
            if e["type"] == "model_request" and e["data"].get("purpose") == "compaction"}
    out = []
    for e in events:
        if e["type"] == "user_input":
            out.append(("user", e["data"]["text"]))
        elif e["type"] == "model_response" and e["data"]["request_event_id"] not in side:
            out.append(("assistant", e["data"]["content"][0].get("text", "tool_use")))
        elif e["type"] == "context_edited":
            out.append(("edit", json.dumps(e["data"], sort_keys=True)))
    return out


def one_outcome_per_reply(events: list[dict[str, Any]]) -> None:
    side = [e for e in events
            if e["type"] == "model_request" and e["data"].get("purpose") == "compaction"]
    answered = {e["data"]["request_event_id"] for e in events if e["type"] == "model_response"}
    named = [e["data"].get("summary_request_event_id") or e["data"].get("request_event_id")
             for e in events if e["type"] in ("compacted", "compaction_failed")]
    for request in side:
        if request["event_id"] in answered:
            assert named.count(request["event_id"]) == 1, "a summarizer reply used twice/never"
    # a request is sent again only after its attempt was abandoned, never once answered
    by_bytes: dict[str, int] = {}
    for e in events:
        if e["type"] == "model_request" and e["event_id"] in answered:
            sha = e["data"]["request_ref"]["sha256"]
            by_bytes[sha] = by_bytes.get(sha, 0) + 1
    assert all(n == 1 for n in by_bytes.values()), "an answered request was sent again"


async def _replays(drill: Drill) -> bool:
    store = SQLiteStore(drill.store_dir)
    try:
        thread = await open_thread(store, drill.thread_id())
        await thread.fold()  # reads: every rule holds
        return (await thread.replay()).ok
    finally:
        await store.close()


Baseline = Callable[[str], list[tuple[str, str]]]


@pytest.fixture(scope="module")
def baseline(service: FakeService, tmp_path_factory: pytest.TempPathFactory) -> Baseline:
    """The uncrashed conversation of a mode, run once per module when a case first needs it."""
    out: dict[str, list[tuple[str, str]]] = {}

    def of(mode: str) -> list[tuple[str, str]]:
        if mode not in out:
            drill = Drill(tmp_path_factory.mktemp("baseline"), service, worker=WORKER)
            chat(drill, mode, None)
            events = log_events(drill.store_dir)
            assert any(e["type"] == "compacted" for e in events)
            out[mode] = conversation(events)
        return out[mode]

    return of


@pytest.mark.timeout(300)  # the first case of a mode also runs its baseline
@pytest.mark.parametrize(("mode", "boundary"), MATRIX)
def test_a_kill_at_each_compaction_boundary(
    mode: str, boundary: str, service: FakeService, tmp_path: Path,
    baseline: Baseline,
) -> None:
    kill, last = KILLS[boundary]
    expected = baseline(mode)
    drill = Drill(tmp_path, service, worker=WORKER)
    chat(drill, mode, kill)
    assert drill.kills == 1
    assert drill.at_kill[0].last_type == last
    events = log_events(drill.store_dir)
    assert drill.prefix_breaks == 0
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    compacted = [e for e in events if e["type"] == "compacted"]
    assert compacted
    assert not [e for e in events if e["type"] == "compaction_failed"]
    if mode == "requested":
        assert compacted[0]["data"]["trigger"] == "manual"
    one_outcome_per_reply(events)
    assert asyncio.run(_replays(drill))
    assert conversation(events) == expected
    if mode == "tools":  # every result redacted in its own append; old ones cleared
        results = [e for e in events if e["type"] == "tool_result"]
        guarded = [e for e in events if e["type"] == "context_edited"
                   and e["data"]["reason"] == "guardrail"]
        assert len(guarded) == len(results) == TURNS
        assert all(events[r["seq"] + 1]["data"]["edits"][0]["call_id"] == r["data"]["call_id"]
                   for r in results)  # the hook's decision, then the edit, after each result
        assert any(e["type"] == "context_edited" and e["data"]["reason"] == "threshold"
                   for e in events)
    assert drill.rerun_adds_nothing(threshold=mode != "requested", tools=mode == "tools")
    SUMMARY.append(f"compaction drill {mode}/{boundary}: {len(events)} events,"
                   f" {len(compacted)} compactions, 1 kill, replay ok")
