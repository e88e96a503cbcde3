"""An input a ``before_input`` hook denied (or whose hook failed) is no part of the conversation:
the next request does not render it and ``state.transcript`` does not keep it; an input the
hook let through, or a denial naming another input, changes nothing."""

from __future__ import annotations

import json

import pytest
from test_reader_rules import Log

from threads.log.render import render
from threads.testing.sample_log import USER


def _hook(log: Log, input_event_id: str, decision: str, hook: str = "before_input") -> None:
    log.add("hook_decision", {
        "decision": decision, "extension": "guard", "hook": hook,
        "input_event_id": input_event_id, "reason": "no secrets in prompts",
    })


@pytest.mark.parametrize(("decision", "hook", "kept"), [
    ("deny", "before_input", False),
    ("failed", "before_input", False),
    ("proceed", "before_input", True),
    ("deny", "before_model", True),
])
def test_a_denied_input_is_neither_rendered_nor_in_the_transcript(
    decision: str, hook: str, kept: bool
) -> None:
    log = Log()
    denied = log.add("user_input", {"source": "api", "text": "my password is hunter2"}, USER)
    _hook(log, denied.event_id, decision, hook)
    log.add("turn_completed", {"reason": "input_denied" if not kept else "end_turn"})
    log.user("what is on the roadmap?")
    request = log.request()
    reply = log.respond(request)
    log.done()
    fold = log.read()
    transcript = fold.state()["transcript"]
    assert ({"role": "user", "event_id": denied.event_id} in transcript) is kept
    assert transcript[-2:] == [
        {"role": "user", "event_id": log.events[-4].event_id},
        {"role": "assistant", "event_id": reply.event_id},
    ]
    rendered = render(log.events[0].data, log.events[: request.seq - 1]).data  # before it
    assert (b"hunter2" in rendered) is kept
    assert json.loads(rendered.splitlines()[-1])["content"][0]["text"] == (
        "what is on the roadmap?"
    )
