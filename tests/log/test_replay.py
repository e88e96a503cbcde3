"""Replay and Render v1 of what other writers record: every recorded request re-renders to its
request_ref, the first one that does not is reported with its code and seq, and artifacts a
rendered part needs are verified (missing, damaged, not UTF-8)."""

from __future__ import annotations

import json
from typing import Any

from threads.clock import FakeClock
from threads.log.hashing import sha256_hex, value_hash
from threads.log.lines import Event
from threads.log.render import render
from threads.log.replay import replay
from threads.testing.sample_log import HOST, MODEL, USER, SampleLog

MEMORY = b"User prefers short answers."
MEMORY_REF = {"bytes": len(MEMORY), "media_type": "text/plain", "sha256": sha256_hex(MEMORY)}
PNG = b"\x89PNG\r\n\x1a\n fixture"
IMAGE = {
    "type": "image_ref", "width": 10, "height": 10,
    "ref": {"bytes": len(PNG), "media_type": "image/png", "sha256": sha256_hex(PNG)},
}


def thread() -> SampleLog:
    log = SampleLog(FakeClock(1790000000000))
    log.started()
    return log


def request(log: SampleLog, artifacts: dict[str, bytes] | None = None, **override: Any) -> Event:
    events = [e for _, segment in log.segments() for e in segment]
    rendered = render(events[0].data, events, artifacts)
    data = {"attempt": 1, "declared_prefix": rendered.declared_prefix(),
            "request_ref": rendered.request_ref()}
    return log.add("model_request", {**data, **override})


def respond(log: SampleLog, req: Event, text: str = "ok") -> None:
    log.add("model_response", {
        "completeness": "complete", "content": [{"type": "text", "text": text}],
        "request_event_id": req.event_id, "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }, MODEL)
    log.add("turn_completed", {"reason": "end_turn"})


def memory(log: SampleLog, **body: Any) -> Event:
    return log.add("injected", {
        "origin": {"id": "mem_1"}, "source": "memory", "trust": "untrusted_reference", **body,
    })


def test_every_request_of_a_written_log_replays() -> None:
    log = thread()
    log.turn()
    log.turn(text="Again?")
    assert replay(log.events, {}).requests == 2


def test_the_first_request_that_does_not_rerender_is_reported_at_its_seq() -> None:
    log = thread()
    log.turn()
    log.add("user_input", {"source": "api", "text": "next"}, USER)
    stale = render(log.events[0].data, log.events)
    memory(log, text="prefers long answers")  # the request below does not show this
    tampered = log.add("model_request", {
        "attempt": 1, "declared_prefix": stale.declared_prefix(),
        "request_ref": stale.request_ref(),
    })
    result = replay(log.events, {})
    assert result.requests == 1
    assert result.mismatch is not None
    assert (result.mismatch.code, result.mismatch.seq) == ("request_hash_mismatch", tampered.seq)


def test_a_declared_prefix_that_is_not_line_0_is_prefix_changed() -> None:
    log = thread()
    log.add("user_input", {"source": "api", "text": "hi"}, USER)
    req = request(log, declared_prefix={"bytes": 1, "sha256": "0" * 64})
    result = replay(log.events, {})
    assert result.mismatch is not None
    assert (result.mismatch.code, result.mismatch.seq) == ("prefix_changed", req.seq)


def test_injected_text_by_artifact_renders_in_its_reference_wrapper() -> None:
    log = thread()
    log.add("user_input", {"source": "api", "text": "hi"}, USER)
    memory(log, ref=MEMORY_REF)
    artifacts = {MEMORY_REF["sha256"]: MEMORY}
    request(log, artifacts)
    assert replay(log.events, artifacts).ok
    last = render(log.events[0].data, log.events, artifacts).messages[-1]
    assert last["content"][0]["text"] == (
        '<reference source="memory" id="mem_1" untrusted="true">\n'
        "User prefers short answers.\n</reference>"
    )


def test_artifacts_a_request_needs_are_verified_at_the_event_that_needs_them() -> None:
    log = thread()
    log.add("user_input", {"source": "api", "text": "hi"}, USER)
    injected = memory(log, ref=MEMORY_REF)
    request(log, {MEMORY_REF["sha256"]: MEMORY})
    for artifacts, code in (
        ({}, "artifact_missing"),
        ({MEMORY_REF["sha256"]: MEMORY[:-1] + b"!"}, "artifact_corrupt"),
    ):
        mismatch = replay(log.events, artifacts).mismatch
        assert mismatch is not None
        assert (mismatch.code, mismatch.seq) == (code, injected.seq)
    bad = b"prefers \xff\xfe short"
    log2 = thread()
    log2.add("user_input", {"source": "api", "text": "hi"}, USER)
    ref = {"bytes": len(bad), "media_type": "text/plain", "sha256": sha256_hex(bad)}
    at = memory(log2, ref=ref)
    log2.add("model_request", {"attempt": 1, "declared_prefix": request_prefix(log2),
                               "request_ref": {"bytes": 1, "media_type": "application/x-ndjson",
                                               "sha256": "0" * 64}})
    mismatch = replay(log2.events, {ref["sha256"]: bad}).mismatch
    assert mismatch is not None
    assert (mismatch.code, mismatch.seq) == ("artifact_corrupt", at.seq)


def request_prefix(log: SampleLog) -> dict[str, Any]:
    return render(log.events[0].data, []).declared_prefix()


def test_images_in_input_and_results_render_as_recorded() -> None:
    log = thread()
    log.add("user_input", {"source": "api", "content": [{"type": "text", "text": "see"}, IMAGE]},
            USER)
    artifacts = {IMAGE["ref"]["sha256"]: PNG}
    rendered = render(log.events[0].data, log.events, artifacts)
    assert rendered.messages[-1] == {"role": "user", "content": [{"type": "text", "text": "see"},
                                                                 IMAGE]}


def test_tools_changed_renders_a_line_and_line_0_stays() -> None:
    log = thread()
    started = log.events[0].data
    before = render(started, log.events)
    tools = [*started["tools"], {**started["tools"][0], "name": "write_file"}]
    log.add("tools_changed", {"tools": tools, "tools_hash": value_hash(tools)})
    after = render(started, log.events)
    assert after.declared_prefix() == before.declared_prefix()
    assert after.data.startswith(before.data)
    assert [t["name"] for t in json.loads(after.data.splitlines()[1])["tools"]] == [
        "read_file", "write_file",
    ]
    assert after.messages == []  # adapters get the current set separately


def test_a_denied_input_renders_nothing() -> None:
    log = thread()
    denied = log.add("user_input", {"source": "api", "text": "rm -rf /"}, USER)
    log.add("hook_decision", {"decision": "deny", "extension": "guard", "hook": "before_input",
                              "input_event_id": denied.event_id})
    assert render(log.events[0].data, log.events).messages == []


def test_omit_prior_drops_earlier_reasoning_from_later_renders() -> None:
    thinking = b'{"thinking":"hm","type":"thinking"}'
    ref = {"bytes": len(thinking), "media_type": "application/json", "sha256": sha256_hex(thinking)}
    part = {"format": "thinking", "model": "scripted-1", "provider": "scripted", "ref": ref,
            "type": "reasoning"}
    log = thread()
    log.add("user_input", {"source": "api", "text": "hi"}, USER)
    artifacts = {ref["sha256"]: thinking}
    req = request(log)
    log.add("model_response", {
        "completeness": "complete", "content": [part, {"type": "text", "text": "Hello"}],
        "request_event_id": req.event_id, "stop_reason": "end_turn",
        "usage": {"input_tokens": 1, "output_tokens": 1},
    }, MODEL)
    log.add("turn_completed", {"reason": "end_turn"}, HOST)
    kept = render(log.events[0].data, log.events, artifacts).messages[-1]
    assert kept["content"][0] == part
    settings = {"adapter": log.events[0].data["adapter"], "model": log.events[0].data["model"],
                "model_params": {"max_tokens": 1024}, "reasoning_carryover": "omit_prior"}
    log.add("settings_changed", {"reason": "user", "settings": settings}, USER)
    omitted = render(log.events[0].data, log.events, artifacts).messages[-1]
    assert omitted["content"] == [{"type": "text", "text": "Hello"}]
