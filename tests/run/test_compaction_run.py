"""The run compacts (issue 32 item 2): before a request past the pinned threshold, once after
``prompt_too_long``, and for an operator's ``Thread.compact``; a failing summarizer falls back
to sending the request as it is, the breaker stops repeated failures, and the pre-dispatch
guard ends a turn that can't fit ``context_exhausted`` without sending it. Both stores."""

from __future__ import annotations

import pytest

from threads import (
    Completed,
    ContextPolicy,
    ControlError,
    Failed,
    Principal,
    agent,
    open_thread,
)
from threads.log.lines import Event
from threads.store.protocol import Store
from threads.testing.chat_model import ChatModel, prompt_too_long
from threads.testing.scripted import server_error

ALICE = Principal("api", "local", "alice")
MALLORY = Principal("api", "other", "mallory")
TIGHT = ContextPolicy(reserve_tokens=0, compact_permille=500, keep_tail_tokens=100)
COMPACTION = ("compacted", "compaction_failed", "context_preflight_blocked")


async def chat(store: Store, model: ChatModel, turns: int, policy: ContextPolicy | None = TIGHT,
               thread: str | None = None) -> tuple[str, list[object]]:
    bot = agent(name="chat", model=model, context=policy)
    results: list[object] = []
    for i in range(turns):
        result = await bot.run(f"message {i} " + "words " * 20, store=store, principal=ALICE,
                               thread=thread)
        results.append(result)
        thread = result.thread.id  # type: ignore[attr-defined]
    assert thread is not None
    return thread, results


async def events(store: Store, thread_id: str) -> list[Event]:
    return await (await open_thread(store, thread_id, principal=ALICE)).timeline()


def kinds(log: list[Event]) -> list[str]:
    return [e.type for e in log if e.type in COMPACTION]


async def test_a_long_chat_compacts_before_it_passes_the_threshold(store: Store) -> None:
    model = ChatModel(context_window=1200)
    thread_id, results = await chat(store, model, 24)
    assert all(isinstance(r, Completed) for r in results)
    log = await events(store, thread_id)
    compactions = [e for e in log if e.type == "compacted"]
    assert compactions
    assert {e.data["trigger"] for e in compactions} == {"threshold"}
    assert "compaction_failed" not in kinds(log)
    # the summarizer's request is durable before it is sent, and answered before the turn's
    side = [e for e in log if e.type == "model_request" and e.data.get("purpose") == "compaction"]
    assert len(side) == len(compactions) == model.kinds().count("summary")
    # after a compaction the model sees the summary first, not the compacted range
    after = model.requests[model.kinds().index("summary") + 1]
    assert after.messages[0]["content"][0]["text"].startswith('<reference source="summary"')
    thread = await open_thread(store, thread_id, principal=ALICE)
    assert (await thread.replay()).ok
    state = await thread.fold()
    assert state.turns_completed == 24
    assert state.projections()["compaction"] == {"consecutive_failures": 0, "breaker_open": False}


async def test_without_a_context_policy_a_thread_never_compacts_itself(store: Store) -> None:
    thread_id, _ = await chat(store, ChatModel(context_window=100_000), 6, policy=None)
    assert kinds(await events(store, thread_id)) == []


async def test_prompt_too_long_compacts_once_then_sends_again(store: Store) -> None:
    roomy = ContextPolicy(reserve_tokens=0, compact_permille=1000, keep_tail_tokens=50)
    model = ChatModel(context_window=100_000)
    thread_id, _ = await chat(store, model, 3, policy=roomy)
    model.failures.append(("turn", prompt_too_long()))
    _, [result] = await chat(store, model, 1, policy=roomy, thread=thread_id)
    assert isinstance(result, Completed)
    log = await events(store, thread_id)
    at = next(i for i, e in enumerate(log) if e.type == "model_attempt_abandoned")
    assert log[at].data["reason"] == "prompt_too_long"
    tail = log[at:]
    assert [e.type for e in tail] == [
        "model_attempt_abandoned",
        "model_request", "model_response", "compacted",  # the summarizer, then the summary
        "model_request", "model_response", "turn_completed",  # the turn's request again
    ]
    compacted = next(e for e in tail if e.type == "compacted")
    assert compacted.data["trigger"] == "reactive"
    assert model.kinds()[-3:] == ["turn", "summary", "turn"]


async def test_without_a_policy_prompt_too_long_still_ends_the_turn(store: Store) -> None:
    model = ChatModel(failures=[("turn", prompt_too_long())])
    _, [result] = await chat(store, model, 1, policy=None)
    assert isinstance(result, Failed)
    assert result.error.code == "context_exhausted"


async def test_a_failing_summarizer_falls_back_and_the_breaker_stops_it(store: Store) -> None:
    model = ChatModel(context_window=1200, failures=[("summary", server_error().error)] * 3)
    bot = agent(name="chat", model=model, context=TIGHT)
    thread_id = None
    for i in range(40):  # until the conversation no longer fits
        result = await bot.run(f"message {i} " + "words " * 20, store=store, principal=ALICE,
                               thread=thread_id)
        thread_id = result.thread.id
        if not isinstance(result, Completed):
            break
    assert thread_id is not None
    log = await events(store, thread_id)
    failed = [e for e in log if e.type == "compaction_failed"]
    # each failure fell back to sending the turn's request as it was (those turns completed)
    assert [e.data["reason"] for e in failed] == ["model_error"] * 3
    thread = await open_thread(store, thread_id, principal=ALICE)
    assert (await thread.fold()).projections()["compaction"]["breaker_open"] is True
    assert model.kinds().count("summary") == 3  # the open breaker asks no more
    # the guard ends the turn that can't fit, without sending its request
    assert isinstance(result, Failed)
    assert result.error.code == "context_exhausted"
    assert [e.type for e in log[-3:]] == [
        "user_input", "context_preflight_blocked", "turn_completed",
    ]
    assert log[-2].data["action"] == "fail"
    assert log[-2].data["estimated_tokens"] >= log[-2].data["window_tokens"] == 1200
    assert log[-1].data == {"reason": "context_exhausted"}


async def test_an_operator_asks_for_a_compaction(store: Store) -> None:
    model = ChatModel()
    thread_id, _ = await chat(store, model, 3, policy=None)
    thread = await open_thread(store, thread_id, principal=ALICE)
    requested = await thread.compact(ALICE, instructions="Keep the message numbers.")
    with pytest.raises(ControlError) as twice:
        await thread.compact(ALICE)
    assert twice.value.code == "invalid_transition"
    _, [result] = await chat(store, model, 1, policy=None, thread=thread_id)
    assert isinstance(result, Completed)
    log = await events(store, thread_id)
    compacted = next(e for e in log if e.type == "compacted")
    request = next(e for e in log if e.event_id == compacted.data["summary_request_event_id"])
    assert compacted.data["trigger"] == "manual"
    assert compacted.data["cause_event_id"] == request.data["cause_event_id"] == requested
    assert compacted.seq < [e for e in log if e.type == "user_input"][-1].seq  # before input
    ask = model.requests[model.kinds().index("summary")].messages[-1]["content"][0]["text"]
    assert ask.endswith("\n\nAdditional instructions:\nKeep the message numbers.")
    assert (await thread.replay()).ok


@pytest.mark.parametrize("case", ["empty", "other_tenant"])
async def test_a_compaction_request_is_refused_with_a_code(store: Store, case: str) -> None:
    thread_id, _ = await chat(store, ChatModel(), 1, policy=None)
    thread = await open_thread(store, thread_id, principal=ALICE)
    who = MALLORY if case == "other_tenant" else ALICE
    with pytest.raises(ControlError) as refused:
        await thread.compact(who, instructions=" " if case == "empty" else None)
    assert refused.value.code == {"empty": "invalid_request", "other_tenant": "forbidden"}[case]
    assert "compaction_requested" not in [e.type for e in await thread.timeline()]
