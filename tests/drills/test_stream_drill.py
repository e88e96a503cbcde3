"""Crash drill mid-stream: a worker runs an agent on the real OpenAI adapter against a fake
provider served from this process; its second model reply is held mid-SSE and the worker is
SIGKILLed while that stream is in flight, after the first reply's effectful call was applied by
the fake service and committed. A fresh worker reruns the thread: recovery records the
interrupted attempt as unknown (crash), resends the same rendered request, the run completes,
and the service applied the effect exactly once.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from drill_harness import SUMMARY, Drill, call_keys, duplicates, log_events

from threads.testing.fake_providers import (
    FakeInThread,
    OpenAIFake,
    ScriptedToolCall,
    ScriptedTurn,
)
from threads.testing.fake_service import FakeService

pytestmark = pytest.mark.drill

FIRST = ScriptedTurn(tool_calls=[
    ScriptedToolCall("call_look", "look_up", ['{"account": ', '"a1"}']),
    ScriptedToolCall("call_mail", "send_email", ['{"to": "c@', 'example.com"}']),
], response_id="r1")
ANSWER = ["All ", "done: ", "account a1 ", "is open ", "and the customer ", "was emailed."]


@pytest.mark.parametrize("api", ["responses", "chat"])
def test_kill_mid_stream_recovers_without_a_duplicate_effect(
    service: FakeService, tmp_path: Path, api: str
) -> None:
    drill = Drill(tmp_path / api, service)
    with FakeInThread(OpenAIFake) as fake:
        model = {"provider": "openai", "api": api, "base_url": fake.base_url}
        fake.script(FIRST, ScriptedTurn(text_chunks=ANSWER, hold_after_events=3))
        worker = drill.spawn(input="go", model=model)
        fake.wait_held()  # the second reply is in flight, three events in
        events = log_events(drill.store_dir)
        [email_key] = [k for k, (_, name) in call_keys(events).items() if name == "send_email"]
        assert service.client().count(email_key) == 1
        assert events[-1]["type"] == "model_request"
        drill.kill(worker)

        fake.script(ScriptedTurn(text_chunks=ANSWER, response_id="r3"))
        result = drill.run(thread=drill.thread_id(), input=None, model=model)
        requests = fake.requests()

    assert result["status"] == "completed", result
    assert result["output"] == "".join(ANSWER)
    events = log_events(drill.store_dir)
    [abandoned] = [e for e in events if e["type"] == "model_attempt_abandoned"]
    assert abandoned["actor"] == {"kind": "recovery"}
    assert (abandoned["data"]["provider_outcome"], abandoned["data"]["reason"]) == (
        "unknown", "crash")
    tail = [e["type"] for e in events[events.index(abandoned):]]
    assert tail == ["model_attempt_abandoned", "model_request", "model_response",
                    "turn_completed"]
    assert [e["data"]["attempt"] for e in events if e["type"] == "model_request"] == [1, 1, 2]
    assert len(requests) == 3
    assert requests[2].body == requests[1].body  # the resend is the same rendered request
    assert service.client().count(email_key) == 1
    assert duplicates(drill) == {}
    assert drill.prefix_breaks == 0
    SUMMARY.append(f"stream drill ({api}): killed mid-SSE after 3 events, resent once, "
                   f"email applied {service.client().count(email_key)}x")
