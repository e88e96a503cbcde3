"""A host's run result (the SSE stream's last message, read from the log) and the library's
result for the same ended turn agree: the same status, and for a failed turn the same code
(``threads.run.failed_code``), whether the turn ended ``error`` with a code, without one, or
with a failing reason of its own (``context_exhausted``)."""

from __future__ import annotations

from typing import Any

import pytest

from threads import Failed, Principal, agent
from threads.host.stream import outcome, run_slice
from threads.log.lines import Event
from threads.models.protocol import ModelCallError
from threads.store.protocol import Store
from threads.testing.scripted import Fail, ScriptItem, say, scripted_model

ALICE = Principal("api", "acme", "alice")


def terminal(code: str) -> Fail:
    return Fail(ModelCallError(f"scripted {code}", reason="provider_error",
                               provider_outcome="failed", code=code))


SCRIPTS: dict[str, list[ScriptItem]] = {
    "end_turn": [say("hello")],
    "error without a code": [say("...", stop_reason="pause_turn")] * 4,
    "error with a code": [terminal("secret_in_provider_output"), say("never")],
    "an adapter's own code": [terminal("quota_exceeded"), say("never")],
    "context_exhausted": [say("Half", stop_reason="context_window_exceeded")],
}


@pytest.mark.parametrize("ending", list(SCRIPTS))
async def test_the_stream_result_is_the_library_result(store: Store, ending: str) -> None:
    bot = agent(name="t", model=scripted_model(SCRIPTS[ending]))
    live = await bot.run("go", store=store, principal=ALICE)
    again = await bot.run(None, store=store, thread=live.thread.id, principal=ALICE)
    events: list[Event] = list(await live.thread.timeline())
    run_seq = next(e.seq for e in events if e.type == "user_input")
    run_events: list[Event] = []
    assert run_slice(events, run_seq, run_events)
    branch_id = events[0].branch_id
    streamed: dict[str, Any] | None = outcome(run_events, None, branch_id)  # type: ignore[arg-type]
    assert streamed is not None
    assert streamed["status"] == live.status == again.status
    if isinstance(live, Failed):
        assert isinstance(again, Failed)
        assert streamed["error"]["code"] == live.error.code == again.error.code
