"""A cancel that lands while a response's calls are being recorded (format: "Recording a
response's calls"): once the turn has ``cancel_requested`` nothing more is decided; each
recorded call that never began, and each ``tool_use`` part not yet recorded, is closed
``not_executed`` ("not executed: cancelled") without a ``permission_decision``, nothing runs,
and the turn ends ``cancelled``. The half-recorded reply is the state another writer (or a
crash of one that records call by call) leaves; the cancel arrives through the control path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from threads import Cancelled, Completed, FakeClock, Principal, agent, open_thread, tool
from threads.log.render import render
from threads.run.agent import Agent
from threads.store.protocol import Store
from threads.store.transfer import import_log
from threads.testing.sample_log import MODEL, USER, SampleLog
from threads.testing.scripted import say, scripted_model

ALICE = Principal(USER["principal"]["issuer"], USER["principal"]["tenant"],
                  USER["principal"]["subject"])
PARTS = ["c1", "c2", "c3"]


class Path_(BaseModel):
    path: str


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock(1790000000000)


def reader(ran: list[str], *replies: Any) -> Agent:
    async def read(args: Path_, ctx: Any) -> str:
        ran.append(args.path)
        return "text"

    # the log already holds reply #1 (the three calls): the model is asked from #2 on
    return agent(name="reader", model=scripted_model([say("(recorded)"), *replies]),
                 tools=[tool(name="read_file", description="Read a file.", input=Path_,
                             execute=read, effect="read_only")])


def half_recorded(bot: Agent) -> SampleLog:
    """A turn whose reply calls read_file three times, recorded up to the first call (its
    tool_call and allow), as a writer that records call by call leaves it mid-recording."""
    log = SampleLog(FakeClock(1790000000000))
    log.add("thread_started", bot.config())
    log.add("user_input", {"source": "api", "text": "read three files"}, USER)
    rendered = render(log.events[0].data, log.events)
    log.artifacts[rendered.sha256] = rendered.data
    request = log.add("model_request", {
        "attempt": 1,
        "declared_prefix": rendered.declared_prefix(),
        "request_ref": rendered.request_ref(),
    })
    parts = [{"call_id": c, "input": {"path": f"{c}.md"}, "name": "read_file", "type": "tool_use"}
             for c in PARTS]
    log.add("model_response", {
        "completeness": "complete", "content": parts, "request_event_id": request.event_id,
        "stop_reason": "tool_use", "usage": {"input_tokens": 10, "output_tokens": 5},
    }, MODEL)
    log.add("tool_call", {"call_id": "c1", "input": {"path": "c1.md"}, "name": "read_file",
                          "request_event_id": request.event_id})
    log.add("permission_decision", {"call_id": "c1", "decision": "allow", "source": "policy",
                                    "rule_id": "default"})
    return log


def brief(events: list[Any]) -> list[tuple[str, str | None, str | None]]:
    return [(e.type, e.data.get("call_id"), e.data.get("origin")) for e in events]


async def test_a_cancel_between_two_calls_closes_the_rest_unauthorized(store: Store) -> None:
    ran: list[str] = []
    bot = reader(ran)
    log = half_recorded(bot)
    await import_log(store, log.export(), tenant_id=ALICE.tenant)
    thread = await open_thread(store, log.header.thread_id)
    await thread.cancel(ALICE, reason="stop")  # lands after call 1, before calls 2 and 3
    before = len(await thread.timeline())

    result = await bot.run(None, thread=log.header.thread_id, store=store, principal=ALICE)

    assert isinstance(result, Cancelled), result
    assert ran == []  # nothing after the cancel runs, not even the allowed first call
    appended = (await thread.timeline())[before:]
    assert brief(appended) == [
        ("tool_result", "c1", "not_executed"),
        ("tool_call", "c2", None),
        ("tool_result", "c2", "not_executed"),
        ("tool_call", "c3", None),
        ("tool_result", "c3", "not_executed"),
        ("cancelled", None, None),
        ("turn_completed", None, None),
    ]
    assert {e.data["preview"] for e in appended if e.type == "tool_result"} == {
        "not executed: cancelled"}
    assert appended[-1].data == {"reason": "cancelled"}
    state = await thread.state()
    assert state.pending_calls == ()
    everything = await thread.timeline()
    calls = {e.data["call_id"] for e in everything if e.type == "tool_call"}
    results = {e.data["call_id"] for e in everything if e.type == "tool_result"}
    assert calls == results == set(PARTS)  # no tool_use left without its call and result
    decided = [e.data["call_id"] for e in everything if e.type == "permission_decision"]
    assert decided == ["c1"]  # the parts recorded after the cancel were never authorized


async def test_without_a_cancel_the_rest_is_recorded_decided_and_run(store: Store) -> None:
    """The control case: the same half-recorded reply resumes by deciding the rest first."""
    ran: list[str] = []
    bot = reader(ran, say("done"))
    log = half_recorded(bot)
    await import_log(store, log.export(), tenant_id=ALICE.tenant)
    thread = await open_thread(store, log.header.thread_id)
    before = len(await thread.timeline())
    result = await bot.run(None, thread=log.header.thread_id, store=store, principal=ALICE)
    assert isinstance(result, Completed), result
    assert ran == ["c1.md", "c2.md", "c3.md"]
    appended = (await thread.timeline())[before:]
    assert brief(appended)[:4] == [
        ("tool_call", "c2", None), ("permission_decision", "c2", None),
        ("tool_call", "c3", None), ("permission_decision", "c3", None),
    ]
