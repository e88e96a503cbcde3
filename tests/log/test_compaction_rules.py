"""Compaction as the format records it (rules 10 and 30): a log another writer compacted reads,
folds and replays; each log that breaks a rule is refused at that event's seq."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from compaction_log import CompactionLog
from threads.log.canonical import canonical
from threads.log.hashing import value_hash
from threads.log.render import render
from threads.log.render_context import SUMMARIZE
from threads.log.replay import replay


def requested_log(instructions: str | None = "Keep the file names.") -> CompactionLog:
    log = CompactionLog()
    log.turn("first", "one")
    log.turn("second", "two")
    log.requested(instructions)
    return log


def manual(log: CompactionLog) -> None:
    """The summarizer serves the unanswered request between turns, and it is answered."""
    cause = next(e for e in log.events if e.type == "compaction_requested")
    first = next(e for e in log.events if e.type == "user_input")
    last = log.events[cause.seq - 2]
    log.summarize(first, last, "The user said first and second.", cause=cause, trigger="manual")


def test_a_requested_compaction_reads_between_turns() -> None:
    log = requested_log()
    manual(log)
    log.turn("third", "three")
    fold = log.read()
    roles = [role for role, _ in fold.transcript]
    # the range is one summary; the summarizer's reply is no assistant turn
    assert roles == ["summary", "user", "assistant"]
    assert fold.turns_completed == 3
    assert fold.compaction.requested is None
    assert fold.projections()["compaction"] == {"consecutive_failures": 0, "breaker_open": False}
    # its usage is still spent: 4 requests of 10 input tokens
    assert fold.input_tokens == 40
    assert replay(log.events, log.artifacts).requests == 4


def _open_turn(log: CompactionLog) -> None:
    log.user("busy")
    log.requested()


def _no_input(log: CompactionLog) -> None:
    log.requested()


def _twice(log: CompactionLog) -> None:
    log.turn()
    log.requested()
    log.requested()


@pytest.mark.parametrize("write", [_open_turn, _no_input, _twice], ids=lambda f: f.__name__)
def test_a_compaction_request_needs_an_idle_thread_with_input(
    write: Callable[[CompactionLog], None],
) -> None:
    log = CompactionLog()
    write(log)
    log.refused_at_last()


def test_a_side_request_between_turns_serves_a_request() -> None:
    log = CompactionLog()
    log.turn()
    log.side_request()  # nothing was requested: no turn for it
    assert "outside a turn" in log.refused_at_last().message


def test_while_a_request_is_unanswered_side_requests_name_it() -> None:
    log = requested_log()
    log.user("more")
    log.side_request()  # a threshold compaction in the next turn, not naming the request
    log.refused_at_last()


def test_a_side_request_names_no_answered_request() -> None:
    log = requested_log()
    manual(log)
    cause = next(e for e in log.events if e.type == "compaction_requested")
    log.user("more")
    log.side_request(cause)
    log.refused_at_last()


def test_a_failure_answers_the_request_it_names() -> None:
    log = requested_log()
    cause = log.events[-1]
    request = log.side_request(cause)
    log.respond(request, text="")
    log.failed("empty_summary", cause=cause, request=request)
    fold = log.read()
    assert fold.compaction.requested is None
    assert fold.projections()["compaction"]["consecutive_failures"] == 1
    log.requested()  # may be asked again
    log.failed("model_error")  # but its outcome must name it
    log.refused_at_last()


@pytest.mark.parametrize("broken", ["trigger", "range"])
def test_a_compaction_answering_a_request_is_manual_over_its_range(broken: str) -> None:
    log = requested_log()
    cause = log.events[-1]
    request = log.side_request(cause)
    log.respond(request, text="sum")
    first = next(e for e in log.events if e.type == "user_input")
    last = log.events[cause.seq - 2 if broken == "trigger" else cause.seq - 3]
    log.compacted(first, last, request, "sum", cause=cause,
                  trigger="threshold" if broken == "trigger" else "manual")
    log.refused_at_last()


def test_the_summary_is_the_text_of_its_response() -> None:
    log = CompactionLog()
    first, *_, done = log.turn()
    log.user("next")
    request = log.side_request()
    log.respond(request, text="the real summary")
    log.compacted(first, done, request, "another summary")
    log.refused_at_last()


def test_the_summary_names_a_compaction_request() -> None:
    log = CompactionLog()
    first, turn_request, _, done = log.turn()
    log.user("next")
    log.compacted(first, done, turn_request, "ok")
    log.refused_at_last()


def test_ranges_nest_but_never_partly_overlap() -> None:
    log = CompactionLog()
    a = log.turn("a")
    b = log.turn("b")
    c = log.turn("c")
    log.user("d")
    log.summarize(a[0], b[-1], "a and b")
    log.summarize(a[0], c[-1], "a, b and c")  # holds the first range: fine
    log.read()
    log.summarize(b[0], log.events[-1], "from b on")  # cuts the second range
    log.refused_at_last()


def test_line_0_is_never_compacted() -> None:
    log = CompactionLog()
    _, *_, done = log.turn()
    log.user("next")
    log.summarize(log.events[0], done, "everything")
    log.refused_at_last()


def test_a_summarizer_calls_no_tool() -> None:
    log = CompactionLog()
    log.turn()
    log.user("next")
    request = log.side_request()
    part = {"type": "tool_use", "call_id": "c9", "name": "read", "input": {}}
    log.respond(request, part)
    log.add("tool_call", {
        "call_id": "c9", "name": "read", "input": {}, "request_event_id": request.event_id,
    })
    log.refused_at_last()


def test_the_breaker_opens_after_max_failures_and_a_compaction_closes_it() -> None:
    log = CompactionLog()
    first, *_, done = log.turn()
    log.user("next")
    for _ in range(3):  # the default max_failures
        log.failed("prompt_too_long")
    assert log.read().projections()["compaction"] == {
        "consecutive_failures": 3, "breaker_open": True,
    }
    log.summarize(first, done)
    assert log.read().projections()["compaction"]["breaker_open"] is False


# ---- what the model sees ---------------------------------------------------------------------


def _last_request_lines(log: CompactionLog) -> list[bytes]:
    rendered = render(log.events[0].data, log.events, log.artifacts)
    return rendered.data.splitlines(keepends=True)[1:]


def test_the_summary_stands_in_place_of_its_range() -> None:
    log = CompactionLog()
    first, *_ = log.turn("one <b>", "uno")
    tools = [{"description": "New.", "input_schema": {"type": "object"}, "name": "new"}]
    log.add("tools_changed", {"tools": tools, "tools_hash": value_hash(tools)})
    _, *_, done = log.turn("two", "dos")
    log.user("three")
    text = 'Said one & two; "<end>"'
    compacted = log.summarize(first, done, text)
    sha = compacted.data["summary_ref"]["sha256"]
    summary = {"role": "user", "content": [{"type": "text", "text": (
        f'<reference source="summary" id="{sha}" untrusted="true">\n'
        'Said one &amp; two; "&lt;end&gt;"\n</reference>'
    )}]}
    tools_line = {"role": "tools", "tools": [
        {"description": "New.", "input_schema": {"type": "object"}, "name": "new"}
    ]}
    three = {"role": "user", "content": [{"type": "text", "text": "three"}]}
    assert _last_request_lines(log) == [
        canonical(line) + b"\n" for line in (summary, tools_line, three)
    ]
    request = log.request()
    log.respond(request)
    assert replay(log.events, log.artifacts).ok


def test_a_later_compaction_drops_the_earlier_summary() -> None:
    log = CompactionLog()
    a = log.turn("a")
    b = log.turn("b")
    log.user("c")
    log.summarize(a[0], a[-1], "just a")
    log.summarize(a[0], b[-1], "a and b")
    lines = _last_request_lines(log)
    assert len(lines) == 2
    assert b"a and b" in lines[0]
    assert b"just a" not in b"".join(lines)


def test_a_summarizer_request_ends_with_the_ask_and_the_operator_instructions() -> None:
    log = requested_log("Keep the file names.")
    cause = log.events[-1]
    log.add("hook_decision", {
        "decision": "guide", "extension": "ext", "hook": "before_compact", "reason": "Be short.",
    })
    request = log.side_request(cause)
    body = log.artifacts[request.data["request_ref"]["sha256"]]
    last = body.splitlines()[-1]
    ask = SUMMARIZE + "\n\nAdditional instructions:\nKeep the file names.\nBe short."
    assert last == canonical({"role": "user", "content": [{"type": "text", "text": ask}]})
    # the history is the conversation up to the request: two turns of lines, then the ask
    assert len(body.splitlines()) == 1 + 4 + 1


def test_replay_refuses_a_summarizer_request_that_does_not_render() -> None:
    log = CompactionLog()
    log.turn()
    log.user("next")
    tampered = dict(log.side_request().data)
    log.events.pop()
    tampered["request_ref"] = {**tampered["request_ref"], "sha256": "0" * 64}
    request = log.add("model_request", tampered)
    result = replay(log.events, log.artifacts)
    assert result.mismatch is not None
    assert (result.mismatch.code, result.mismatch.seq) == ("request_hash_mismatch", request.seq)


# ---- context edits ---------------------------------------------------------------------------


def test_cleared_and_redacted_results_render_edited() -> None:
    log = CompactionLog()
    log.tool_turn("c1", "first secret result")
    log.tool_turn("c2", "héllo wörld, token=abc")
    log.user("next")
    log.add("context_edited", {"edits": [{"action": "clear", "call_id": "c1"}],
                               "reason": "threshold"})
    spans = [{"start": 0, "end": 1}, {"start": 1, "end": 3}, {"start": 15, "end": 24}]
    log.add("context_edited", {"edits": [
        {"action": "redact", "call_id": "c2", "part": 0, "spans": spans},
    ], "reason": "guardrail"})
    log.read()
    tool_lines = [line for line in _last_request_lines(log) if b'"role":"tool"' in line]
    assert [canonical_text(line) for line in tool_lines] == [
        "[tool result cleared: call_id=c1; read it with read_tool_result]",
        "[redacted]llo wörld, [redacted]",
    ]
    stored = [e for e in log.events if e.type == "tool_result"]
    assert stored[1].data["preview"] == "héllo wörld, token=abc"  # the log never changes
    request = log.request()
    log.respond(request)
    assert replay(log.events, log.artifacts).ok


def canonical_text(line: bytes) -> str:
    return str(json.loads(line)["content"][0]["text"])


@pytest.mark.parametrize("edit", [
    {"action": "redact", "call_id": "c1", "part": 0, "spans": [{"start": 1, "end": 2}]},
    {"action": "redact", "call_id": "c1", "part": 0, "spans": [{"start": 0, "end": 99}]},
    {"action": "redact", "call_id": "c1", "part": 1, "spans": [{"start": 0, "end": 1}]},
], ids=["inside-a-character", "past-the-end", "no-such-part"])
def test_a_redaction_lies_inside_a_text_part_on_character_boundaries(
    edit: dict[str, object],
) -> None:
    log = CompactionLog()
    log.tool_turn("c1", "éa")
    log.add("context_edited", {"edits": [edit], "reason": "guardrail"})
    log.refused_at_last()
